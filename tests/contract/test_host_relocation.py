"""Host relocation as an operation of the host (specs/relocation.md RELOC-41..RELOC-44;
specs/shutdown.md SHUT-3.x, SHUT-7.1, SHUT-7.2): its arguments, results and statuses, the check
before anything changes, the wait for a target, one operation at a time, and shutdown winning.
Moving live Spots and Actors is not built yet; these tests end before anything would move."""

from __future__ import annotations

import math
import uuid

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Batch, Found, Stores
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


@app.message("reloc.Ping")
@attrs.frozen
class Ping:
    pass


@app.user_spot("reloc.Pinned")
class Pinned(NoMembers):
    """Declared without ``relocation=``: it may not move (RELOC-2)."""

    @zl.packet_handler(Ping)
    async def ping(self, msg: Ping) -> None:
        pass


@app.message("reloc.Ping2")
@attrs.frozen
class Ping2:
    pass


@app.message("reloc.Where")
@attrs.frozen
class Where:
    node: str


@app.user_spot("reloc.Movable", relocation=zl.recreate_on_relocation())
class Movable(NoMembers):
    @zl.packet_handler(Ping)
    async def ping(self, msg: Ping) -> None:
        pass

    @zl.request_handler(Ping2)
    async def where(self, req: Ping2) -> Where:
        return Where(self.context.ref.node_rid.value)


@app.instance_spot("reloc.Counter")
class Counter(zl.InstanceSpot):
    @zl.packet_handler(Ping)
    async def ping(self, msg: Ping) -> None:
        pass


@app.actor("reloc.Guest")
class Guest(zl.Actor):
    pass


PLANNED = zl.RelocationMode.PLANNED_MAINTENANCE
ROLLING = zl.RelocationMode.ROLLING_UPDATE
BLOCKED = zl.RelocationOutcome.BLOCKED
Reason = zl.RelocationReason
Status = zl.HostStatus
LIFE_OF_A_RELOCATED_HOST = [
    Status.SERVING,
    Status.RELOCATING,
    Status.RELOCATED,
    Status.DRAINING,
    Status.STOPPED,
]


async def _published(host: TestHost, stores: Stores, state: str) -> None:
    """Return once this host's node record in the store says ``state`` (the record is written
    by the host's renewal task as soon as it is prompted)."""
    key = f"m/{host.mesh.value}/node/{host.node_rid.value}"
    with trio.fail_after(10):
        while True:
            found = await stores.location.read(key)
            assert isinstance(found, Found)
            if state == NodeRecord.decode(found.value).state:
                return
            await trio.sleep(0.01)


async def _serves(host: TestHost) -> None:
    """New Spots are placed here as before."""
    await host.spots.get_or_create(f"probe-{trio.current_time()}", "reloc.Movable").submit()


@pytest.mark.spec("RELOC-41")
async def test_bad_arguments_raise_and_change_nothing(store_dsn: str) -> None:
    async with open_test_host(app, dsn=store_dsn, application_version="2.1") as host:
        statuses = host.host.observe()
        for arguments, error in [
            ({"mode": "planned"}, TypeError),
            ({"mode": 0}, TypeError),
            ({"target_version": "2.1"}, ValueError),  # planned maintenance names no version
            ({"mode": ROLLING}, ValueError),  # a rolling update needs one
            ({"mode": ROLLING, "target_version": "2.1.0"}, ValueError),  # not higher
            ({"mode": ROLLING, "target_version": "1.9"}, ValueError),
            ({"mode": ROLLING, "target_version": "v3"}, ValueError),
            ({"mode": ROLLING, "target_version": 3}, TypeError),
            ({"deadline": 0}, ValueError),
            ({"deadline": -1.0}, ValueError),
            ({"deadline": math.inf}, ValueError),
            ({"deadline": True}, TypeError),
            ({"deadline": "5"}, TypeError),
        ]:
            with pytest.raises(error):
                await host.host.relocate(**arguments)
            with pytest.raises(error):
                await host.host.relocate_and_shutdown(**arguments)
        assert Status.SERVING == host.host.status
        assert Status.SERVING == await statuses.__anext__()
        with trio.move_on_after(0.05):
            await statuses.__anext__()
            pytest.fail("a refused call changed the status")
        await _serves(host)


