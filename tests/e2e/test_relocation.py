"""Relocation across OS processes under continuous traffic, checked over the whole history
(issue 14, Proof and item 6; specs/relocation.md "Across processes").

Three hosts ``a``, ``b`` and ``c`` run as separate processes (``reloc_child.py``) over one
store; the Spots (``reloc_app``: User Spots ``reloc.Room`` and Instance Spots ``reloc.Counter``,
each carrying its per-sender last seq through its adapter) are placed on ``a``; senders on ``b``
and ``c`` send one-way messages and requests with per-sender sequence numbers all along; ``a``
relocates (a rolling update to ``c``, the one host of the next application version, or a
planned maintenance to ``b`` or ``c``). Every host
writes the turns it ran and the calls its senders made to files; ``history_check.check`` reads
them all and names every broken invariant: loss, duplicate, per-sender reorder, state that did
not travel, two incarnations serving at one instant, a call without exactly one end, an error
the contract does not allow.

The failure tests force the moment they name with ``reloc_app.gates`` (a point that writes a
``.reached`` file and waits for a ``.release`` file), never by sleeping: the target killed -9
while it restores (before the commit), the source killed -9 in its ``on_closing`` after the
commit, the source's store cut (a TCP proxy) between the target's restore and the commit, the
source stopped (SIGSTOP) while the target restores, past its lease.

``ZLINK_RELOC_E2E_SPOTS`` sets how many Spots the traffic test places (default 120, half of
each kind); ``ZLINK_RELOC_E2E_SPOTS=1000`` is the size issue 14 names, for a run by hand.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager, suppress
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.e2e import history_check
from tests.e2e.harness import Child, eventually
from tests.e2e.store_proxy import store_proxy

CHILD = Path(__file__).resolve().parent / "reloc_child.py"
SPOTS = int(os.environ.get("ZLINK_RELOC_E2E_SPOTS", "120"))
LEASE = 2.0
"""Short, so a dead or paused host is removed in seconds (fence at 1.6 s, removal at 2.4 s)."""
WAIT = 45.0
"""Bound for anything the tests wait for; generous for a loaded 2-core machine."""
REQUEST_TIMEOUT = 20.0
"""A request's bound: far above the seconds a dead peer takes to be noticed (liveness, lease)."""
TRAFFIC = {"seed": 14, "pause": 0.01, "timeout": REQUEST_TIMEOUT}
Calls = list[dict[str, Any]]


class Hosts:
    """The three host processes of one test, and the folder they write to."""

    def __init__(self, folder: Path, children: dict[str, Child]) -> None:
        self.folder = folder
        self.children = children

    def __getitem__(self, rid: str) -> Child:
        return self.children[rid]

    def records(self, prefix: str) -> list[dict[str, Any]]:
        """Every record of every host's ``prefix-*.jsonl`` (``turns`` or ``calls``); a line a
        killed process left half-written is skipped."""
        found = []
        for path in sorted(self.folder.glob(f"{prefix}-*.jsonl")):
            for line in path.read_text().splitlines():
                with suppress(json.JSONDecodeError):
                    found.append(json.loads(line))
        return found

    def turns_after(self, moment: float, host: str | None = None) -> int:
        return sum(
            1
            for turn in self.records("turns")
            if turn["start"] > moment and host in (None, turn["host"])
        )

    async def reached(self, rid: str, point: str) -> str:
        """Wait until ``rid``'s gate ``point`` is reached; the Spot id it was reached for."""
        path = self.folder / f"{rid}.{point}.reached"

        async def there() -> str:
            return path.read_text() if path.exists() else ""

        return await eventually(there, WAIT)

    def release(self, rid: str, point: str) -> None:
        (self.folder / f"{rid}.{point}.release").touch()

    async def result(self, rid: str) -> dict[str, str]:
        """The result of ``rid``'s relocation, once it has one."""
        path = self.folder / f"{rid}.result"

        async def written() -> dict[str, str]:
            return json.loads(path.read_text()) if path.exists() else {}

        return await eventually(written, WAIT)

    async def gone(self, rid: str, survivors: tuple[str, ...]) -> float:
        """Wait until no survivor lists ``rid`` as a peer any more; when that was seen."""
        for survivor in survivors:

            async def forgotten(survivor: str = survivor) -> bool:
                answer = await self.children[survivor].ask("status")
                return rid not in answer["peers"]

            await eventually(forgotten, WAIT)
        return time.monotonic()

    async def exited(self, rid: str) -> int:
        child = self.children[rid]
        with trio.fail_after(WAIT):
            status = await child.process.wait()
        child.alive = False
        return status


