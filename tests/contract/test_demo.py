"""``zlink-trio demo``: a workload over several host processes (specs/demo.md DEMO-*)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest
import trio

from zlink_trio import __main__ as command
from zlink_trio import _demo
from zlink_trio._demo.parent import Parent
from zlink_trio._demo.record import HostRecord
from zlink_trio._demo.update import RollingUpdate
from zlink_trio._integration.store import DSN_VARIABLE

DEMO = (sys.executable, "-m", "zlink_trio", "demo")
DEMO_TIMEOUT = 120.0
PROGRESS = re.compile(
    r"^\[\s*\d+\.\ds\]\s+[\d,]+ msg/s  req p50 +\S+ p99 +\S+  activations (h\d+=\d+ ?)+"
    r"  errors \S+"
)


async def _close(process: trio.Process) -> None:
    """Kill ``process`` if it still runs, reap it and close its pipes."""
    with trio.CancelScope(shield=True):
        if process.returncode is None:
            process.kill()
        await process.wait()
        for stream in (process.stdin, process.stdout, process.stderr):
            if stream is not None:
                await stream.aclose()


def _environ() -> dict[str, str]:
    return {name: value for name, value in os.environ.items() if name != DSN_VARIABLE}


def _row(stdout: str, name: str) -> list[str]:
    """The summary row of host ``name`` split on whitespace."""
    for line in stdout.splitlines():
        if line.startswith(f"{name} "):
            return line.split()
    raise AssertionError(f"no summary row for {name}:\n{stdout}")


@pytest.mark.spec("DEMO-1", "DEMO-2", "DEMO-3", "DEMO-4", "DEMO-5", "DEMO-7", "DEMO-8", "DEMO-9")
def test_demo_runs_three_hosts_through_a_rolling_update_and_ends_clean(store_dsn: str) -> None:
    """Three host processes run the workload for 3 s, and a third of the way in h1 relocates to
    a new host h4 of version 2 and exits: progress lines, every status of the update, every
    unit of h1 on h4 with its generation, no errors (no call failed, no read went back), a
    summary where h1 owns nothing any more and every other host holds activations, and an
    ordered shutdown with every host exiting 0."""
    done = subprocess.run(
        [*DEMO, "--hosts", "3", "--seconds", "3", "--dsn", store_dsn],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        check=False,
        env=_environ(),
    )
    out = done.stdout
    assert 0 == done.returncode, out + done.stderr
    assert "hosts ready, each sees its 2 peers" in out
    progress = [line for line in out.splitlines() if PROGRESS.match(line)]
    assert len(progress) >= 2, out
    assert "summary (4 hosts" in out
    assert "shutdown: h4 exit 0, h3 exit 0, h2 exit 0, h1 exit 0" in out
    # The update, in the order it happens (DEMO-7, DEMO-9).
    said = [line for line in out.splitlines() if line.startswith("rolling update: ")]
    moving = re.compile(r"^rolling update: h1 relocates (\d+) units to version 2 \(h4\)")
    moves = re.compile(
        r"^  moves: [1-9]\d* \(a room with its members is one\), longest seal to open \d+ ms$", re.M
    )
    steps = [moving.sub("relocates", line).removeprefix("rolling update: ") for line in said]
    assert [
        "starting h4 with application version 2",
        "h4 SERVING",
        "relocates, then shuts down",
        "h1 RELOCATING",
        "h1 RELOCATED",
        "h1 DRAINING",
        "h1 STOPPED",
        "h4 DRAINING",
        "h4 STOPPED",
    ] == steps[:9], out
    to_move = int(next(m for line in said if (m := moving.match(line))).group(1))
    assert to_move >= 3, out  # h1's rooms, counters and users, without its Entry Spot
    # The workload goes on after the update: units that moved are called where they are now.
    after = [line for line in progress if "update h1=exited h4=SERVING" in line]
    assert len(after) >= 2, out
    assert all(f"moved {to_move}/{to_move}" in line for line in after), out
    # msg/s; the last line may cover a moment without a report of the hosts (every 0.5 s)
    assert any(int(line.split()[2].replace(",", "")) > 0 for line in after), out
    assert re.search(
        r"^rolling update: h1 \(version 1\) -> h4 \(version 2\): RELOCATED reason NONE"
        r" in \d+\.\d\ds$",
        out,
        re.M,
    ), out
    assert f"  units moved: {to_move}/{to_move} (store: on h4 with their object generation)" in out
    assert moves.search(out), out  # from the runtime's MoveTimes
    assert "  h1 went SERVING -> RELOCATING -> RELOCATED -> DRAINING -> STOPPED" in out
    # Follow relays: h1's own count (RELOC-79), often 0 here: routes catch up before h1 closes.
    assert re.search(
        r"^  errors in the run: 0; follow relays by h1: \d+ \(calls it sent on to units that"
        r" had moved\)$",
        out,
        re.M,
    ), out
    assert all(re.search(r" relays \d+$", line) for line in after), out
    for name in ("h1", "h2", "h3", "h4"):
        row = _row(out, name)
        # host node sends requests msg/s p50 p99 activations errors exit
        sends, requests = int(row[2].replace(",", "")), int(row[3].replace(",", ""))
        assert (sends > 0 and requests > 0) is (name != "h4"), out  # h4 only serves
        owned = int(row[7])  # activations of this node, read from the store
        assert owned == 0 if name == "h1" else owned > 0, out
        assert "0" == row[8], out  # errors
        assert "0" == row[9], out  # exit status
    assert int(_row(out, "h4")[7]) == to_move + 1, out  # what moved and its own Entry Spot
    # Every host that runs the workload reached every kind of object (DEMO-2).
    for name in ("h1", "h2", "h3"):
        reached = re.search(
            rf"^reached by {name}: rooms ([\d,]+), users ([\d,]+), counters ([\d,]+)$", out, re.M
        )
        assert reached is not None, out
        assert all(int(n.replace(",", "")) > 0 for n in reached.groups()), out
    assert "reached by h4" not in out  # it only serves
    assert "errors by kind: none" in out
    assert out.rstrip().endswith("demo: ok")
    assert "Traceback" not in done.stderr


@pytest.mark.spec("DEMO-6")
async def test_ctrl_c_still_shuts_every_host_down(store_dsn: str) -> None:
    """SIGINT during the workload, just as h1 is told to relocate to the new host h3, ends it;
    every host still shuts down in order and exits 0, and the demo exits 130."""
    process = await trio.lowlevel.open_process(
        [*DEMO, "--hosts", "2", "--seconds", "6", "--dsn", store_dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environ(),
    )
    seen = b""
    try:
        assert process.stdout is not None
        with trio.fail_after(DEMO_TIMEOUT):
            while b"rolling update: h1 relocates" not in seen:
                chunk = await process.stdout.receive_some(4096)
                assert chunk, seen.decode()
                seen += chunk
            process.send_signal(signal.SIGINT)
            while chunk := await process.stdout.receive_some(4096):
                seen += chunk
            returncode = await process.wait()
    finally:
        await _close(process)
    out = seen.decode()
    assert 130 == returncode, out
    assert "demo: interrupted" in out
    assert "shutdown: h3 exit 0, h2 exit 0, h1 exit 0" in out


@pytest.mark.spec("DEMO-7")
def test_no_rolling_update_leaves_the_update_out(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The update is on unless ``--no-rolling-update`` is given; a run without it has no
    update to start (checked without running a demo: the flag reaches ``Parent``)."""
    calls: list[dict[str, object]] = []

    def fake_main(**options: object) -> int:
        calls.append(options)
        return 0

    monkeypatch.setattr(_demo, "main", fake_main)
    assert 0 == command.main(["demo", "--seconds", "2"])
    assert 0 == command.main(["demo", "--no-rolling-update", "--hosts", "2"])
    assert 0 == command.main(["demo", "--rolling-update"])
    assert [True, False, True] == [options["rolling_update"] for options in calls]
    assert {"hosts": 2, "seconds": 10.0, "dsn": None} == {
        name: calls[1][name] for name in ("hosts", "seconds", "dsn")
    }
    with_update = Parent(3, 9.0, "dsn", tmp_path, sys.stdout)
    assert with_update.update is not None
    assert 3.0 == with_update.update.delay  # a third of the way in
    assert with_update.update.source is with_update.hosts[0]
    assert Parent(3, 9.0, "dsn", tmp_path, sys.stdout, rolling_update=False).update is None


