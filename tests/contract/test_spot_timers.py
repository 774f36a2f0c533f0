"""Timers on Spots: @zl.timer_handler, self.context.timers, ticks as turns (specs/timers.md)."""

from __future__ import annotations

import itertools
import logging
import math
import uuid
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers

INTERVAL = 0.05
"""A short real interval: the host's store does real I/O, so the clock cannot autojump."""

app = zl.Application()


@app.message("timers.Start")
@attrs.frozen
class Start:
    policy: str = "default"
    catch_up: int = 1


@app.message("timers.Try")
@attrs.frozen
class Try:
    how: str


@app.message("timers.Hold")
@attrs.frozen
class Hold:
    seconds: float


@app.message("timers.Answer")
@attrs.frozen
class Answer:
    text: str


@app.message("timers.HoldOn")
@attrs.frozen
class HoldOn:
    pass


@app.message("timers.Quit")
@attrs.frozen
class Quit:
    pass


class Probe:
    """What one Spot's ticks and turns did, seen from the test."""

    def __init__(self, *, start_in_init: bool = False) -> None:
        self.start_in_init = start_in_init
        self.ticks: list[zl.TimerTick] = []
        self.started: list[float] = []
        self.ended: list[float] = []
        self.slow: dict[int, float] = {}
        """Seconds the tick with that index (0 = first delivered) runs."""
        self.fail_on: set[int] = set()
        self.busy = False
        self.overlaps: list[int] = []
        self.initialized = False
        self.closing = False
        self.out_of_life: list[int] = []
        self.start_while_closing = "not tried"
        self.closed = trio.Event()
        self.holding = trio.Event()
        self.release = trio.Event()
        self._changed = trio.Event()

    def changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_ticks(self, count: int) -> None:
        with trio.fail_after(10):
            while len(self.ticks) < count:
                await self._changed.wait()


probes: dict[str, Probe] = {}


def probe_of(spot: Any) -> Probe:
    return probes[spot.context.spot_id.value]


def options_of(msg: Start) -> zl.TimerOptions | None:
    policies = {
        "skip": zl.TimerOverrunPolicy.SKIP_LATE_TICKS,
        "catch_up": zl.TimerOverrunPolicy.CATCH_UP_BOUNDED,
        "delay": zl.TimerOverrunPolicy.DELAY_NEXT_TICK,
    }
    if msg.policy == "default":
        return None
    return zl.TimerOptions(overrun_policy=policies[msg.policy], max_catch_up_ticks=msg.catch_up)


# Shared by both Spot kinds: the marks live on the functions, so each class gets the same table.
@zl.timer_handler("beat")
async def beat(self: Any, tick: zl.TimerTick) -> None:
    probe = probe_of(self)
    if probe.busy:
        probe.overlaps.append(tick.number)
    if not probe.initialized or probe.closing:
        probe.out_of_life.append(tick.number)
    index = len(probe.ticks)
    probe.busy = True
    probe.ticks.append(tick)
    probe.started.append(trio.current_time())
    try:
        await trio.sleep(probe.slow.get(index, 0))
        if index in probe.fail_on:
            raise RuntimeError(f"tick {tick.number} failed on purpose")
    finally:
        probe.busy = False
        probe.ended.append(trio.current_time())
        probe.changed()


@zl.packet_handler(Start)
async def start(self: Any, msg: Start) -> None:
    self.context.timers.start("beat", INTERVAL, options_of(msg))


@zl.request_handler(Hold)
async def hold(self: Any, msg: Hold) -> Answer:
    probe = probe_of(self)
    if probe.busy:
        probe.overlaps.append(0)
    probe.busy = True
    try:
        await trio.sleep(msg.seconds)  # an ordinary await keeps the gate (SPOT-68)
    finally:
        probe.busy = False
    return Answer("held")


@zl.request_handler(HoldOn)
async def hold_on(self: Any, msg: HoldOn) -> Answer:
    probe = probe_of(self)
    probe.holding.set()
    await probe.release.wait()  # holds the gate until the test lets go
    return Answer("held")


@zl.request_handler(Try)
async def attempt(self: Any, msg: Try) -> Answer:
    timers = self.context.timers
    calls = {
        "unknown": lambda: timers.start("nope", INTERVAL),
        "zero": lambda: timers.start("beat", 0),
        "negative": lambda: timers.start("beat", -1.0),
        "nan": lambda: timers.start("beat", math.nan),
        "inf": lambda: timers.start("beat", math.inf),
        "text": lambda: timers.start("beat", "1"),
        "start": lambda: timers.start("beat", INTERVAL),
        "stop": lambda: timers.stop("beat"),
        "stop-unknown": lambda: timers.stop("nope"),
    }
    try:
        calls[msg.how]()
    except zl.ZLinkError as error:
        return Answer(error.kind.name)
    except (TypeError, ValueError) as error:
        return Answer(type(error).__name__)
    return Answer("ok")


