"""What a host relocation settles before and around its moves: the target takes in the
source's RELOCATING record before the first unit is sealed (specs/relocation.md RELOC-74,
host/relocation.py Rule 6, routing/arrivals.py Rule 1), the source's garbage collector stays
out of the moves (RELOC-75), and every host hears of a move only once its unit serves on the
target (RELOC-76).

The RELOC-74 tests hold the target's re-read of the source's node record (its peer watch) and
record, on the target, which of the move's requests arrived and when its view first said the
source was relocating."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.contract.peers import meet
from tests.contract.test_spot_move import Add, app
from zlink_trio._integration.store import Batch, Changed, ChangeSubscription, Put, Stores
from zlink_trio._runtime.host import cutover
from zlink_trio._runtime.ownership.node_record import RELOCATING, PeerChanged
from zlink_trio._runtime.routing.arrivals import BEGIN_WAIT
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

REQUEST_TIMEOUT = 5.0


def _hold_view(target: TestHost, source: TestHost, release: trio.Event) -> None:
    """The target's peer watch re-reads the source's record only once ``release`` is set."""
    watch = target.host._tree.membership._watch  # type: ignore[union-attr]
    refresh: Callable[[str], Awaitable[None]] = watch._refresh_key

    async def held(key: str) -> None:
        if key.endswith(source.node_rid.value):
            await release.wait()
        await refresh(key)

    watch._refresh_key = held


def _record_requests(
    target: TestHost, release: trio.Event, events: list[tuple[str, float]]
) -> None:
    """Each move's request the target answers in a task, by class name, when it arrived and
    when it was answered; ``release`` is set by the first ``zlink.RelocateBegin`` or
    ``zlink.RelocateIn``."""
    arrivals = target.host._tree.inbound.arrivals  # type: ignore[union-attr]
    answer = arrivals.on_request

    async def recording(source: zl.NodeRid, about: object, message: object) -> object:
        name = type(message).__name__
        events.append((name, trio.current_time()))
        if name in ("RelocateBegin", "RelocateIn"):
            release.set()
        answered = await answer(source, about, message)
        events.append((f"answered {name}", trio.current_time()))
        return answered

    arrivals.on_request = recording


async def _watch_for_relocating(
    target: TestHost, source: TestHost, events: list[tuple[str, float]]
) -> None:
    """Record the moment the target's view first says the source is relocating."""
    changes = target.host._tree.membership.subscribe()  # type: ignore[union-attr]
    async with changes:
        async for event in changes:
            if (
                isinstance(event, PeerChanged)
                and event.record.rid == source.node_rid
                and event.record.state == RELOCATING
            ):
                events.append(("seen", trio.current_time()))
                return