@pytest.mark.spec("SHUT-3.8", "RELOC-42", "RELOC-43", "RELOC-44")
async def test_a_host_with_nothing_to_move_relocates_without_a_target(store_dsn: str) -> None:
    """No Spot but the Entry Spot and no Actor: RELOCATED/NONE with no peer at all, after the
    same status change and stop of new placements as any relocation; relocate_and_shutdown then
    stops the host."""
    async with open_test_stores(store_dsn) as stores:
        async with open_test_host(app, dsn=store_dsn, stores=stores) as host:
            statuses = host.host.observe()
            result = await host.host.relocate()
            assert (
                zl.RelocationResult(PLANNED, "0", zl.RelocationOutcome.RELOCATED, Reason.NONE)
                == result
            )
            assert result.relocated
            assert Status.RELOCATED == host.host.status
            await _published(host, stores, "relocated")
            for attempt in (
                host.spots.get_or_create("room", "reloc.Pinned").submit(),
                host.actors.get_or_create("guest", "reloc.Guest").submit(),
                host.route.send_to_spot("c-1", Ping()).instance_spot("reloc.Counter").submit(),
            ):
                with pytest.raises(zl.ZLinkError) as refused:
                    await attempt
                assert zl.ErrorKind.UNAVAILABLE == refused.value.kind
            # The same conditions again: the result it has; other conditions: refused.
            assert result == await host.host.relocate()
            other = await host.host.relocate(ROLLING, target_version="1")
            assert (BLOCKED, Reason.OPERATION_IN_PROGRESS) == (other.outcome, other.reason)
            assert result == await host.host.relocate_and_shutdown()
            assert Status.STOPPED == host.host.status
        assert LIFE_OF_A_RELOCATED_HOST == [status async for status in statuses]


@pytest.mark.spec("SHUT-3.5", "SHUT-3.11")
async def test_a_type_that_may_not_move_blocks_before_anything_changes(store_dsn: str) -> None:
    """A live Spot of a type declared without relocation=: BLOCKED/RELOCATION_DISABLED, the
    status never leaves SERVING and the host places new Spots throughout; after a blocked
    relocate_and_shutdown it serves on."""
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("pinned", "reloc.Pinned").submit()
        statuses = host.host.observe()
        for call in (host.host.relocate, host.host.relocate_and_shutdown):
            result = await call(deadline=5.0)
            assert (BLOCKED, Reason.RELOCATION_DISABLED) == (result.outcome, result.reason)
            assert Status.SERVING == host.host.status
            await _serves(host)
        assert Status.SERVING == await statuses.__anext__()
        with trio.move_on_after(0.05):
            await statuses.__anext__()
            pytest.fail("the check changed the status")


