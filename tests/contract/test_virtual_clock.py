"""Virtual application time: a host on a ``zlink_trio.testing.VirtualClock`` (specs/testing.md
VCLK-1..VCLK-3).

Every host here runs on the real store and real ZeroMQ. Virtual time moves only by
``clock.advance``; where a test waits in real time, it says so, because real time passing is
then the point.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from zlink_trio._runtime.host.host import open_host_on
from zlink_trio.testing import VirtualClock

LEASE = 1.5
"""A short node lease, so that real time well past it passes within a test."""

TIMEOUT = 30.0
"""The virtual timeout of calls under test: longer than a test ever waits in real time, so a
deadline kept on Trio's clock by mistake cannot end a call while the test waits for it."""

app = zl.Application()


@app.message("vclk.Ask")
@attrs.frozen
class Ask:
    text: str = ""


@app.message("vclk.Answer")
@attrs.frozen
class Answer:
    text: str


@app.message("vclk.Hold")
@attrs.frozen
class Hold:
    """Its handler (or ``on_create``, ``on_actor_join``) waits until the test releases it."""


@app.message("vclk.JoinRoom")
@attrs.frozen
class JoinRoom:
    spot_id: str


class Probe:
    """What the Spots and Actors of one test saw."""

    def __init__(self) -> None:
        self.ticks: list[zl.TimerTick] = []
        self.handled: list[str] = []
        self.deadlines: list[float | None] = []
        self.entered = trio.Event()
        self.release = trio.Event()
        self.closings: list[zl.SpotClosingContext] = []
        self.closing_entered = trio.Event()
        self.closing_cuts = 0
        self.hold_on_closing = False
        self.completions: list[zl.ActorJoinCompletion] = []
        self.completed = trio.Event()


probe = Probe()


@pytest.fixture(autouse=True)
def fresh_probe() -> None:
    global probe
    probe = Probe()


async def hold(ctx: zl.MessageContext | None = None) -> None:
    """Wait, as a handler, until the test releases it."""
    if ctx is not None:
        probe.deadlines.append(ctx.deadline)
    probe.entered.set()
    await probe.release.wait()


@app.instance_spot("vclk.Ticker")
class Ticker(zl.InstanceSpot):
    async def on_initialize(self) -> None:
        self.context.timers.start("beat", 10)

    @zl.timer_handler("beat")
    async def beat(self, tick: zl.TimerTick) -> None:
        probe.ticks.append(tick)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer("ticking")


@app.instance_spot("vclk.Session")
class Session(zl.InstanceSpot):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        probe.closings.append(closing)
        probe.closing_entered.set()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(str(self.context.ref.object_generation.value))


@app.user_spot("vclk.Room")
class Room(zl.Spot):
    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    async def on_create(self, request: object | None) -> zl.SpotCreateResponse:
        if isinstance(request, Hold):
            await hold()
        return zl.SpotCreateResponse.accept()

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        await hold()
        return zl.SpotActorJoinResult.accept()

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        probe.closings.append(closing)
        probe.closing_entered.set()
        if probe.hold_on_closing:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                probe.closing_cuts += 1
                raise

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, req: Hold, ctx: zl.MessageContext) -> Answer:
        await hold(ctx)
        return Answer("held")

    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        probe.handled.append(req.text)
        probe.deadlines.append(ctx.deadline)
        return Answer(req.text)


@app.actor("vclk.Player")
class Player(zl.Actor):
    @zl.packet_handler(JoinRoom)
    async def join(self, msg: JoinRoom) -> None:
        self.context.join_spot(msg.spot_id).timeout(TIMEOUT).defer()

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, req: Hold, ctx: zl.MessageContext) -> Answer:
        await hold(ctx)
        return Answer("held")

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        probe.completions.append(completion)
        probe.completed.set()


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


def config(store_dsn: str, mesh: str | None = None, **values: Any) -> zl.HostConfig:
    return zl.HostConfig(
        mesh=mesh or fresh("vclk"), store_dsn=store_dsn, node_lease=LEASE, **values
    )


@asynccontextmanager
async def host_on(clock: VirtualClock, store_dsn: str, **values: Any) -> AsyncIterator[zl.Host]:
    async with open_host_on(app, config(store_dsn, **values), clock=clock) as host:
        try:
            yield host
        finally:
            probe.release.set()  # nothing held may outlive the test into the host's shutdown


