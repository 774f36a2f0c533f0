"""Fencing under a history checker (issue 11, items 1-2; specs/mesh.md MESH-6, MESH-20..23).

Host ``b`` runs in its own process (``fence_child.py``) and owns the Spots; host ``a`` runs in
the test process and sends to them all along, as ``b`` does to itself. The test then takes ``b``
away from the store, by SIGSTOP or by cutting a TCP proxy between ``b`` and PostgreSQL, while
traffic goes on; ``a`` takes the Spots over once its watch removed ``b``'s record, and ``b``
comes back (SIGCONT, proxy restored). Every handled message of both hosts is recorded as
(spot id, object generation, host, start, end, seq) on the machine's monotonic clock, and
``fence_app.check_history`` asserts over the whole history: no two incarnations of an id handled
messages in overlapping intervals, no seq was handled twice, and every send ``a`` acknowledged
after it held the Spots was handled exactly once. A third test cuts the store for everyone for
longer than the lease: no run is lost and no Spot changes incarnation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import zlink_trio as zl
from tests.e2e import fence_app
from tests.e2e.store_proxy import store_proxy

CHILD = Path(__file__).resolve().parent / "fence_child.py"
LEASE = 2.0
"""Short, so a run of the test takes seconds: fence at 1.6 s, removal after 2.4 s of silence."""
IDS = 4
WAIT = 45.0


class Child:
    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""

    async def line(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        while b"\n" not in self._buffer:
            chunk = await self.process.stdout.receive_some()
            if not chunk:
                raise AssertionError(f"host b ended (exit {self.process.poll()})")
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        if not line.startswith(b"{"):
            return await self.line()
        answer: dict[str, Any] = json.loads(line)
        return answer


@asynccontextmanager
async def host_b(dsn: str, mesh: str, ids: list[str], history: Path) -> AsyncIterator[Child]:
    arguments = ["--mesh", mesh, "--dsn", dsn, "--rid", "b", "--lease", str(LEASE)]
    arguments += ["--ids", ",".join(ids), "--history", str(history)]
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), *arguments], stdin=subprocess.PIPE, stdout=subprocess.PIPE
    )
    try:
        yield Child(process)
    finally:
        with trio.CancelScope(shield=True):
            if process.returncode is None:
                os.kill(process.pid, signal.SIGCONT)
                process.kill()
            with trio.move_on_after(20):
                await process.wait()
            for stream in (process.stdin, process.stdout):
                if stream is not None:
                    await stream.aclose()


class Traffic:
    """``a``'s sends to every id, numbered, with what was acknowledged when."""

    def __init__(self, host: zl.Host, ids: list[str]) -> None:
        self.host = host
        self.ids = ids
        self.acked: list[tuple[int, str, float]] = []
        self.failed = 0
        self._seq = 0

    async def run(self) -> None:
        while True:
            for spot_id in self.ids:
                self._seq += 1
                seq = self._seq
                try:
                    await self.host.route.send_to_spot(spot_id, fence_app.Note(seq)).submit()
                except zl.ZLinkError:
                    self.failed += 1
                else:
                    self.acked.append((seq, spot_id, time.monotonic()))
            await trio.sleep(0.005)


async def take_over(host: zl.Host, ids: list[str]) -> float:
    """``get_or_create`` each id from ``a`` until ``a`` holds them all; when it did."""
    taken: set[str] = set()
    with trio.fail_after(WAIT):
        while len(taken) < len(ids):
            for spot_id in ids:
                if spot_id in taken:
                    continue
                try:
                    got = await host.spots.get_or_create(spot_id, "fence.Counter").submit()
                except zl.ZLinkError:
                    continue
                if got.spot_ref.node_rid == host.node_rid:
                    assert zl.SpotCreateStatus.CREATED == got.status
                    taken.add(spot_id)
            await trio.sleep(0.1)  # the store has no event for "removed"
    return time.monotonic()


def read_history(path: Path) -> fence_app.History:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