class _Hosts:
    """A parent whose one host is told to relocate and answers BLOCKED: the update's side only,
    without processes (``update.Hosts``)."""

    def __init__(self, workdir: Path) -> None:
        self.hosts = [HostRecord(0, "m-h1", workdir / "h1.toml")]
        self.mesh = "m"
        self.workdir = workdir
        self.changed = trio.Event()
        self.said: list[str] = []
        self.sent: list[tuple[str, str]] = []

    def _note(self) -> None:
        self.changed.set()
        self.changed = trio.Event()

    def say(self, text: str) -> None:
        self.said.append(text)

    def write_config(
        self, host: HostRecord, rids: Sequence[str], version: str, *, spare: bool
    ) -> None:
        assert ("2", True, ["m-h1", "m-h2"]) == (version, spare, list(rids))

    async def start(self, host: HostRecord, nursery: trio.Nursery) -> None:
        host.phase = "ready"
        self._note()

    async def send(self, host: HostRecord, command: str) -> None:
        self.sent.append((host.name, command))
        blocked = {"outcome": "BLOCKED", "reason": "RELOCATION_DISABLED", "seconds": 0.01}
        host.report({"event": "relocated", **blocked})
        self._note()

    async def read_store(self) -> dict[str, tuple[str, int, bool]]:
        return {"spot/room": ("m-h1", 4, False), "spot/entry": ("m-h1", 1, True)}

    async def changed_wait(self) -> None:
        await self.changed.wait()