class Outcome:
    """The end of one call run in the background: its value or its error kind."""

    def __init__(self) -> None:
        self.value: object = None
        self.error: zl.ErrorKind | None = None
        self.done = trio.Event()

    async def run(self, call: Callable[[], Awaitable[object]]) -> None:
        try:
            self.value = await call()
        except zl.ZLinkError as error:
            self.error = error.kind
        finally:
            self.done.set()

    async def wait(self) -> None:
        with trio.fail_after(10):
            await self.done.wait()


async def entered() -> None:
    with trio.fail_after(10):
        await probe.entered.wait()


async def ask(host: zl.Host, spot_id: str, text: str = "", seconds: float = 5) -> Answer:
    with trio.fail_after(10):
        call = host.route.request_to_spot(spot_id, Ask(text), reply_type=Answer)
        return await call.timeout(seconds).submit()


@pytest.mark.spec("VCLK-1")
async def test_a_host_on_a_still_virtual_clock_renews_its_lease_and_serves(
    store_dsn: str,
) -> None:
    """The host starts and serves, and keeps renewing its lease on Trio's clock for longer than
    the lease in real time while virtual time stands still at its start."""
    clock = VirtualClock()
    room = fresh("room")
    async with host_on(clock, store_dsn) as host:
        await host.spots.get_or_create(room, "vclk.Room").submit()
        assert "first" == (await ask(host, room, "first")).text
        fence = host._node.fence
        began = trio.current_time()
        assert math.isfinite(fence.until)  # the record is published: the fence is on
        # Real time has to pass here: renewals on Trio's clock are what is shown. Each renewal
        # that began at s moves the fence to s + lease - margin and sets the fence's change
        # event; wait for renewals until one began more than a whole lease after `began`.
        with trio.fail_after(10 * LEASE):
            while fence.until < began + 2 * LEASE:
                await fence._changed.wait()
        assert fence.serving
        assert "second" == (await ask(host, room, "second")).text
        assert 0.0 == clock.now()


@pytest.mark.spec("VCLK-1")
async def test_an_hour_of_virtual_time_leaves_the_lease_and_the_host_serving(
    store_dsn: str,
) -> None:
    """Advancing virtual time by 3600 s does not lapse the lease: the fence is not lost and the
    host serves on, with request deadlines counted from the new virtual time."""
    clock = VirtualClock()
    room = fresh("room")
    async with host_on(clock, store_dsn) as host:
        await host.spots.get_or_create(room, "vclk.Room").submit()
        await clock.advance(3600)
        assert 3600.0 == clock.now()
        fence = host._node.fence
        assert fence.serving
        assert fence.lost is None
        assert "later" == (await ask(host, room, "later", seconds=5)).text
        assert [3605.0] == probe.deadlines


@pytest.mark.spec("VCLK-2")
async def test_a_spot_timer_ticks_only_as_virtual_time_passes(store_dsn: str) -> None:
    """A timer of interval 10 started at virtual 0 has not ticked before 10; advancing to 30
    runs exactly its ticks 1, 2 and 3, each at its own due time (none skipped)."""
    clock = VirtualClock()
    async with host_on(clock, store_dsn) as host:
        call = host.route.request_to_spot(fresh("ticker"), Ask(), reply_type=Answer)
        await call.instance_spot("vclk.Ticker").submit()
        await clock.advance(9.9)
        assert [] == probe.ticks
        await clock.advance(20.1)
        assert [(1, 10.0, 0), (2, 20.0, 0), (3, 30.0, 0)] == [
            (tick.number, tick.scheduled_at, tick.skipped) for tick in probe.ticks
        ]


@pytest.mark.spec("VCLK-2")
async def test_a_request_times_out_when_virtual_time_reaches_its_deadline(
    store_dsn: str,
) -> None:
    """A request with a timeout to a handler that never answers ends DEADLINE_EXCEEDED once
    virtual time reaches now + timeout, not before; the handler saw that deadline as
    ctx.deadline."""
    clock = VirtualClock(100.0)
    room = fresh("room")
    async with host_on(clock, store_dsn) as host, trio.open_nursery() as nursery:
        await host.spots.get_or_create(room, "vclk.Room").submit()
        outcome = Outcome()
        call = host.route.request_to_spot(room, Hold(), reply_type=Answer).timeout(TIMEOUT)
        nursery.start_soon(outcome.run, call.submit)
        await entered()
        assert [130.0] == probe.deadlines
        await clock.advance(29.9)
        assert not outcome.done.is_set()
        await clock.advance(0.1)
        await outcome.wait()
        assert zl.ErrorKind.DEADLINE_EXCEEDED == outcome.error