@pytest.mark.spec("SHUT-3.6", "SHUT-7.2", "SHUT-3.7")
async def test_without_a_target_the_host_waits_until_the_deadline_and_serves_on(
    store_dsn: str,
) -> None:
    """A movable Spot and no peer that fits (one of another version): the call waits for its
    deadline, ends BLOCKED/TARGET_UNAVAILABLE and leaves the host as it was. The result is not
    kept: once a fitting peer is up, the next call finds it at once."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as host,
    ):
        await host.spots.get_or_create("movable", "reloc.Movable").submit()
        async with open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=host.mesh, application_version="7"
        ) as newer:
            await host.host._tree.membership.wait_for_peer(newer.node_rid)  # type: ignore[union-attr]
            started = trio.current_time()
            result = await host.host.relocate(deadline=0.5)
            assert trio.current_time() - started >= 0.5
            assert (BLOCKED, Reason.TARGET_UNAVAILABLE) == (result.outcome, result.reason)
            assert Status.SERVING == host.host.status
            await _published(host, stores, "serving")
            await _serves(host)
            # Another call with the version the peer runs finds it, without waiting, and moves
            # everything there.
            with trio.fail_after(10):
                found = await host.host.relocate(ROLLING, target_version="7", deadline=30.0)
            assert (
                zl.RelocationResult(ROLLING, "7", zl.RelocationOutcome.RELOCATED, Reason.NONE)
                == found
            )
            assert Status.RELOCATED == host.host.status
            answer = await newer.route.request_to_spot(
                "movable", Ping2(), reply_type=Where
            ).submit()
            assert newer.node_rid.value == answer.node


async def _wait_running(host: TestHost) -> None:
    relocator = host.host._tree.relocator
    assert relocator is not None
    while relocator._running is None:
        await trio.testing.wait_all_tasks_blocked()


@pytest.mark.spec("SHUT-3.2", "SHUT-3.3")
async def test_calls_with_the_same_conditions_join_and_others_are_refused_at_once(
    store_dsn: str,
) -> None:
    """While one relocation waits for a target: a second call with the same mode and version
    joins it (it ends with the first, not at its own deadline); a call with other conditions is
    answered OPERATION_IN_PROGRESS at once, while the first still runs."""
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("movable", "reloc.Movable").submit()
        results: list[zl.RelocationResult] = []

        async def call(deadline: float) -> None:
            results.append(await host.host.relocate(deadline=deadline))

        # Far less than the joiner's own 600 s: it ends with the first call.
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call, 1.0)
                await _wait_running(host)
                nursery.start_soon(call, 600.0)
                await trio.testing.wait_all_tasks_blocked()
                refused = await host.host.relocate(ROLLING, target_version="3")
                assert (
                    zl.RelocationResult(ROLLING, "3", BLOCKED, Reason.OPERATION_IN_PROGRESS)
                    == refused
                )
                assert [] == results  # the first is still waiting for a target
        assert 2 == len(results)
        assert results[0] == results[1]
        assert Reason.TARGET_UNAVAILABLE == results[0].reason


@pytest.mark.spec("SHUT-3.4", "SHUT-7.1")
async def test_shutdown_wins_over_a_relocation(store_dsn: str) -> None:
    """A relocation waiting for a target when shutdown starts ends BLOCKED/SHUTDOWN_REQUESTED
    at once; a relocation asked for during the shutdown is refused the same way."""
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("movable", "reloc.Movable").submit()
        results: list[zl.RelocationResult] = []

        async def call() -> None:
            results.append(await host.host.relocate(deadline=600.0))

        with trio.fail_after(30):  # far less than the relocation's own 600 s
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await _wait_running(host)
                nursery.start_soon(host.shutdown)
                await trio.testing.wait_all_tasks_blocked()
                late = await host.host.relocate()
                assert (BLOCKED, Reason.SHUTDOWN_REQUESTED) == (late.outcome, late.reason)
                await host.host._tree.finished.wait()
        assert [(BLOCKED, Reason.SHUTDOWN_REQUESTED)] == [(r.outcome, r.reason) for r in results]
        assert Status.STOPPED == host.host.status


class HeldClaims:
    """The Location Store with one injected fault: a write naming ``key`` waits for ``go``."""

    def __init__(self, location: object, key: str) -> None:
        self._location = location
        self._key = key
        self.go = trio.Event()

    def __getattr__(self, name: str) -> object:
        return getattr(self._location, name)

    async def write(self, batch: Batch) -> object:
        if any(mutation.key == self._key for mutation in batch.mutations):
            await self.go.wait()
        return await self._location.write(batch)  # type: ignore[attr-defined]


@pytest.mark.spec("SHUT-3.9")
async def test_a_relocation_that_stops_while_relocating_serves_again(store_dsn: str) -> None:
    """Nothing live to move at the check, but a creation whose claim is on its way: the host
    becomes RELOCATING and publishes it, the claim lands and leaves something to move, and the
    relocation ends blocked with the host SERVING again, placing new Spots and publishing
    "serving"."""
    async with open_test_stores(store_dsn) as real:
        mesh = f"reloc-{uuid.uuid4().hex[:12]}"
        held = HeldClaims(real.location, f"m/{mesh}/spot/late")
        stores = attrs.evolve(real, location=held)
        async with open_test_host(app, dsn=store_dsn, stores=stores, mesh=mesh) as host:
            results: list[zl.RelocationResult] = []

            async def call() -> None:
                results.append(await host.host.relocate(deadline=30.0))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(host.spots.get_or_create("late", "reloc.Movable").submit)
                await trio.testing.wait_all_tasks_blocked()
                assert "late" in {spot.value for spot in host.host._tree.spots.creating}
                nursery.start_soon(call)
                await _published(host, real, "relocating")
                assert Status.RELOCATING == host.host.status
                held.go.set()
            assert BLOCKED == results[0].outcome
            assert Status.SERVING == host.host.status
            await _published(host, real, "serving")
            await _serves(host)


@pytest.mark.spec("SHUT-3.12")
async def test_an_observer_that_never_reads_does_not_hold_the_host_up(store_dsn: str) -> None:
    """An observer that reads nothing: the host relocates and shuts down as without it, and the
    stream still holds every status, ending after STOPPED."""
    async with open_test_host(app, dsn=store_dsn) as host:
        idle = host.host.observe()
        with trio.fail_after(30):
            await host.host.relocate_and_shutdown()
    assert Status.STOPPED == host.host.status
    assert LIFE_OF_A_RELOCATED_HOST == [status async for status in idle]
    late = host.host.observe()
    assert [Status.STOPPED] == [status async for status in late]
