"""A move's restore that fails, or outlives its attempt (specs/relocation.md RELOC-14..RELOC-16,
RELOC-19..RELOC-22; routing/arrivals.py Rule 2): the target retries with a fresh instance and the
identical payload, a restore that keeps failing blocks the relocation with no other target
tried, a stale attempt never commits anything, and the payload never reaches the store."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import textwrap
from collections.abc import AsyncIterator

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.routing.arrivals import RESTORE_ATTEMPTS
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


@app.message("rattempt.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("rattempt.Get")
@attrs.frozen
class Get:
    pass


@app.message("rattempt.Count")
@attrs.frozen
class Count:
    value: int
    node: str


MARKER = b"RELOC14-PAYLOAD-MARKER-7f3a9c"
"""Leads every payload, so the store can be searched for it (RELOC-14)."""


@attrs.define
class Script:
    """How the next restores behave, and what every capture and restore saw."""

    fail_first: int = 0
    """This many restores raise before any succeeds."""
    hang_first: bool = False
    """The first restore waits for ``release``."""
    release: trio.Event = attrs.field(factory=trio.Event)
    captures: list[bytes] = attrs.field(factory=list)
    restores: list[tuple[str, int, bytes]] = attrs.field(factory=list)
    """(host, id of the instance, payload) of every restore called, in order."""
    restored: list[int] = attrs.field(factory=list)
    """Ids of the instances whose restore returned."""


script = Script()


class TallyState(zl.SpotRelocationAdapter["Tally"]):
    async def capture(self, target: Tally) -> bytes:
        payload = MARKER + target.value.to_bytes(8, "big")
        script.captures.append(payload)
        return payload

    async def restore(self, target: Tally, payload: bytes) -> None:
        calls = len(script.restores)
        script.restores.append((target.context.ref.node_rid.value, id(target), payload))
        if script.hang_first and calls == 0:
            await script.release.wait()
        elif calls < script.fail_first:
            raise RuntimeError("the state cannot be read back yet")
        target.value = int.from_bytes(payload[len(MARKER) :], "big")
        script.restored.append(id(target))


@app.user_spot("rattempt.Tally", relocation=zl.preserve_state_with(TallyState))
class Tally(NoMembers):
    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(self.value, self.context.ref.node_rid.value)


@contextlib.asynccontextmanager
async def _hosts(store_dsn: str, count: int, tally: int) -> AsyncIterator[list[TestHost]]:
    """``count`` hosts of one mesh that see each other, the first with a Tally of ``tally``."""
    async with contextlib.AsyncExitStack() as stack:
        stores = await stack.enter_async_context(open_test_stores(store_dsn))
        first = await stack.enter_async_context(open_test_host(app, dsn=store_dsn, stores=stores))
        hosts = [first]
        for _ in range(count - 1):
            hosts.append(
                await stack.enter_async_context(
                    open_test_host(app, dsn=store_dsn, stores=stores, mesh=first.mesh)
                )
            )
        with trio.fail_after(10):
            for one in hosts:
                for other in hosts:
                    if one is not other:
                        await one.host._tree.membership.wait_for_peer(other.node_rid)  # type: ignore[union-attr]
        await first.spots.get_or_create("tally", "rattempt.Tally").submit()
        await first.route.send_to_spot("tally", Add(tally)).submit()
        yield hosts


async def _count(host: TestHost) -> Count:
    answer = await host.route.request_to_spot("tally", Get(), reply_type=Count).submit()
    assert isinstance(answer, Count)
    return answer


@pytest.mark.spec("RELOC-19", "RELOC-16", "RELOC-15")
async def test_a_failed_restore_is_retried_on_the_same_target_with_the_identical_payload(
    store_dsn: str,
) -> None:
    """The first restore raises: the target restores again into a new instance from the same
    payload, which was captured once, and the Tally serves there with its count."""
    global script
    script = Script(fail_first=1)
    async with _hosts(store_dsn, 2, 41) as [source, target]:
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        assert Count(41, target.node_rid.value) == await _count(source)
        [captured] = script.captures
        [(host_1, first, payload_1), (host_2, second, payload_2)] = script.restores
        assert (target.node_rid.value, target.node_rid.value) == (host_1, host_2)
        assert captured == payload_1 == payload_2
        assert first != second, "each attempt restores into a fresh instance"
        assert [second] == script.restored


@pytest.mark.spec("RELOC-19", "RELOC-20")
async def test_a_restore_that_keeps_failing_blocks_the_relocation_and_tries_no_other_target(
    store_dsn: str,
) -> None:
    """Every restore raises: the target tries ``RESTORE_ATTEMPTS`` times, the relocation ends
    blocked with STATE_INCOMPATIBLE, no other host is asked to restore, and the Tally serves on
    the source with its count."""
    global script
    script = Script(fail_first=10**6)
    async with _hosts(store_dsn, 3, 7) as [source, one, _other]:
        result = await source.host.relocate(deadline=20.0)
        assert (zl.RelocationOutcome.BLOCKED, zl.RelocationReason.STATE_INCOMPATIBLE) == (
            result.outcome,
            result.reason,
        ), result
        assert RESTORE_ATTEMPTS == len(script.restores)
        assert 1 == len({host for host, _, _ in script.restores}), script.restores
        assert source.node_rid.value not in {host for host, _, _ in script.restores}
        assert Count(7, source.node_rid.value) == await _count(one)


@pytest.mark.spec("RELOC-21", "RELOC-22", "RELOC-20")
async def test_a_stale_restore_never_commits_and_a_new_attempt_may_overlap_it(
    store_dsn: str,
) -> None:
    """The first restore hangs past the relocation's deadline: the relocation ends blocked with
    DEADLINE_EXCEEDED and the Tally serves on the source. A second relocation captures again
    and restores again while the stale restore still hangs, and moves the Tally. When the stale
    restore returns, nothing changes: the Tally answers from the second attempt's instance with
    the count of the second capture, and the store still names the target."""
    global script
    script = Script(hang_first=True)
    async with _hosts(store_dsn, 2, 5) as [source, target]:
        stale = await source.host.relocate(deadline=1.0)
        assert (zl.RelocationOutcome.BLOCKED, zl.RelocationReason.DEADLINE_EXCEEDED) == (
            stale.outcome,
            stale.reason,
        ), stale
        assert Count(5, source.node_rid.value) == await _count(target)
        await source.route.send_to_spot("tally", Add(3)).submit()
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        assert 2 == len(script.captures)
        assert [Count(8, target.node_rid.value)] == [await _count(source)]
        script.release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert Count(8, target.node_rid.value) == await _count(target)
        spots = target.host._tree.spots  # type: ignore[union-attr]
        live = spots.activations[zl.SpotId("tally")]
        stale_instance = script.restores[0][1]
        assert stale_instance in script.restored  # it did return, and was discarded
        assert id(live._instance) != stale_instance
        assert Count(8, target.node_rid.value) == await _count(source)


_SCAN = textwrap.dedent(
    """
    import asyncio, sys
    import asyncpg

    async def main(dsn, needles):
        connection = await asyncpg.connect(dsn)
        try:
            tables = await connection.fetch(
                "SELECT table_schema, table_name FROM information_schema.tables "
                "WHERE table_schema NOT IN ('pg_catalog', 'information_schema') "
                "AND table_type = 'BASE TABLE'"
            )
            seen = 0
            for table in tables:
                name = f'"{table[0]}"."{table[1]}"'
                for row in await connection.fetch(f"SELECT t::text AS row FROM {name} t"):
                    seen += 1
                    text = row["row"].lower()
                    if any(needle in text for needle in needles):
                        print("FOUND", name, row["row"][:200])
            print("ROWS", seen)
        finally:
            await connection.close()

    asyncio.run(main(sys.argv[1], sys.argv[2:]))
    """
)


@pytest.mark.spec("RELOC-14", "DEC-6")
async def test_the_payload_never_reaches_the_store(store_dsn: str) -> None:
    """After a Tally with a marked payload moves, no row of any table of the store holds the
    marker, as text or as hex."""
    global script
    script = Script()
    async with _hosts(store_dsn, 2, 2) as [source, target]:
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        assert script.captures
        assert MARKER in script.captures[0]
        needles = [MARKER.decode().lower(), MARKER.hex()]
        scan = await trio.to_thread.run_sync(
            lambda: subprocess.run(
                [sys.executable, "-c", _SCAN, store_dsn, *needles],
                capture_output=True,
                text=True,
                timeout=120,
                check=False,
            )
        )
        assert 0 == scan.returncode, scan.stderr
        assert "FOUND" not in scan.stdout, scan.stdout
        rows = int(scan.stdout.split("ROWS")[-1])
        assert rows > 0  # the scan read the store's records, the Tally's among them
        assert Count(2, target.node_rid.value) == await _count(source)


@pytest.mark.spec("RELOC-8")
async def test_no_adapter_is_called_by_what_stays_on_one_host(store_dsn: str) -> None:
    """A Tally (with an adapter) is created, sent to, asked, closed and made again, and its host
    shuts down, all without a relocation: neither capture nor restore is ever called."""
    global script
    script = Script()
    async with open_test_host(app, dsn=store_dsn) as host:
        created = await host.spots.get_or_create("tally", "rattempt.Tally").submit()
        await host.route.send_to_spot("tally", Add(1)).submit()
        assert Count(1, host.node_rid.value) == await _count(host)
        assert created.spot_ref is not None
        assert await host.spots.close(created.spot_ref)
        await host.spots.get_or_create("tally", "rattempt.Tally").submit()
        assert Count(0, host.node_rid.value) == await _count(host)
    assert ([], []) == (script.captures, script.restores)