async def on_initialize(self: Any) -> None:
    probe = probe_of(self)
    if probe.start_in_init:
        self.context.timers.start("beat", INTERVAL)
        # Ticks fall due while on_initialize still runs; none may run before it returns.
        await trio.sleep(3 * INTERVAL)
    probe.initialized = True


async def on_closing(self: Any, closing: zl.SpotClosingContext) -> None:
    probe = probe_of(self)
    probe.closing = True
    try:
        self.context.timers.start("beat", INTERVAL)
    except zl.ZLinkError as error:
        probe.start_while_closing = error.kind.name
    probe.closed.set()


@zl.packet_handler(Quit)
async def quit_(self: Any, msg: Quit) -> None:
    await self.context.close()


@app.instance_spot("timers.Clock")
class Clock(zl.InstanceSpot):
    beat = beat
    start = start
    hold = hold
    attempt = attempt
    on_initialize = on_initialize
    on_closing = on_closing
    quit_ = quit_


@app.user_spot("timers.Room")
class Room(NoMembers):
    beat = beat
    start = start
    hold = hold
    hold_on = hold_on
    on_initialize = on_initialize
    on_closing = on_closing


@app.user_spot("timers.Lanes", mode=zl.SpotFactoryMode.PER_ACTOR)
class Lanes(NoMembers):
    beat = beat
    start = start
    on_initialize = on_initialize
    on_closing = on_closing


def config(store_dsn: str) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)


def new_probe(**values: bool) -> tuple[str, Probe]:
    spot_id = f"clock-{uuid.uuid4().hex[:8]}"
    probes[spot_id] = Probe(**values)
    return spot_id, probes[spot_id]


async def start_clock(host: zl.Host, spot_id: str, msg: Start | None = None) -> None:
    await host.route.send_to_spot(spot_id, msg or Start()).instance_spot("timers.Clock").submit()


async def ask(host: zl.Host, spot_id: str, how: str) -> str:
    with trio.fail_after(10):
        call = host.route.request_to_spot(spot_id, Try(how), reply_type=Answer)
        return (await call.instance_spot("timers.Clock").submit()).text


@pytest.mark.spec("TIMER-11", "TIMER-5", "SPOT-62")
async def test_a_tick_reaches_its_timer_handler_with_name_number_due_time_and_skipped(
    store_dsn: str,
) -> None:
    """Each tick carries the timer name, its nominal number, its due time and the dropped
    count that explains any gap in the numbers."""
    spot_id, probe = new_probe()
    async with zl.open_host(app, config(store_dsn)) as host:
        await start_clock(host, spot_id)
        await probe.wait_ticks(3)
    ticks = probe.ticks
    assert all(tick.name == "beat" for tick in ticks)
    assert ticks[0].number >= 1
    assert ticks[0].skipped == ticks[0].number - 1
    for before, after in itertools.pairwise(ticks):
        assert after.number > before.number
        assert after.skipped == after.number - before.number - 1
    for tick, started in zip(ticks, probe.started, strict=False):
        assert tick.scheduled_at <= started


@pytest.mark.spec("TIMER-9", "TIMER-10")
@pytest.mark.parametrize("kind", ["instance", "user"])
async def test_ticks_never_overlap_each_other_or_a_handler_turn(store_dsn: str, kind: str) -> None:
    """Ticks of a SPOT_WIDE User Spot or an Instance Spot hold the gate: slow ticks and a slow
    handler never run at the same time."""
    spot_id, probe = new_probe()
    probe.slow = {0: 3 * INTERVAL, 2: 3 * INTERVAL}
    async with zl.open_host(app, config(store_dsn)) as host:
        if kind == "user":
            result = await host.spots.get_or_create(spot_id, "timers.Room").submit()
            assert zl.SpotCreateStatus.CREATED == result.status
            await host.route.send_to_spot(spot_id, Start()).submit()
        else:
            await start_clock(host, spot_id)
        await probe.wait_ticks(1)
        with trio.fail_after(10):
            await host.route.request_to_spot(
                spot_id, Hold(3 * INTERVAL), reply_type=Answer
            ).submit()
        await probe.wait_ticks(5)
    assert [] == probe.overlaps
    for ended, started in zip(probe.ended, probe.started[1:], strict=False):
        assert started >= ended


