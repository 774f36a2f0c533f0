"""``zlink-trio demo``: a workload over several host processes (specs/demo.md DEMO-*)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest
import trio

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


@pytest.mark.spec("DEMO-1", "DEMO-3", "DEMO-4", "DEMO-5")
def test_demo_runs_three_hosts_and_ends_clean(store_dsn: str) -> None:
    """Three host processes run the workload for 3 s: progress lines, a summary where every
    host holds activations, no errors, and an ordered shutdown with every host exiting 0."""
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
    assert "summary (3 hosts" in out
    assert "shutdown: h3 exit 0, h2 exit 0, h1 exit 0" in out
    for name in ("h1", "h2", "h3"):
        row = _row(out, name)
        # host node sends requests msg/s p50 p99 activations errors exit
        sends, requests = int(row[2].replace(",", "")), int(row[3].replace(",", ""))
        assert sends > 0, out
        assert requests > 0, out
        assert int(row[7]) > 0, out  # activations of this node, read from the store
        assert "0" == row[8], out  # errors
        assert "0" == row[9], out  # exit status
    assert "errors by kind: none" in out
    assert out.rstrip().endswith("demo: ok")
    assert "Traceback" not in done.stderr


@pytest.mark.spec("DEMO-6")
async def test_ctrl_c_still_shuts_every_host_down(store_dsn: str) -> None:
    """SIGINT during the workload ends it, every host still shuts down in order and exits 0,
    and the demo exits 130."""
    process = await trio.lowlevel.open_process(
        [*DEMO, "--hosts", "2", "--seconds", "60", "--dsn", store_dsn],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_environ(),
    )
    seen = b""
    try:
        assert process.stdout is not None
        with trio.fail_after(DEMO_TIMEOUT):
            while b"msg/s" not in seen:
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
    assert "shutdown: h2 exit 0, h1 exit 0" in out
