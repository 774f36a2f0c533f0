"""An ``APPLICATION_SIGNALED`` User Spot picks the moment it may move (specs/spots.md
SPOT-81..SPOT-84; spots/boundary.py, host/moving.py Rule 7): ``relocation_ready().defer()`` in a
turn, then ``on_relocation_ready_completed`` with ``CONTINUED`` here or ``RELOCATED`` on the new
host, before anything the Spot held runs."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.peers import meet
from tests.members import NoMembers
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()
CONTINUED, RELOCATED = zl.RelocationReadyOutcome.CONTINUED, zl.RelocationReadyOutcome.RELOCATED


@app.message("ready.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("ready.Get")
@attrs.frozen
class Get:
    pass


@app.message("ready.Count")
@attrs.frozen
class Count:
    value: int
    node: str


@app.message("ready.Finish")
@attrs.frozen
class Finish:
    """End a round: signal the boundary (``times`` times in the one turn)."""

    times: int = 1


@app.message("ready.Tick")
@attrs.frozen
class Tick:
    """Start a timer that ticks every ``interval`` seconds."""

    interval: float


events: list[str] = []
"""What every Spot of these tests ran, in order: handlers, ticks and callbacks with their node."""
refusals: list[zl.ErrorKind] = []
"""The kinds of the errors ``defer()`` raised."""
in_callback = trio.Event()
callback_may_end: trio.Event | None = None
"""When set by a test, ``on_relocation_ready_completed`` waits for it."""
capture_fails = False


def _reset() -> None:
    global in_callback, callback_may_end, capture_fails
    events.clear()
    refusals.clear()
    in_callback, callback_may_end, capture_fails = trio.Event(), None, False


def _defer(context: Any) -> None:
    try:
        context.relocation_ready().defer()
    except zl.ZLinkError as error:
        refusals.append(error.kind)


class RoundState(zl.SpotRelocationAdapter["Round"]):
    async def capture(self, target: Round) -> bytes:
        if capture_fails:
            raise RuntimeError("this round cannot be written down")
        return target.value.to_bytes(8, "big")

    async def restore(self, target: Round, payload: bytes) -> None:
        target.value = int.from_bytes(payload, "big")


class Counting:
    context: Any

    def __init__(self) -> None:
        self.value = 0

    def _node(self) -> str:
        return str(self.context.ref.node_rid.value)

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount
        events.append(f"add {msg.amount}")

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(self.value, self._node())

    @zl.packet_handler(Finish)
    async def finish(self, msg: Finish) -> None:
        events.append("finish")
        for _ in range(msg.times):
            _defer(self.context)


@app.user_spot(
    "ready.Round",
    coordination=zl.RelocationCoordinationMode.APPLICATION_SIGNALED,
    relocation=zl.preserve_state_with(RoundState),
)
class Round(Counting, zl.Spot):
    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        return zl.SpotActorJoinResult.accept()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    async def on_initialize(self) -> None:
        _defer(self.context)  # a lifecycle turn: not a message or timer turn

    async def on_relocation_ready_completed(self, completion: zl.RelocationReadyCompletion) -> None:
        events.append(f"completed {completion.outcome.name} on {self._node()}")
        in_callback.set()
        if callback_may_end is not None:
            await callback_may_end.wait()
        events.append("completed ends")

    @zl.packet_handler(Tick)
    async def start_ticking(self, msg: Tick) -> None:
        self.context.timers.start("round", msg.interval)

    @zl.timer_handler("round")
    async def round_tick(self, tick: zl.TimerTick) -> None:
        events.append("tick")
        if self.value >= 100:
            self.value = 0
            _defer(self.context)  # a tick may end the round too


@app.user_spot("ready.Plain", relocation=zl.preserve_state_with(RoundState))
class Plain(Counting, NoMembers):
    """FRAMEWORK_MANAGED: the framework picks the boundary; ``defer()`` is refused."""


@app.instance_spot("ready.Counter")
class Counter(Counting, zl.InstanceSpot):
    pass


@app.user_spot("ready.Hall", mode=zl.SpotFactoryMode.PER_ACTOR)
class Hall(Counting, NoMembers):
    pass


@app.message("ready.Join")
@attrs.frozen
class Join:
    spot: str


@app.actor("ready.Player", relocation=zl.recreate_on_relocation())
class Player(zl.Actor):
    context: Any

    @zl.packet_handler(Join)
    async def join(self, msg: Join) -> None:
        self.context.join_spot(msg.spot).defer()

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(0, f"{self.context.ref.node_rid.value} {self.context.spot_id.value}")


async def _waiting_for_boundary(host: TestHost, spot_id: str) -> None:
    """Return once ``host``'s relocation waits for Spot ``spot_id``'s next boundary."""
    activation = host.host._tree.spots.activations[zl.SpotId(spot_id)]  # type: ignore[union-attr]
    with trio.fail_after(10):
        while activation.boundary_wanted is None:  # noqa: ASYNC110  # no event for it
            await trio.sleep(0.001)


@contextlib.asynccontextmanager
async def _two_hosts(store_dsn: str) -> AsyncIterator[tuple[TestHost, TestHost]]:
    """A source and a target host of one mesh that see each other."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        yield source, target