@pytest.mark.spec("TIMER-10")
async def test_ticks_of_one_timer_never_overlap_on_their_own_lane(store_dsn: str) -> None:
    """In a PER_ACTOR Spot no Spot gate orders a timer's ticks; slow ticks of one timer still
    run one after another."""
    spot_id, probe = new_probe()
    probe.slow = {0: 3 * INTERVAL, 1: 3 * INTERVAL, 2: 3 * INTERVAL}
    async with zl.open_host(app, config(store_dsn)) as host:
        await host.spots.get_or_create(spot_id, "timers.Lanes").submit()
        await host.route.send_to_spot(spot_id, Start("catch_up", 3)).submit()
        await probe.wait_ticks(4)
    assert [] == probe.overlaps
    for ended, started in zip(probe.ended, probe.started[1:], strict=False):
        assert started >= ended


@pytest.mark.spec("TIMER-14")
async def test_a_tick_waiting_for_the_gate_when_closing_begins_does_not_run(
    store_dsn: str,
) -> None:
    """A tick that fell due while a turn held the gate waits for it; if the Spot's close begins
    meanwhile, that tick does not run once the gate is free."""
    spot_id, probe = new_probe()
    async with zl.open_host(app, config(store_dsn)) as host:
        created = await host.spots.get_or_create(spot_id, "timers.Room").submit()
        await host.route.send_to_spot(spot_id, Start()).submit()
        await probe.wait_ticks(1)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: host.route.request_to_spot(spot_id, HoldOn(), reply_type=Answer).submit()
            )
            with trio.fail_after(10):
                await probe.holding.wait()
            # A tick falls due while the turn holds the gate; once every task is blocked, the
            # timer's task can only be waiting for the gate.
            await trio.sleep_until(trio.current_time() + 2 * INTERVAL)
            await trio.testing.wait_all_tasks_blocked()
            closing_at = trio.current_time()
            nursery.start_soon(host.spots.close, created.spot_ref)
            await trio.testing.wait_all_tasks_blocked()
            probe.release.set()
        with trio.fail_after(10):
            await probe.closed.wait()
    assert [] == [started for started in probe.started if started >= closing_at]