@pytest.mark.spec("DEMO-7", "DEMO-9")
async def test_a_blocked_relocation_fails_the_update(tmp_path: Path) -> None:
    """The spare of version 2 starts, h1 is told to relocate to version 2 with its units (its
    Entry Spot aside) to move; a BLOCKED answer is the update's problem, which fails the demo,
    and the summary says the outcome without a units-moved figure it never read."""
    hosts = _Hosts(tmp_path)
    update = RollingUpdate(hosts, 0.0)
    async with trio.open_nursery() as nursery:
        await update.run(nursery)
    assert [("h1", "relocate 2")] == hosts.sent
    assert {"spot/room": 4} == update.to_move
    assert "BLOCKED/RELOCATION_DISABLED" == update.problem
    for host in update.hosts():
        host.returncode = 0
    update.source.stderr_tail.append("WARNING moving s/1 to m-h2 failed before its commit")
    lines = update.summary(0)
    assert lines[0].endswith(": BLOCKED reason RELOCATION_DISABLED in 0.01s"), lines
    assert "  units moved: not read (the update did not end)" in lines
    # What the source logged says why (DEMO-9).
    assert "  h1 | WARNING moving s/1 to m-h2 failed before its commit" == lines[-1]


@pytest.mark.spec("DEMO-5")
def test_a_demo_whose_hosts_cannot_start_names_the_cause(tmp_path: Path) -> None:
    """Hosts that cannot reach their store fail the demo (exit 1, ``demo: FAILED``), and each
    host's line names the error itself, not the Trio nursery that carried it."""
    done = subprocess.run(
        [*DEMO, "--hosts", "2", "--seconds", "1", "--dsn", "postgresql://nobody@127.0.0.1:9/none"],
        capture_output=True,
        text=True,
        timeout=DEMO_TIMEOUT,
        env=_environ(),
        cwd=tmp_path,
        check=False,
    )
    assert 1 == done.returncode, done.stdout + done.stderr
    assert "demo: FAILED" in done.stdout
    causes = [line for line in done.stdout.splitlines() if re.match(r"^h\d \(", line)]
    assert 2 == len(causes), done.stdout
    for line in causes:
        assert "ZLinkError: UNAVAILABLE: cannot reach PostgreSQL at 127.0.0.1:9/none" in line


@pytest.mark.spec("DEMO-1")
@pytest.mark.parametrize(("hosts", "accepted"), [("1", True), ("32", True), ("33", False)])
def test_the_host_count_is_bounded_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], hosts: str, accepted: bool
) -> None:
    """``--hosts`` takes 1 to 32; 33 is a usage error (status 2) naming the bound and its
    reason, and no demo starts."""
    calls: list[dict[str, object]] = []

    def fake_main(**options: object) -> int:
        calls.append(options)
        return 0

    monkeypatch.setattr(_demo, "main", fake_main)
    if accepted:
        assert 0 == command.main(["demo", "--hosts", hosts])
        assert [int(hosts)] == [options["hosts"] for options in calls]
        return
    with pytest.raises(SystemExit) as exited:
        command.main(["demo", "--hosts", hosts])
    assert 2 == exited.value.code
    assert "at most 32, got 33" in capsys.readouterr().err
    assert [] == calls


@pytest.mark.spec("DEMO-10")
def test_a_demo_whose_output_closes_shuts_down_quietly(store_dsn: str, tmp_path: Path) -> None:
    """``zlink-trio demo | head -2``: once the reader is gone the demo stops its workload, shuts
    its hosts down and exits 1, with no traceback and no host process left behind (their
    configs live in its work folder, here under ``tmp_path``)."""
    env = {**_environ(), "TMPDIR": str(tmp_path)}
    demo = subprocess.Popen(
        [*DEMO, "--hosts", "2", "--seconds", "60", "--no-rolling-update", "--dsn", store_dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )
    try:
        assert demo.stdout is not None
        first = [demo.stdout.readline() for _ in range(2)]
        demo.stdout.close()  # the reader goes away before the demo writes its next line
        # It stops: a demo that ran its minute of workload out would time out here.
        _out, err = demo.communicate(timeout=30)
    finally:
        demo.kill()
    assert first[1].startswith("starting 2 hosts in mesh demo-"), first
    assert "Traceback" not in err, err
    assert "BrokenPipeError" not in err, err
    assert 1 == demo.returncode
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True)
    assert "" == left.stdout