@asynccontextmanager
async def three_hosts(
    store_dsn: str,
    folder: Path,
    versions: Mapping[str, str],
    dsns: Mapping[str, str] | None = None,
) -> AsyncIterator[Hosts]:
    """Hosts ``a``, ``b`` and ``c`` of a new mesh, each with its application version, ready
    once each lists the other two; every process is killed (after SIGCONT) when the block ends
    by an exception, and shut down in order when it ends normally."""
    mesh = f"reloc-{uuid.uuid4().hex[:8]}"
    children: dict[str, Child] = {}
    try:
        for rid, version in versions.items():
            arguments = ["--mesh", mesh, "--dsn", (dsns or {}).get(rid, store_dsn)]
            arguments += ["--rid", rid, "--peers", str(len(versions) - 1)]
            arguments += ["--lease", str(LEASE), "--version", version, "--folder", str(folder)]
            with open(folder / f"{rid}.log", "wb") as log:
                process = await trio.lowlevel.open_process(
                    [sys.executable, str(CHILD), *arguments],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=log,
                )
            children[rid] = Child(rid, process)
        with trio.fail_after(WAIT):
            async with trio.open_nursery() as nursery:
                for child in children.values():
                    nursery.start_soon(child.ready)
        hosts = Hosts(folder, children)
        yield hosts
        for child in children.values():
            if child.alive:
                assert 0 == await child.stop(), f"host {child.rid} did not stop cleanly"
    finally:
        with trio.CancelScope(shield=True):
            for child in children.values():
                if child.process.returncode is None:
                    os.kill(child.process.pid, signal.SIGCONT)
                    child.process.kill()
            with trio.move_on_after(WAIT):
                for child in children.values():
                    await child.process.wait()
            for child in children.values():
                for stream in (child.process.stdin, child.process.stdout):
                    if stream is not None:
                        await stream.aclose()


async def start_traffic(hosts: Hosts, rooms: list[str], counters: list[str]) -> None:
    for rid in ("b", "c"):
        senders = [f"{rid}{number}" for number in range(3)]
        answer = await hosts[rid].ask(
            "traffic", senders=senders, rooms=rooms, counters=counters, **TRAFFIC
        )
        assert answer["ok"], answer


async def warm_up(hosts: Hosts, turns: int) -> None:
    """Wait until the Spots have run ``turns`` turns of the traffic."""

    async def enough() -> bool:
        return len(hosts.records("turns")) >= turns

    await eventually(enough, WAIT)


async def traffic_after(hosts: Hosts, moment: float, host: str, turns: int) -> None:
    """Wait until ``host`` ran ``turns`` turns that began after ``moment``."""

    async def enough() -> bool:
        return hosts.turns_after(moment, host) >= turns

    await eventually(enough, WAIT)


async def stop_and_check(
    hosts: Hosts, senders_on: tuple[str, ...], **excuses: history_check.Excuse
) -> history_check.Report:
    """Stop the senders on ``senders_on``, wait until every acknowledged send the contract
    keeps was handled (the last sends may still be on their way), and check the history."""
    for rid in senders_on:
        assert (await hosts[rid].ask("stop", grace=REQUEST_TIMEOUT + 5))["ok"]

    async def settled() -> bool:
        report = history_check.check(hosts.records("turns"), hosts.records("calls"), **excuses)
        return "lost" not in report.violations

    with suppress(trio.TooSlowError):  # the real check below names what is still missing
        await eventually(settled, 10)
    return history_check.check(hosts.records("turns"), hosts.records("calls"), **excuses)


def assert_clean(report: history_check.Report) -> None:
    assert not report.violations, report.summary()