@pytest.mark.spec("TIMER-13")
async def test_a_raising_tick_is_logged_and_the_timer_keeps_running(
    store_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A tick handler that raises is logged on zlink_trio.timers and later ticks still come."""
    spot_id, probe = new_probe()
    probe.fail_on = {0}
    with caplog.at_level(logging.ERROR, logger="zlink_trio.timers"):
        async with zl.open_host(app, config(store_dsn)) as host:
            await start_clock(host, spot_id)
            await probe.wait_ticks(3)
    assert any(
        record.name == "zlink_trio.timers" and record.exc_info is not None
        for record in caplog.records
    )


@pytest.mark.spec("TIMER-12")
async def test_an_undeclared_timer_or_a_bad_interval_is_refused(store_dsn: str) -> None:
    """Starting a timer without a @timer_handler is NOT_CONFIGURED; a zero, negative, NaN or
    infinite interval is a ValueError and a non-number a TypeError; stop() checks the name too."""
    spot_id, _probe = new_probe()
    async with zl.open_host(app, config(store_dsn)) as host:
        answers = {
            how: await ask(host, spot_id, how)
            for how in ["unknown", "zero", "negative", "nan", "inf", "text", "stop-unknown"]
        }
    assert {
        "unknown": "NOT_CONFIGURED",
        "zero": "ValueError",
        "negative": "ValueError",
        "nan": "ValueError",
        "inf": "ValueError",
        "text": "TypeError",
        "stop-unknown": "NOT_CONFIGURED",
    } == answers


@pytest.mark.spec("TIMER-31", "TIMER-32")
async def test_a_running_timer_cannot_be_started_again_until_it_is_stopped(
    store_dsn: str,
) -> None:
    """start() of a running timer is INVALID_OPERATION; stop() ends its ticks, a second stop()
    does nothing, and the timer can then be started again."""
    spot_id, probe = new_probe()
    async with zl.open_host(app, config(store_dsn)) as host:
        assert "ok" == await ask(host, spot_id, "start")
        assert "INVALID_OPERATION" == await ask(host, spot_id, "start")
        await probe.wait_ticks(1)
        assert "ok" == await ask(host, spot_id, "stop")
        stopped_at = len(probe.ticks)
        # Absence of ticks needs time to pass: several intervals would each have brought one.
        await trio.sleep(4 * INTERVAL)
        assert stopped_at == len(probe.ticks)
        assert "ok" == await ask(host, spot_id, "stop")
        assert "ok" == await ask(host, spot_id, "start")
        await probe.wait_ticks(stopped_at + 2)
    restarted = probe.ticks[stopped_at]
    assert 1 == restarted.number - restarted.skipped  # a new schedule counts from 1 again


@pytest.mark.spec("SPOT-43", "TIMER-14")
async def test_no_tick_runs_before_on_initialize_returns_or_after_closing_starts(
    store_dsn: str,
) -> None:
    """A timer started in on_initialize ticks only after it returns, and no tick starts once
    context.close() has begun closing the Spot."""
    spot_id, probe = new_probe(start_in_init=True)
    async with zl.open_host(app, config(store_dsn)) as host:
        await host.route.send_to_spot(spot_id, Quit()).instance_spot("timers.Clock").submit()
        with trio.fail_after(10):
            await probe.closed.wait()
        # Ticks fell due during on_initialize; none of them may have run then.
        closed_at = len(probe.ticks)
        await trio.sleep(4 * INTERVAL)  # time for ticks that must not come
        assert closed_at == len(probe.ticks)
    assert [] == probe.out_of_life


@pytest.mark.spec("TIMER-14", "TIMER-31", "SHUT-4.4", "SHUT-7.4")
async def test_host_shutdown_stops_timers_and_no_tick_starts_after_the_final_result(
    store_dsn: str,
) -> None:
    """Host shutdown stops a running timer: no tick starts after on_closing has started or after
    open_host has exited, and on_closing cannot start one again."""
    spot_id, probe = new_probe()
    async with zl.open_host(app, config(store_dsn)) as host:
        await start_clock(host, spot_id)
        await probe.wait_ticks(2)
        assert runtime_tasks()  # the host's tasks are seen while it runs (the check can fail)
    finished = len(probe.ticks)
    assert "INVALID_OPERATION" == probe.start_while_closing
    # No sleep and hope: once open_host has exited, not one task of the host is left anywhere in
    # this Trio run, so nothing can start a tick any more; and none did until all were blocked.
    assert [] == runtime_tasks()
    await trio.testing.wait_all_tasks_blocked()
    assert finished == len(probe.ticks)
    assert [] == probe.out_of_life


def runtime_tasks() -> list[str]:
    """Every task of this Trio run that runs zlink_trio's own code now, by name."""
    found: list[str] = []
    pending = [trio.lowlevel.current_root_task()]
    while pending:
        task = pending.pop()
        code = getattr(task.coro, "cr_code", None)
        if code is not None and "zlink_trio" in code.co_filename:
            found.append(task.name)
        pending.extend(child for nursery in task.child_nurseries for child in nursery.child_tasks)
    return found


@pytest.mark.spec("TIMER-6", "TIMER-5", "TIMER-11")
async def test_a_late_timer_without_options_runs_only_the_latest_due_tick(store_dsn: str) -> None:
    """With no options (SKIP_LATE_TICKS), after a slow tick only the latest due tick runs and it
    counts the dropped ones."""
    spot_id, probe = new_probe()
    probe.slow = {0: 4.5 * INTERVAL}
    async with zl.open_host(app, config(store_dsn)) as host:
        await start_clock(host, spot_id)
        await probe.wait_ticks(2)
    first, second = probe.ticks[:2]
    assert second.number >= first.number + 4
    assert second.skipped == second.number - first.number - 1


@pytest.mark.spec("TIMER-7")
async def test_a_late_catch_up_timer_runs_at_most_the_bounded_backlog(store_dsn: str) -> None:
    """Under CATCH_UP_BOUNDED with max_catch_up_ticks=2 a slow tick is followed by the two most
    recent due ticks, in order, and older ones are dropped."""
    spot_id, probe = new_probe()
    probe.slow = {0: 4.5 * INTERVAL}
    async with zl.open_host(app, config(store_dsn)) as host:
        await start_clock(host, spot_id, Start("catch_up", 2))
        await probe.wait_ticks(3)
    first, second, third = probe.ticks[:3]
    assert second.skipped >= 2
    assert second.skipped == second.number - first.number - 1
    assert (third.number, third.skipped) == (second.number + 1, 0)


@pytest.mark.spec("TIMER-8")
async def test_a_delay_next_tick_timer_waits_one_interval_after_each_handler(
    store_dsn: str,
) -> None:
    """Under DELAY_NEXT_TICK each tick is due one interval after the previous handler returned,
    and numbers go up by one with nothing skipped."""
    spot_id, probe = new_probe()
    probe.slow = {0: 2.5 * INTERVAL, 1: 2.5 * INTERVAL}
    async with zl.open_host(app, config(store_dsn)) as host:
        await start_clock(host, spot_id, Start("delay"))
        await probe.wait_ticks(3)
    ticks = probe.ticks[:3]
    assert [(1, 0), (2, 0), (3, 0)] == [(tick.number, tick.skipped) for tick in ticks]
    for ended, tick in zip(probe.ended, ticks[1:], strict=False):
        assert tick.scheduled_at >= ended + INTERVAL