@pytest.mark.spec("VCLK-2")
async def test_a_request_whose_deadline_passed_in_the_queue_is_not_handled(
    store_dsn: str,
) -> None:
    """A request queued behind a busy turn whose virtual deadline passes ends DEADLINE_EXCEEDED,
    and its handler never runs once the Spot gets to it (the check reads the virtual clock)."""
    clock = VirtualClock()
    room = fresh("room")
    async with host_on(clock, store_dsn) as host, trio.open_nursery() as nursery:
        await host.spots.get_or_create(room, "vclk.Room").submit()
        busy, late = Outcome(), Outcome()
        nursery.start_soon(
            busy.run,
            host.route.request_to_spot(room, Hold(), reply_type=Answer).timeout(2 * TIMEOUT).submit,
        )
        await entered()
        call = host.route.request_to_spot(room, Ask("late"), reply_type=Answer).timeout(TIMEOUT)
        nursery.start_soon(late.run, call.submit)
        await trio.testing.wait_all_tasks_blocked()  # it is queued, its deadline fixed at 30
        await clock.advance(TIMEOUT)
        await late.wait()
        assert zl.ErrorKind.DEADLINE_EXCEEDED == late.error
        probe.release.set()
        await busy.wait()
        assert Answer("held") == busy.value
        assert "after" == (await ask(host, room, "after")).text
        assert ["after"] == probe.handled


@pytest.mark.spec("VCLK-2")
async def test_a_remote_request_follows_the_virtual_clock_on_both_hosts(store_dsn: str) -> None:
    """Between two hosts on one virtual clock, the budget a request carries is virtual (the
    owner's handler sees the caller's deadline), and real time past it does not end the call:
    only virtual time reaching the deadline does."""
    clock = VirtualClock(100.0)
    room = fresh("room")
    mesh = fresh("vclk")
    async with (
        open_host_on(app, config(store_dsn, mesh), clock=clock) as caller,
        host_on(clock, store_dsn, mesh=mesh) as owner,
        trio.open_nursery() as nursery,
    ):
        await owner.spots.get_or_create(room, "vclk.Room").submit()
        outcome = Outcome()
        call = caller.route.request_to_spot(room, Hold(), reply_type=Answer).timeout(0.5)
        nursery.start_soon(outcome.run, call.submit)
        await entered()
        assert [pytest.approx(100.5, abs=1e-6)] == probe.deadlines
        # Real time has to pass here: three times the budget, and the call still waits.
        await trio.sleep(1.5)
        assert not outcome.done.is_set()
        await clock.advance(0.5)
        await outcome.wait()
        assert zl.ErrorKind.DEADLINE_EXCEEDED == outcome.error


@pytest.mark.spec("VCLK-2")
async def test_idle_eviction_follows_virtual_time(store_dsn: str) -> None:
    """An Instance Spot with instance_idle_timeout 30 is still live after 29 virtual seconds
    without a turn and is evicted (IDLE_EVICTED) at 30."""
    clock = VirtualClock()
    session = fresh("session")
    async with host_on(clock, store_dsn, instance_idle_timeout=30) as host:
        call = host.route.request_to_spot(session, Ask(), reply_type=Answer)
        await call.instance_spot("vclk.Session").submit()
        await clock.advance(29)
        assert [] == probe.closings
        await clock.advance(1)
        with trio.fail_after(10):
            await probe.closing_entered.wait()
        assert [zl.SpotCloseReason.IDLE_EVICTED] == [c.reason for c in probe.closings]
        assert [35.0] == [c.deadline for c in probe.closings]  # 30 + closing_timeout 5