@contextlib.asynccontextmanager
async def _a_counter_to_move(
    store_dsn: str,
) -> AsyncIterator[tuple[TestHost, TestHost, Stores]]:
    """A source with one Counter to move (its requests time out after ``REQUEST_TIMEOUT``) and
    a target, each seeing the other, on ``Stores`` of their own."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(
            app, dsn=store_dsn, stores=stores, request_timeout=REQUEST_TIMEOUT
        ) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await meet(target, source)
        await source.route.send_to_spot("c-1", Add(5)).instance_spot("move.Counter").submit()
        yield source, target, stores


@pytest.mark.spec("RELOC-74")
async def test_the_target_sees_the_source_relocating_before_the_first_unit_arrives(
    store_dsn: str,
) -> None:
    """The target's view of the source is held until the first move's request reaches it: the
    source waits for the ``RelocateBegin`` answer, so the view is released by that request; the
    target answers it only once the view says RELOCATING, and the first ``RelocateIn`` comes
    after. A source that sealed at once would reach the target with ``RelocateIn`` while the
    view was still held; a target that answered at once would answer before it saw."""
    async with _a_counter_to_move(store_dsn) as (source, target, _):
        events: list[tuple[str, float]] = []
        release = trio.Event()
        _hold_view(target, source, release)
        _record_requests(target, release, events)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_watch_for_relocating, target, source, events)
            result = await source.host.relocate(deadline=20.0)
            assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        names = [name for name, _ in events]
        order = ["RelocateBegin", "seen", "answered RelocateBegin", "RelocateIn"]
        assert order == [name for name in names if name in order], names


@pytest.mark.spec("RELOC-74")
async def test_a_target_that_does_not_see_the_change_answers_after_a_short_bound(
    store_dsn: str,
) -> None:
    """The target's view of the source stays held for the whole relocation: the target still
    answers ``RelocateBegin`` after ``BEGIN_WAIT``, well inside the request timeout, and the
    move goes on."""
    async with _a_counter_to_move(store_dsn) as (source, target, _):
        events: list[tuple[str, float]] = []
        never = trio.Event()
        _hold_view(target, source, never)
        _record_requests(target, trio.Event(), events)
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        times = dict(events)
        assert BEGIN_WAIT <= times["RelocateIn"] - times["RelocateBegin"] < REQUEST_TIMEOUT / 2
        never.set()


gc_app = zl.Application()
collector_at_capture: list[bool] = []


@gc_app.message("gcmove.Bump")
@attrs.frozen
class Bump:
    pass


class Remembered(zl.SpotRelocationAdapter["Tally"]):
    async def capture(self, target: Tally) -> bytes:
        collector_at_capture.append(gc.isenabled())
        return b"x"

    async def restore(self, target: Tally, payload: bytes) -> None:
        pass


@gc_app.instance_spot("gcmove.Tally", relocation=zl.preserve_state_with(Remembered))
class Tally(zl.InstanceSpot):
    @zl.packet_handler(Bump)
    async def bump(self, msg: Bump) -> None:
        pass


@pytest.mark.spec("RELOC-75")
async def test_the_collector_is_paused_while_units_move_and_back_on_after(store_dsn: str) -> None:
    """Each unit's capture (inside its seal) runs with the collector off; once the relocation
    has ended it is on again."""
    collector_at_capture.clear()
    assert gc.isenabled()
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(gc_app, dsn=store_dsn, stores=stores) as source,
        open_test_host(gc_app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        for spot_id in ("t-1", "t-2"):
            await source.route.send_to_spot(spot_id, Bump()).instance_spot("gcmove.Tally").submit()
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        assert [False, False] == collector_at_capture
        assert gc.isenabled()


async def _hinted_until(feed: ChangeSubscription, witness: str) -> set[str]:
    """Every key the feed hints until (and with) the hint that names ``witness``."""
    seen: set[str] = set()
    async for event in feed:
        if isinstance(event, Changed):
            seen |= event.keys
            if witness in event.keys:
                return seen
    raise AssertionError("the feed ended")


@pytest.mark.spec("RELOC-76")
async def test_the_move_is_published_once_the_target_serves_the_unit(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source's ``RelocateOpen`` is held after the commit. A witness written then is
    hinted without the unit's record (hints come in commit order, so the commit was quiet);
    once the target has answered the open, the record's key is hinted."""
    events: list[str] = []
    committed, proceed = trio.Event(), trio.Event()
    open_ = cutover.open_there

    async def held(remote: object, unit: object, target: object) -> None:
        committed.set()
        await proceed.wait()
        await open_(remote, unit, target)  # type: ignore[arg-type]
        events.append("open answered")

    monkeypatch.setattr(cutover, "open_there", held)
    async with _a_counter_to_move(store_dsn) as (source, _, stores):
        record = f"m/{source.mesh.value}/spot/c-1"
        witness = f"m/{source.mesh.value}/witness-76"
        await source.wait_quiet()  # the Counter's claim and Ready mark are written
        with stores.location.changes() as feed, trio.fail_after(20):
            await stores.location.write(Batch([], [Put(witness + "-before", b"w")]))
            await _hinted_until(feed, witness + "-before")
            async with trio.open_nursery() as nursery:
                nursery.start_soon(source.host.relocate)
                await committed.wait()
                await stores.location.write(Batch([], [Put(witness, b"w")]))
                assert record not in await _hinted_until(feed, witness)
                proceed.set()
                await _hinted_until(feed, record)
                events.append("hinted")
        assert ["open answered", "hinted"] == events


@pytest.mark.spec("RELOC-76")
async def test_moves_under_way_together_commit_as_they_notify(store_dsn: str) -> None:
    """Two Counters move at once: the target holds the first ``RelocateIn`` answer until the
    second has come, so each commit is made while the other move is under way, and neither is
    quiet (one statement more per move would slow a host relocation of many units)."""
    async with _a_counter_to_move(store_dsn) as (source, target, _):
        await source.route.send_to_spot("c-2", Add(1)).instance_spot("move.Counter").submit()
        arrivals = target.host._tree.inbound.arrivals  # type: ignore[union-attr]
        answer, both_in = arrivals.on_request, trio.Event()
        came: list[object] = []

        async def one_waits_for_the_other(
            rid: zl.NodeRid, about: object, message: object
        ) -> object:
            if type(message).__name__ == "RelocateIn":
                came.append(about)
                if len(came) == 2:
                    both_in.set()
                with trio.fail_after(10):
                    await both_in.wait()
            return await answer(rid, about, message)

        arrivals.on_request = one_waits_for_the_other
        authority = source.host._node.authority
        hand_over, quiet = authority.hand_over, []

        async def recorded(*args: object, **kwargs: object) -> object:
            quiet.append(kwargs["quiet"])
            return await hand_over(*args, **kwargs)

        authority.hand_over = recorded
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        assert [False, False] == quiet