@contextlib.asynccontextmanager
async def _relocating(source: TestHost, spot_id: str) -> AsyncIterator[list[zl.RelocationResult]]:
    """``source`` relocates in the background; the block runs once its move of ``spot_id``
    waits for the Spot's boundary, and the relocation's result is in the list after it."""
    results: list[zl.RelocationResult] = []
    async with trio.open_nursery() as nursery:

        async def relocate() -> None:
            results.append(await source.host.relocate(deadline=20.0))

        nursery.start_soon(relocate)
        await _waiting_for_boundary(source, spot_id)
        yield results


async def _round(host: TestHost, spot_id: str, value: int) -> None:
    await host.spots.get_or_create(spot_id, "ready.Round").submit()
    await host.route.send_to_spot(spot_id, Add(value)).submit()


@pytest.mark.spec("SPOT-81", "SPOT-82", "SPOT-84")
async def test_a_boundary_no_move_takes_continues_before_the_next_message(
    store_dsn: str,
) -> None:
    """With no relocation, a turn's ``defer()`` ends in ``CONTINUED`` on this host right after
    that turn and before the next message; ``on_initialize`` could not signal one."""
    _reset()
    async with open_test_host(app, dsn=store_dsn) as host:
        await _round(host, "r-1", 1)
        await host.route.send_to_spot("r-1", Finish()).submit()
        await host.route.send_to_spot("r-1", Add(2)).submit()
        count = await host.route.request_to_spot("r-1", Get(), reply_type=Count).submit()
        here = host.node_rid.value
        assert Count(3, here) == count
        assert [
            "add 1",
            "finish",
            f"completed CONTINUED on {here}",
            "completed ends",
            "add 2",
        ] == events
        assert [zl.ErrorKind.INVALID_OPERATION] == refusals  # on_initialize's


@pytest.mark.spec("SPOT-83")
async def test_nothing_held_runs_before_the_callback_returns(store_dsn: str) -> None:
    """While ``on_relocation_ready_completed`` waits, neither a message sent after the boundary
    nor a tick of a timer due every 5 ms runs; both run once it returns."""
    global callback_may_end
    _reset()
    callback_may_end = trio.Event()
    async with open_test_host(app, dsn=store_dsn) as host:
        await _round(host, "r-2", 1)
        await host.route.send_to_spot("r-2", Tick(0.005)).submit()
        await host.route.send_to_spot("r-2", Finish()).submit()
        await in_callback.wait()
        await host.route.send_to_spot("r-2", Add(2)).submit()
        await trio.sleep(0.05)  # ten ticks fall due meanwhile
        started = events.index(f"completed CONTINUED on {host.node_rid.value}")
        assert [] == events[started + 1 :]
        callback_may_end.set()
        with trio.fail_after(10):
            while "tick" not in events[started:] or "add 2" not in events:  # noqa: ASYNC110
                await trio.sleep(0.001)
        assert "completed ends" == events[started + 1]


@pytest.mark.spec("SPOT-81", "SPOT-82")
async def test_a_relocation_moves_the_spot_at_its_boundary_and_it_hears_relocated(
    store_dsn: str,
) -> None:
    """The host relocates while the Round plays on: the move waits (messages still run on the
    source), seals the Round at the end of the turn that signals, and the restored Round hears
    ``RELOCATED`` on the target, with its state, before the next message; the source never
    hears ``CONTINUED``."""
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        await _round(source, "r-3", 4)
        async with _relocating(source, "r-3") as results:
            await source.route.send_to_spot("r-3", Add(1)).submit()  # the round goes on
            count = await source.route.request_to_spot("r-3", Get(), reply_type=Count).submit()
            assert Count(5, source.node_rid.value) == count
            await source.route.send_to_spot("r-3", Finish()).submit()
            await source.route.send_to_spot("r-3", Add(2)).submit()  # held at the boundary
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        count = await target.route.request_to_spot("r-3", Get(), reply_type=Count).submit()
        there = target.node_rid.value
        assert Count(7, there) == count
        assert ["add 4", "add 1", "finish", f"completed RELOCATED on {there}"] == events[:4]
        assert ["completed ends", "add 2"] == events[4:]


@pytest.mark.spec("SPOT-82")
async def test_a_move_given_up_after_the_boundary_continues_on_the_source(
    store_dsn: str,
) -> None:
    """The Round's capture fails after the boundary sealed it: the relocation ends blocked, the
    Round hears ``CONTINUED`` on the source before what it held runs there, with its state."""
    global capture_fails
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        await _round(source, "r-4", 4)
        capture_fails = True
        async with _relocating(source, "r-4") as results:
            await source.route.send_to_spot("r-4", Finish()).submit()
            await source.route.send_to_spot("r-4", Add(2)).submit()  # held at the boundary
        assert (zl.RelocationOutcome.BLOCKED, zl.RelocationReason.STATE_INCOMPATIBLE) == (
            results[0].outcome,
            results[0].reason,
        )
        count = await target.route.request_to_spot("r-4", Get(), reply_type=Count).submit()
        here = source.node_rid.value
        assert Count(6, here) == count
        assert ["add 4", "finish", f"completed CONTINUED on {here}", "completed ends"] == (
            events[:4]
        )
        assert ["add 2"] == events[4:]