@pytest.mark.spec("VCLK-2")
async def test_on_closing_is_cut_at_its_virtual_deadline(store_dsn: str) -> None:
    """An explicit close gives on_closing the deadline now + closing_timeout on the virtual
    clock; an on_closing that never returns runs on until virtual time reaches it."""
    clock = VirtualClock(100.0)
    probe.hold_on_closing = True
    async with (
        host_on(clock, store_dsn, closing_timeout=5) as host,
        trio.open_nursery() as nursery,
    ):
        created = await host.spots.get_or_create(fresh("room"), "vclk.Room").submit()
        closing = Outcome()

        async def close() -> bool:
            return await host.spots.close(created.spot_ref)

        nursery.start_soon(closing.run, close)
        with trio.fail_after(10):
            await probe.closing_entered.wait()
        assert [105.0] == [c.deadline for c in probe.closings]
        await clock.advance(4.9)
        assert 0 == probe.closing_cuts
        await clock.advance(0.1)
        assert 1 == probe.closing_cuts
        await closing.wait()
        assert closing.value is True


@pytest.mark.spec("VCLK-1", "VCLK-2")
async def test_host_shutdown_gives_on_closing_a_virtual_deadline_and_ends_in_real_time(
    store_dsn: str,
) -> None:
    """Host shutdown gives on_closing the deadline virtual now + closing_timeout; an on_closing
    that never returns does not hold a host on a still clock: shutdown ends within
    closing_timeout + store_release_timeout of real time, and on_closing is cancelled."""
    clock = VirtualClock(100.0)
    probe.hold_on_closing = True
    values = zl.HostConfig(mesh="bounds", store_dsn=store_dsn, closing_timeout=0.5)
    with trio.fail_after(values.closing_timeout + values.store_release_timeout + 5):
        async with host_on(clock, store_dsn, closing_timeout=values.closing_timeout) as host:
            await host.spots.get_or_create(fresh("room"), "vclk.Room").submit()
    assert [(zl.SpotCloseReason.HOST_SHUTDOWN, 100.5)] == [
        (c.reason, c.deadline) for c in probe.closings
    ]
    assert 1 == probe.closing_cuts
    assert 100.0 == clock.now()


@pytest.mark.spec("VCLK-2")
async def test_worker_create_actor_and_join_timeouts_follow_virtual_time(store_dsn: str) -> None:
    """A worker call, a User Spot creation, a request to an Actor and an Actor's join, each with a
    timeout and each waiting on something that never comes, end DEADLINE_EXCEEDED only at
    virtual now + timeout."""
    clock = VirtualClock()
    player, other, room = fresh("player"), fresh("player"), fresh("room")
    async with host_on(clock, store_dsn) as host, trio.open_nursery() as nursery:
        await host.spots.get_or_create(room, "vclk.Room").submit()
        await host.actors.create(player, "vclk.Player").submit()
        await host.actors.create(other, "vclk.Player").submit()
        worker, creating, asking = Outcome(), Outcome(), Outcome()
        ask_actor = host.route.request_to_actor(other, Hold(), reply_type=Answer).timeout(TIMEOUT)
        nursery.start_soon(asking.run, ask_actor.submit)
        nursery.start_soon(worker.run, host.workers.run_io_worker(hold).timeout(TIMEOUT).submit)
        call = host.spots.get_or_create(fresh("room"), "vclk.Room").request(Hold()).timeout(TIMEOUT)
        nursery.start_soon(creating.run, call.submit)
        await host.route.send_to_actor(player, JoinRoom(room)).submit()
        # Every call has started (the join from the Actor's turn) and fixed its deadline at 30.
        await trio.testing.wait_all_tasks_blocked()
        await clock.advance(29.9)
        assert not worker.done.is_set()
        assert not creating.done.is_set()
        assert not asking.done.is_set()
        assert [] == probe.completions
        await clock.advance(0.1)
        await worker.wait()
        await creating.wait()
        await asking.wait()
        with trio.fail_after(10):
            await probe.completed.wait()
        assert zl.ErrorKind.DEADLINE_EXCEEDED == worker.error
        assert zl.ErrorKind.DEADLINE_EXCEEDED == creating.error
        assert zl.ErrorKind.DEADLINE_EXCEEDED == asking.error
        assert [TIMEOUT] == probe.deadlines  # the Actor's handler saw the virtual deadline
        (joined,) = probe.completions
        assert zl.ActorJoinOutcome.FAILED == joined.outcome
        assert joined.error is not None
        assert zl.ErrorKind.DEADLINE_EXCEEDED == joined.error.kind