async def fencing_run(store_dsn: str, tmp_path: Path, disrupt: str) -> None:
    mesh = f"fence-{uuid.uuid4().hex[:8]}"
    ids = [f"{mesh}-{number}" for number in range(IDS)]
    history_b = tmp_path / "history-b.jsonl"
    history_a: fence_app.History = []
    fence_app.sink = history_a.append
    async with store_proxy(store_dsn) as proxy:
        dsn_b = proxy.dsn if disrupt == "cut" else store_dsn
        config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, node_rid="a", node_lease=LEASE)
        async with (
            zl.open_host(fence_app.app, config) as host,
            host_b(dsn_b, mesh, ids, history_b) as b,
        ):
            with trio.fail_after(WAIT):
                ready = await b.line()
            assert ready["ready"] is True
            with trio.fail_after(WAIT):
                while zl.NodeRid("b") not in host.peers:  # noqa: ASYNC110  # store, no event
                    await trio.sleep(0.05)
            traffic = Traffic(host, ids)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(traffic.run)
                await trio.sleep(0.5)  # b serves both senders for a while
                served_by_b = len(read_history(history_b))
                assert served_by_b > 0
                if disrupt == "stop":
                    os.kill(b.process.pid, signal.SIGSTOP)
                else:
                    proxy.cut()
                taken_at = await take_over(host, ids)
                await trio.sleep(1.0)  # a serves alone; b still away
                if disrupt == "stop":
                    os.kill(b.process.pid, signal.SIGCONT)
                else:
                    proxy.restore()
                with trio.fail_after(WAIT):
                    ended = await b.line()
                    assert 3 == await b.process.wait()
                assert "UNAVAILABLE" in ended.get("ended", ""), ended
                nursery.cancel_scope.cancel()
            # Flush: a's requests are answered after a's earlier sends to its own Spots.
            for number, spot_id in enumerate(ids):
                call = host.route.request_to_spot(
                    spot_id, fence_app.Ping(number), reply_type=fence_app.Pong
                )
                assert fence_app.Pong(number) == await call.timeout(10).submit()
            await host.shutdown()
    history = history_a + read_history(history_b)
    incarnations = fence_app.check_history(history)
    for spot_id in ids:
        hosts = {host_rid for _gen, host_rid in incarnations[spot_id]}
        assert {"a", "b"} == hosts, (spot_id, incarnations[spot_id])
    handled = {entry["seq"] for entry in history_a if entry["seq"] is not None}
    after = [seq for seq, _spot_id, at in traffic.acked if at > taken_at]
    assert after, "a sent nothing after it took the Spots over"
    missing = sorted(set(after) - handled)
    assert not missing, f"{len(missing)} acknowledged sends to a live owner were lost"


@pytest.mark.spec("MESH-20", "MESH-21", "MESH-22", "MESH-23", "MESH-9", "DEC-22")
async def test_a_paused_owner_never_serves_next_to_the_new_incarnation(
    store_dsn: str, tmp_path: Path
) -> None:
    """SIGSTOP the owner past its lease while traffic goes on: its Spots are taken over, and
    after SIGCONT it handles nothing more and ends its run."""
    await fencing_run(store_dsn, tmp_path, "stop")


@pytest.mark.spec("MESH-20", "MESH-21", "MESH-22", "MESH-23", "MESH-6")
async def test_an_owner_cut_off_from_the_store_stops_before_its_spots_are_taken_over(
    store_dsn: str, tmp_path: Path
) -> None:
    """Cut the owner's link to PostgreSQL while it and its callers keep going: it fences
    itself before its Spots are taken over, and ends its run when the link comes back."""
    await fencing_run(store_dsn, tmp_path, "cut")


@pytest.mark.spec("MESH-6", "MESH-21")
async def test_an_outage_of_the_store_alone_ends_no_run_and_moves_no_spot(
    store_dsn: str, tmp_path: Path
) -> None:
    """Cut every host's link to PostgreSQL for longer than lease + margin, traffic going on:
    the hosts fence themselves meanwhile, and once the store is back both runs go on, every
    Spot keeps its incarnation and requests between the hosts are answered again."""
    mesh = f"fence-{uuid.uuid4().hex[:8]}"
    ids = [f"{mesh}-{number}" for number in range(IDS)]
    fence_app.sink = lambda _entry: None
    async with store_proxy(store_dsn) as proxy:
        config = zl.HostConfig(mesh=mesh, store_dsn=proxy.dsn, node_rid="a", node_lease=LEASE)
        async with (
            zl.open_host(fence_app.app, config) as host,
            host_b(proxy.dsn, mesh, ids, tmp_path / "history-b.jsonl") as b,
        ):
            with trio.fail_after(WAIT):
                ready = await b.line()
                while zl.NodeRid("b") not in host.peers:  # noqa: ASYNC110  # store, no event
                    await trio.sleep(0.05)
            generation = host.node_generation
            traffic = Traffic(host, ids)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(traffic.run)
                proxy.cut()
                await trio.sleep(2 * LEASE)  # the outage: longer than lease + margin
                proxy.restore()

                async def answered(spot_id: str) -> bool:
                    call = host.route.request_to_spot(
                        spot_id, fence_app.Ping(0), reply_type=fence_app.Pong
                    )
                    try:
                        await call.timeout(2).submit()
                    except zl.ZLinkError:
                        return False
                    return True

                with trio.fail_after(WAIT):
                    for spot_id in ids:
                        while not await answered(spot_id):  # noqa: ASYNC110  # remote
                            await trio.sleep(0.1)
                nursery.cancel_scope.cancel()
            assert b.process.poll() is None, "b's run ended"
            assert generation == host.node_generation
            for spot_id in ids:
                got = await host.spots.get_or_create(spot_id, "fence.Counter").submit()
                assert zl.SpotCreateStatus.EXISTING == got.status
                assert zl.NodeRid("b") == got.spot_ref.node_rid
                assert ready["refs"][spot_id] == got.spot_ref.object_generation.value
            assert zl.NodeRid("b") in host.peers
            await host.shutdown()