@pytest.mark.spec("SPOT-81")
async def test_a_spot_that_signals_no_boundary_stays_where_it_is(store_dsn: str) -> None:
    """A relocation whose deadline passes before the Round signals ends blocked with
    ``DEADLINE_EXCEEDED``; the Round serves on the source, unsealed, and no callback ran."""
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        await _round(source, "r-5", 4)
        result = await source.host.relocate(deadline=0.5)
        assert (zl.RelocationOutcome.BLOCKED, zl.RelocationReason.DEADLINE_EXCEEDED) == (
            result.outcome,
            result.reason,
        )
        await source.route.send_to_spot("r-5", Add(1)).submit()
        count = await target.route.request_to_spot("r-5", Get(), reply_type=Count).submit()
        assert Count(5, source.node_rid.value) == count
        assert not [event for event in events if event.startswith("completed")]


@pytest.mark.spec("SPOT-84")
async def test_defer_is_refused_where_the_spot_does_not_pick_its_boundary(
    store_dsn: str,
) -> None:
    """``defer()`` in a FRAMEWORK_MANAGED User Spot, an Instance Spot, a PER_ACTOR Spot, and a
    second time in one turn of a Round: ``INVALID_OPERATION`` each time, and no callback for
    any of them; the Round's first ``defer()`` still ends in one ``CONTINUED``."""
    _reset()
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("p-1", "ready.Plain").submit()
        await host.spots.get_or_create("h-1", "ready.Hall").submit()
        await host.route.send_to_spot("p-1", Finish()).submit()
        await host.route.send_to_spot("c-1", Finish()).instance_spot("ready.Counter").submit()
        await host.route.send_to_spot("h-1", Finish()).submit()
        await _round(host, "r-6", 1)  # its on_initialize is refused too
        await host.route.send_to_spot("r-6", Finish(times=2)).submit()
        await host.route.request_to_spot("r-6", Get(), reply_type=Count).submit()
        for spot_id in ("p-1", "h-1"):
            await host.route.request_to_spot(spot_id, Get(), reply_type=Count).submit()
        await (
            host.route.request_to_spot("c-1", Get(), reply_type=Count)
            .instance_spot("ready.Counter")
            .submit()
        )
        assert [zl.ErrorKind.INVALID_OPERATION] * 5 == refusals
        completed = [
            event for event in events if event.startswith("completed ") and " on " in event
        ]
        assert [f"completed CONTINUED on {host.node_rid.value}"] == completed


@pytest.mark.spec("SPOT-84")
async def test_defer_outside_any_turn_is_refused() -> None:
    """From a task that runs no turn of the Spot (here: the test itself, holding a Round's
    context), ``defer()`` raises ``INVALID_OPERATION``."""
    _reset()
    async with open_test_host(app) as host:
        await _round(host, "r-7", 1)
        activation = host.host._tree.spots.activations[zl.SpotId("r-7")]  # type: ignore[union-attr]
        _defer(activation._instance.context)
        assert [zl.ErrorKind.INVALID_OPERATION] * 2 == refusals  # on_initialize's, then this


@pytest.mark.spec("SPOT-81")
async def test_a_timer_tick_may_signal_the_boundary(store_dsn: str) -> None:
    """The Round's tick ends the round (its count reached 100) and signals: ``CONTINUED``
    follows that tick, before the next one."""
    _reset()
    async with open_test_host(app, dsn=store_dsn) as host:
        await _round(host, "r-8", 100)
        await host.route.send_to_spot("r-8", Tick(0.005)).submit()
        with trio.fail_after(10):
            while events.count("tick") < 2:  # noqa: ASYNC110  # no event for a tick
                await trio.sleep(0.001)
        here = host.node_rid.value
        first = events.index("tick")
        assert [f"completed CONTINUED on {here}", "completed ends", "tick"] == events[
            first + 1 : first + 4
        ]


@pytest.mark.spec("SPOT-82")
async def test_a_round_moves_with_its_member_at_its_boundary(store_dsn: str) -> None:
    """A Round with a member Player: the boundary seals the Round, its member is sealed after,
    both move, and the Round hears ``RELOCATED`` on the target, where the Player is its
    member."""
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        await _round(source, "r-9", 3)
        await source.actors.create("p-9", "ready.Player").submit()
        await source.route.send_to_actor("p-9", Join("r-9")).submit()
        get = source.route.request_to_actor("p-9", Get(), reply_type=Count)
        assert f"{source.node_rid.value} r-9" == (await get.submit()).node
        async with _relocating(source, "r-9") as results:
            await source.route.send_to_spot("r-9", Finish()).submit()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        there = target.node_rid.value
        count = await target.route.request_to_spot("r-9", Get(), reply_type=Count).submit()
        assert Count(3, there) == count
        get = target.route.request_to_actor("p-9", Get(), reply_type=Count)
        assert f"{there} r-9" == (await get.submit()).node
        assert f"completed RELOCATED on {there}" in events