# --- the clock itself (no host) ---------------------------------------------------------------


@pytest.mark.spec("VCLK-3")
async def test_advance_visits_each_due_point_in_order_and_settles_after_each() -> None:
    """Sleepers wake at their own due times in order, a deadline set while settling is visited
    too when it falls before the target, and settle runs after each due point and at the end."""
    clock = VirtualClock(1.0)
    woke: list[tuple[str, float]] = []
    settled: list[float] = []

    async def settle() -> None:
        await trio.testing.wait_all_tasks_blocked()
        settled.append(clock.now())

    async def sleeper(name: str, until: float) -> None:
        await clock.sleep_until(until)
        woke.append((name, clock.now()))
        if name == "first":  # a new deadline, set while the clock settles after 4.0
            await clock.sleep_until(clock.now() + 1)
            woke.append(("again", clock.now()))

    clock.settle = settle
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sleeper, "second", 8.0)
        nursery.start_soon(sleeper, "first", 4.0)
        nursery.start_soon(sleeper, "late", 20.0)
        await trio.testing.wait_all_tasks_blocked()
        assert 4.0 == clock.next_deadline
        await clock.advance(9)
        assert [("first", 4.0), ("again", 5.0), ("second", 8.0)] == woke
        assert [4.0, 5.0, 8.0, 10.0] == settled
        assert 10.0 == clock.now()
        assert 20.0 == clock.next_deadline
        nursery.cancel_scope.cancel()


@pytest.mark.spec("VCLK-3")
async def test_a_scope_deadline_can_be_moved_removed_or_already_past() -> None:
    """set_deadline replaces a scope's deadline (inf removes it); a deadline not after now
    cancels at once; sleep_until a past time returns at once."""
    clock = VirtualClock()
    moved, removed, past = trio.CancelScope(), trio.CancelScope(), trio.CancelScope()
    clock.set_deadline(moved, 5)
    clock.set_deadline(moved, 8)
    clock.set_deadline(removed, 5)
    clock.set_deadline(removed, math.inf)
    await clock.advance(6)
    assert (False, False) == (moved.cancel_called, removed.cancel_called)
    await clock.advance(2)
    assert (True, False) == (moved.cancel_called, removed.cancel_called)
    clock.set_deadline(past, 8)
    assert past.cancel_called
    with trio.move_on_after(1) as guard:
        await clock.sleep_until(3)
    assert not guard.cancelled_caught
    assert math.inf == clock.next_deadline


@pytest.mark.spec("VCLK-3")
async def test_time_never_goes_back_and_takes_only_finite_numbers() -> None:
    """advance of a negative amount, advance_to an earlier time, NaN, infinity or a bool are
    refused; so is a second advance while one runs."""
    clock = VirtualClock(10.0)
    with pytest.raises(ValueError, match="cannot go back"):
        await clock.advance(-1)
    with pytest.raises(ValueError, match="cannot go back"):
        await clock.advance_to(9.5)
    for bad in (math.nan, math.inf):
        with pytest.raises(ValueError, match="finite"):
            await clock.advance(bad)
    with pytest.raises(TypeError):
        await clock.advance(True)
    with pytest.raises(ValueError, match="NaN"):
        clock.set_deadline(trio.CancelScope(), math.nan)
    assert 10.0 == clock.now()
    gate = trio.Event()

    async def settle() -> None:
        await gate.wait()

    clock.settle = settle
    async with trio.open_nursery() as nursery:
        nursery.start_soon(clock.advance, 1)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(RuntimeError, match="already advancing"):
            await clock.advance(1)
        gate.set()
    assert 11.0 == clock.now()


@pytest.mark.spec("VCLK-3")
def test_a_virtual_clock_serves_one_trio_run() -> None:
    """The first run that uses a clock owns it; using it in another run raises RuntimeError."""
    clock = VirtualClock()
    trio.run(clock.advance, 1)
    with pytest.raises(RuntimeError, match="another Trio run"):
        trio.run(clock.advance, 1)
    with pytest.raises(RuntimeError, match="another Trio run"):
        trio.run(clock.sleep_until, 5)
    assert 1.0 == clock.now()