@pytest.mark.spec("RELOC-55", "RELOC-70")
@pytest.mark.parametrize(
    ("mode", "versions"),
    [
        ("ROLLING_UPDATE", {"a": "1", "b": "1", "c": "2"}),
        ("PLANNED_MAINTENANCE", {"a": "1", "b": "1", "c": "1"}),
    ],
    ids=["rolling-update", "planned-maintenance"],
)
async def test_a_host_relocates_and_shuts_down_under_traffic_with_nothing_lost(
    store_dsn: str, tmp_path: Path, mode: str, versions: dict[str, str]
) -> None:
    """``a`` relocates and shuts down while six senders on ``b`` and ``c`` keep calling every
    Spot: a rolling update to ``c`` (version 2, the only host of it), or a planned maintenance
    to whichever of ``b`` and ``c`` ``a`` chooses. ``a`` moves every Spot to that one target
    and exits 0; every acknowledged send was handled once, every request answered once with no
    error, each sender's messages to each Spot in order, each Spot's state carried (its object
    generation kept) and no two incarnations of an id serving at one instant."""
    rooms = [f"room-{number:04}" for number in range(SPOTS // 2)]
    counters = [f"counter-{number:04}" for number in range(SPOTS - SPOTS // 2)]
    async with three_hosts(store_dsn, tmp_path, versions) as hosts:
        created = await hosts["a"].ask("create", rooms=rooms, counters=counters)
        assert {"a"} == set(created["rooms"].values()), created
        await start_traffic(hosts, rooms, counters)
        await warm_up(hosts, turns=2 * SPOTS)
        version = "2" if mode == "ROLLING_UPDATE" else None
        command = {"mode": mode, "version": version, "deadline": 40.0, "shutdown": True}
        assert (await hosts["a"].ask("relocate", **command))["ok"]
        assert {"outcome": "RELOCATED", "reason": "NONE"} == await hosts.result("a")
        assert 0 == await hosts.exited("a")
        await traffic_after(hosts, time.monotonic(), None, turns=SPOTS)  # a is gone
        report = await stop_and_check(hosts, ("b", "c"))
    targets = {i.host for found in report.incarnations.values() for i in found} - {"a"}
    assert 1 == len(targets), targets
    (target,) = targets
    assert mode == "PLANNED_MAINTENANCE" or "c" == target
    assert not report.violations, report.summary()
    assert {} == dict(report.errors)
    moved = 0
    for spot_id in rooms + counters:
        # A Spot the traffic missed before or after the move has fewer incarnations.
        hosts_of = report.hosts_of(spot_id)
        incarnations = report.incarnations.get(spot_id, [])
        assert hosts_of in ([], ["a"], [target], ["a", target]), incarnations
        moved += hosts_of == ["a", target]
        assert len({incarnation.gen for incarnation in incarnations}) <= 1, incarnations
    assert moved >= SPOTS // 2, f"only {moved} Spots served on both sides of the move"


async def relocate(hosts: Hosts, shutdown: bool = True) -> None:
    """Start ``a``'s rolling update to version 2 (host ``c``); its result comes as a file."""
    (hosts.folder / "a.result").unlink(missing_ok=True)
    command = {"mode": "ROLLING_UPDATE", "version": "2", "deadline": 40.0, "shutdown": shutdown}
    assert (await hosts["a"].ask("relocate", **command))["ok"]


async def failure_setup(hosts: Hosts, rooms: list[str], counters: list[str], gate: str) -> None:
    """Place the units on ``a``, arm ``gate`` (``host.point``), start the traffic, relocate."""
    created = await hosts["a"].ask("create", rooms=rooms, counters=counters)
    assert {"a"} >= set(created["rooms"].values()), created
    rid, point = gate.split(".")
    assert (await hosts[rid].ask("arm", points=[point]))["ok"]
    await start_traffic(hosts, rooms, counters)
    await warm_up(hosts, turns=30)
    await relocate(hosts)


def sent_from(rid: str) -> history_check.Excuse:
    """Calls of the senders on host ``rid``: their records end where the process was killed."""
    return lambda call: str(call["sender"]).startswith(rid)


@pytest.mark.spec("RELOC-51")
async def test_a_target_killed_before_the_commit_leaves_the_spots_serving_on_the_source(
    store_dsn: str, tmp_path: Path
) -> None:
    """``c`` is killed -9 while it restores the first Spot of ``a``'s move (before any commit):
    the relocation ends blocked, ``a`` serves again, both Spots (the sealed one and the one not
    reached yet) go on serving on ``a`` with their state, and ``b``'s senders lose nothing and
    see no error. ``c``'s own senders died with it: their last calls have no end, and their
    last sends may have died in ``c``'s queue."""
    rooms, counters = ["unit-room"], ["unit-counter"]
    async with three_hosts(store_dsn, tmp_path, {"a": "1", "b": "1", "c": "2"}) as hosts:
        await failure_setup(hosts, rooms, counters, "c.restore")
        # Both move at once (MOVES_AT_ONCE): either may be the first in its restore.
        assert await hosts.reached("c", "restore") in rooms + counters
        killed_at = time.monotonic()
        await hosts["c"].kill()
        result = await hosts.result("a")
        assert "BLOCKED" == result["outcome"], result
        assert "SERVING" == (await hosts["a"].ask("status"))["status"]
        await traffic_after(hosts, killed_at, "a", turns=40)
        report = await stop_and_check(
            hosts, ("b",), may_hang=sent_from("c"), may_lose=sent_from("c")
        )
    assert_clean(report)
    assert {} == dict(report.errors)
    for spot_id in rooms + counters:
        assert ["a"] == report.hosts_of(spot_id), report.incarnations[spot_id]


@pytest.mark.spec("RELOC-52")
async def test_a_source_killed_after_the_commit_leaves_the_spot_on_the_target(
    store_dsn: str, tmp_path: Path
) -> None:
    """``a`` is killed -9 in the ``on_closing`` of its moved Spot (the commit done, the target
    told): ``c`` owns the Spot and serves it with the state it had, with the same object
    generation. Sends acknowledged before the survivors saw ``a`` gone may have died with
    ``a``, and calls begun before then may fail; nothing later is lost or fails."""
    counters = ["unit-counter"]
    async with three_hosts(store_dsn, tmp_path, {"a": "1", "b": "1", "c": "2"}) as hosts:
        await failure_setup(hosts, [], counters, "a.closing")
        assert "unit-counter" == await hosts.reached("a", "closing")
        await hosts["a"].kill()
        gone_at = await hosts.gone("a", ("b", "c"))
        await traffic_after(hosts, gone_at, "c", turns=40)
        report = await stop_and_check(
            hosts,
            ("b", "c"),
            may_lose=lambda call: call["ended"] < gone_at,
            may_fail=lambda call: call["issued"] < gone_at,
        )
    assert_clean(report)
    assert ["a", "c"] == report.hosts_of("unit-counter"), report.incarnations
    assert 1 == len({incarnation.gen for incarnation in report.incarnations["unit-counter"]})


@pytest.mark.spec("RELOC-53", "RELOC-50")
async def test_a_store_outage_before_the_commit_leaves_the_spot_on_one_host(
    store_dsn: str, tmp_path: Path
) -> None:
    """``a``'s link to PostgreSQL (a TCP proxy) is cut while ``c`` restores the Spot and
    restored once ``a`` has tried its commit and found its outcome unknown: the store says the
    commit never happened, so the relocation ends blocked and the Spot serves on ``a`` again,
    with its state; no acknowledged send is lost, no call fails, ``c`` never served it."""
    rooms = ["unit-room"]
    async with (
        store_proxy(store_dsn) as proxy,
        three_hosts(
            store_dsn, tmp_path, {"a": "1", "b": "1", "c": "2"}, dsns={"a": proxy.dsn}
        ) as hosts,
    ):
        await failure_setup(hosts, rooms, [], "c.restore")
        assert "unit-room" == await hosts.reached("c", "restore")
        proxy.cut()
        hosts.release("c", "restore")

        async def unknown() -> bool:
            return "has an unknown outcome" in (tmp_path / "a.log").read_text()

        await eventually(unknown, WAIT)
        proxy.restore()
        result = await hosts.result("a")
        assert "BLOCKED" == result["outcome"], result
        served_at = time.monotonic()
        assert "SERVING" == (await hosts["a"].ask("status"))["status"]
        await traffic_after(hosts, served_at, "a", turns=40)
        report = await stop_and_check(hosts, ("b", "c"))
    assert_clean(report)
    assert {} == dict(report.errors)
    assert ["a"] == report.hosts_of("unit-room"), report.incarnations


@pytest.mark.spec("RELOC-54")
async def test_a_source_paused_past_its_lease_mid_move_never_serves_again(
    store_dsn: str, tmp_path: Path
) -> None:
    """``a`` is stopped (SIGSTOP) while ``c`` restores its Spot, until the survivors removed
    its run: the Spot is activated anew on a survivor (a new object generation), ``a`` commits
    nothing and handles nothing after it resumes (SIGCONT) and its run ends; sends acknowledged
    before the survivors saw ``a`` gone may be lost with it, nothing later is."""
    counters = ["unit-counter"]
    async with three_hosts(store_dsn, tmp_path, {"a": "1", "b": "1", "c": "2"}) as hosts:
        await failure_setup(hosts, [], counters, "c.restore")
        assert "unit-counter" == await hosts.reached("c", "restore")
        os.kill(hosts["a"].process.pid, signal.SIGSTOP)
        hosts.release("c", "restore")
        gone_at = await hosts.gone("a", ("b", "c"))
        await traffic_after(hosts, gone_at, None, turns=40)
        os.kill(hosts["a"].process.pid, signal.SIGCONT)
        await hosts.exited("a")
        resumed_at = time.monotonic()
        await traffic_after(hosts, resumed_at, None, turns=40)
        report = await stop_and_check(
            hosts,
            ("b", "c"),
            may_lose=lambda call: call["ended"] < gone_at,
            may_fail=lambda call: call["issued"] < gone_at,
        )
    assert_clean(report)
    incarnations = report.incarnations["unit-counter"]
    assert "a" == incarnations[0].host, incarnations
    assert all(incarnation.host != "a" for incarnation in incarnations[1:]), incarnations
    assert incarnations[0].gen < incarnations[-1].gen, incarnations
    assert incarnations[0].last < gone_at, incarnations
