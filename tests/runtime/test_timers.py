"""The logical timer engine under a virtual clock (specs/timers.md, TIMER-20..30).

Every async test runs on ``autojump_clock`` (pytest-trio takes the clock from the test's
arguments): the Trio clock starts at 0.0 and jumps to the next
deadline whenever all tasks are blocked, so due times and handler overruns are exact numbers.
A handler "overruns" by sleeping on that virtual clock for a known time.
"""

from __future__ import annotations

import logging
import math

import attrs
import pytest
import trio
from trio.testing import MockClock

from zlink_trio._runtime.engines.timers import LogicalTimer, TickDeferred, TimerState, TimerTick
from zlink_trio.options import TimerOptions, TimerOverrunPolicy

SKIP = TimerOptions(overrun_policy=TimerOverrunPolicy.SKIP_LATE_TICKS)
DELAY = TimerOptions(overrun_policy=TimerOverrunPolicy.DELAY_NEXT_TICK)


def catch_up(ticks: int) -> TimerOptions:
    return TimerOptions(
        overrun_policy=TimerOverrunPolicy.CATCH_UP_BOUNDED, max_catch_up_ticks=ticks
    )


Seen = tuple[int, float, int, float]
"""(sequence, scheduled_at, skipped, started_at) of one delivered tick."""


@attrs.define
class Recorder:
    """A tick handler that records each tick, runs for a set time and stops the timer after N."""

    timer: LogicalTimer
    stop_after: int
    durations: dict[int, float] = attrs.field(factory=dict)
    fail_on: frozenset[int] = frozenset()
    seen: list[Seen] = attrs.field(factory=list)
    ended_at: list[float] = attrs.field(factory=list)
    active: int = 0
    most_active: int = 0
    reached: dict[int, trio.Event] = attrs.field(factory=dict)

    async def __call__(self, tick: TimerTick) -> None:
        self.active += 1
        self.most_active = max(self.most_active, self.active)
        try:
            started = trio.current_time()
            self.seen.append((tick.number, tick.scheduled_at, tick.skipped, started))
            self.reached.setdefault(len(self.seen), trio.Event()).set()
            if len(self.seen) >= self.stop_after:
                self.timer.cancel()
            await trio.sleep(self.durations.get(tick.number, 0))
            if tick.number in self.fail_on:
                raise RuntimeError(f"tick {tick.number} failed")
        finally:
            self.active -= 1
            self.ended_at.append(trio.current_time())

    async def wait_for(self, deliveries: int) -> None:
        await self.reached.setdefault(deliveries, trio.Event()).wait()


async def run_ticks(
    options: TimerOptions | None,
    stop_after: int,
    durations: dict[int, float] | None = None,
    interval: float = 10.0,
) -> Recorder:
    """Run a timer started at 0.0 until it delivered ``stop_after`` ticks; return the record."""
    assert 0.0 == trio.current_time()
    timer = LogicalTimer("flush", interval, options)
    recorder = Recorder(timer, stop_after, durations or {})
    with trio.fail_after(10_000):
        await timer.run(recorder)
    assert 1 == recorder.most_active
    return recorder


@pytest.mark.spec("TIMER-20")
@pytest.mark.parametrize("options", [SKIP, catch_up(3)], ids=["skip", "catch-up"])
async def test_fixed_rate_ticks_fall_due_at_start_plus_k_intervals_without_drift(
    options: TimerOptions,
    autojump_clock: MockClock,
) -> None:
    """Handlers shorter than the interval never shift the fixed-rate schedule: tick k is at k*i."""
    recorder = await run_ticks(options, 4, durations={1: 3.0, 2: 9.5, 3: 7.25})
    expected = [(1, 10.0, 0, 10.0), (2, 20.0, 0, 20.0), (3, 30.0, 0, 30.0), (4, 40.0, 0, 40.0)]
    assert expected == recorder.seen


@pytest.mark.spec("TIMER-21")
async def test_skip_late_ticks_runs_only_the_latest_due_tick_and_counts_the_dropped(
    autojump_clock: MockClock,
) -> None:
    """After an overrun, SKIP_LATE_TICKS runs the latest due tick at once; the rest are dropped."""
    # Tick 1 runs 10->35 (ticks 2, 3 fell due); tick 4 runs 40->71 (ticks 5, 6, 7 fell due).
    recorder = await run_ticks(SKIP, 5, durations={1: 25.0, 4: 31.0})
    expected = [
        (1, 10.0, 0, 10.0),
        (3, 30.0, 1, 35.0),
        (4, 40.0, 0, 40.0),
        (7, 70.0, 2, 71.0),
        (8, 80.0, 0, 80.0),
    ]
    assert expected == recorder.seen


@pytest.mark.spec("TIMER-21")
async def test_skip_late_ticks_counts_a_tick_ending_exactly_at_a_due_time_as_late(
    autojump_clock: MockClock,
) -> None:
    """A handler ending exactly when tick 3 falls due finds tick 3 due: it runs at once."""
    recorder = await run_ticks(SKIP, 3, durations={1: 20.0})
    assert [(1, 10.0, 0, 10.0), (3, 30.0, 1, 30.0), (4, 40.0, 0, 40.0)] == recorder.seen


@pytest.mark.spec("TIMER-22")
async def test_catch_up_bounded_runs_the_newest_late_ticks_in_order_and_drops_older(
    autojump_clock: MockClock,
) -> None:
    """With max 2, a 45 s overrun (ticks 2-5 due) runs ticks 4 and 5 back to back, then tick 6."""
    recorder = await run_ticks(catch_up(2), 4, durations={1: 45.0})
    expected = [(1, 10.0, 0, 10.0), (4, 40.0, 2, 55.0), (5, 50.0, 0, 55.0), (6, 60.0, 0, 60.0)]
    assert expected == recorder.seen


@pytest.mark.spec("TIMER-22")
async def test_catch_up_bounded_works_the_window_out_again_after_every_tick(
    autojump_clock: MockClock,
) -> None:
    """A late tick that overruns again moves the window: no tick runs more than max behind."""
    # Tick 1 runs 10->35: ticks 2, 3 due, both within 3 -> tick 2 runs 35->60. Ticks 3..6 are
    # due then; only the newest 3 (4, 5, 6) are kept, so tick 3 is dropped.
    recorder = await run_ticks(catch_up(3), 5, durations={1: 25.0, 2: 25.0})
    expected = [
        (1, 10.0, 0, 10.0),
        (2, 20.0, 0, 35.0),
        (4, 40.0, 1, 60.0),
        (5, 50.0, 0, 60.0),
        (6, 60.0, 0, 60.0),
    ]
    assert expected == recorder.seen


@pytest.mark.spec("TIMER-23")
async def test_delay_next_tick_is_due_one_interval_after_the_previous_tick_ended(
    autojump_clock: MockClock,
) -> None:
    """DELAY_NEXT_TICK measures from each handler's end: no catch-up, no skipped ticks."""
    recorder = await run_ticks(DELAY, 4, durations={1: 25.0, 3: 2.5})
    expected = [(1, 10.0, 0, 10.0), (2, 45.0, 0, 45.0), (3, 55.0, 0, 55.0), (4, 67.5, 0, 67.5)]
    assert expected == recorder.seen


@pytest.mark.spec("TIMER-24")
@pytest.mark.parametrize("options", [SKIP, catch_up(5), DELAY], ids=["skip", "catch-up", "delay"])
async def test_ticks_of_one_timer_never_overlap_even_when_every_handler_overruns(
    options: TimerOptions,
    autojump_clock: MockClock,
) -> None:
    """Each tick starts only after the previous handler returned, under every policy."""
    recorder = await run_ticks(options, 8, durations=dict.fromkeys(range(1, 20), 25.0))
    starts = [started for (_, _, _, started) in recorder.seen]
    assert all(start >= end for start, end in zip(starts[1:], recorder.ended_at, strict=False))
    assert 1 == recorder.most_active


@pytest.mark.spec("TIMER-25")
async def test_tick_carries_name_sequence_due_time_and_skipped_count(
    autojump_clock: MockClock,
) -> None:
    """A delivered TimerTick names its timer, nominal sequence, due time and dropped ticks."""
    ticks: list[TimerTick] = []
    timer = LogicalTimer("flush", 10.0)

    async def on_tick(tick: TimerTick) -> None:
        ticks.append(tick)
        if tick.number == 1:
            await trio.sleep(25.0)
        else:
            timer.cancel()

    await timer.run(on_tick)
    assert [TimerTick("flush", 1, 10.0, 0), TimerTick("flush", 3, 30.0, 1)] == ticks
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        ticks[0].number = 2  # type: ignore[misc]  # proving the value is frozen


@pytest.mark.spec("TIMER-25")
@pytest.mark.parametrize(
    ("fields", "error"),
    [
        (("", 1, 0.0, 0), ValueError),
        (("t", 0, 0.0, 0), ValueError),
        (("t", 1, 0.0, -1), ValueError),
        (("t", 3, 0.0, 3), ValueError),
        (("t", 1, math.nan, 0), ValueError),
        (("t", True, 0.0, 0), TypeError),
        (("t", 1, "0", 0), TypeError),
    ],
)
def test_tick_values_are_validated_when_made(fields: tuple[object, ...], error: type) -> None:
    """A TimerTick with an empty name, a sequence below 1 or impossible skips is refused."""
    with pytest.raises(error):
        TimerTick(*fields)  # type: ignore[arg-type]  # bad values on purpose


@pytest.mark.spec("TIMER-26")
async def test_a_raising_tick_handler_is_logged_and_the_timer_keeps_its_schedule(
    caplog: pytest.LogCaptureFixture,
    autojump_clock: MockClock,
) -> None:
    """Tick 2 raises: the error is logged with its traceback and ticks 3 and 4 come on time."""
    timer = LogicalTimer("flush", 10.0)
    recorder = Recorder(timer, 4, fail_on=frozenset({2}))
    with caplog.at_level(logging.ERROR, logger="zlink_trio.timers"):
        await timer.run(recorder)
    expected = [(1, 10.0, 0, 10.0), (2, 20.0, 0, 20.0), (3, 30.0, 0, 30.0), (4, 40.0, 0, 40.0)]
    assert expected == recorder.seen
    [record] = [r for r in caplog.records if r.name == "zlink_trio.timers"]
    assert record.exc_info is not None
    assert RuntimeError is record.exc_info[0]
    assert "'flush'" in record.getMessage()


@pytest.mark.spec("TIMER-23", "TIMER-26")
async def test_delay_next_tick_measures_from_the_end_of_a_tick_that_raised(
    autojump_clock: MockClock,
) -> None:
    """Under DELAY_NEXT_TICK, a tick that raised after 5 s still sets the next due time."""
    timer = LogicalTimer("flush", 10.0, DELAY)
    recorder = Recorder(timer, 2, durations={1: 5.0}, fail_on=frozenset({1}))
    await timer.run(recorder)
    assert [(1, 10.0, 0, 10.0), (2, 25.0, 0, 25.0)] == recorder.seen


@pytest.mark.spec("TIMER-27")
async def test_cancel_from_the_handler_lets_the_tick_finish_and_starts_no_other(
    autojump_clock: MockClock,
) -> None:
    """cancel() during tick 2 lets tick 2 end normally, then run() returns with no tick 3."""
    timer = LogicalTimer("flush", 10.0)
    recorder = Recorder(timer, 2, durations={2: 4.0})
    await timer.run(recorder)
    assert [1, 2] == [sequence for (sequence, _, _, _) in recorder.seen]
    assert [10.0, 24.0] == recorder.ended_at
    assert 24.0 == trio.current_time()
    assert 2 == timer.last_sequence


@pytest.mark.spec("TIMER-27")
async def test_cancel_from_another_task_wakes_a_sleeping_timer_at_once(
    autojump_clock: MockClock,
) -> None:
    """cancel() while the timer waits for tick 3 ends run() now, not at tick 3's due time."""
    timer = LogicalTimer("flush", 10.0)
    recorder = Recorder(timer, stop_after=1_000)
    async with trio.open_nursery() as nursery:
        await nursery.start(timer.run, recorder)
        await recorder.wait_for(2)
        timer.cancel()
    assert 20.0 == trio.current_time()
    await trio.sleep(100.0)
    assert [1, 2] == [sequence for (sequence, _, _, _) in recorder.seen]


@pytest.mark.spec("TIMER-27")
@pytest.mark.parametrize(
    ("stop_at", "durations", "ended"),
    [(25.0, {}, [10.0, 20.0]), (22.0, {2: 5.0}, [10.0, 22.0])],
    ids=["while-sleeping", "mid-tick"],
)
async def test_cancelling_the_run_scope_stops_the_timer_with_no_further_tick(
    stop_at: float, durations: dict[int, float], ended: list[float], autojump_clock: MockClock
) -> None:
    """Cancelling the scope around run() stops it at once, while sleeping or mid-tick."""
    timer = LogicalTimer("flush", 10.0)
    recorder = Recorder(timer, stop_after=1_000, durations=durations)
    with trio.move_on_at(stop_at):
        await timer.run(recorder)
    await trio.sleep(100.0)
    assert [1, 2] == [sequence for (sequence, _, _, _) in recorder.seen]
    assert ended == recorder.ended_at


@pytest.mark.spec("TIMER-27")
async def test_a_timer_runs_once(autojump_clock: MockClock) -> None:
    """A second run() of the same timer raises RuntimeError instead of restarting it."""
    timer = LogicalTimer("flush", 10.0)
    timer.cancel()
    await timer.run(Recorder(timer, 1))
    with pytest.raises(RuntimeError):
        await timer.run(Recorder(timer, 1))


async def stopped_after_first_tick(options: TimerOptions) -> LogicalTimer:
    timer = LogicalTimer("flush", 10.0, options)
    await timer.run(Recorder(timer, 1))
    assert 10.0 == trio.current_time()
    return timer


@pytest.mark.spec("TIMER-28")
@pytest.mark.parametrize(
    ("options", "pending", "next_sequence", "next_due"),
    [
        (SKIP, [TimerTick("flush", 5, 50.0, 3)], 6, 60.0),
        (catch_up(2), [TimerTick("flush", 4, 40.0, 2), TimerTick("flush", 5, 50.0, 0)], 6, 60.0),
        (DELAY, [TimerTick("flush", 2, 20.0, 0)], 3, 30.0),
    ],
    ids=["skip", "catch-up", "delay"],
)
async def test_state_captures_last_tick_next_due_and_the_pending_ticks_the_policy_chose(
    options: TimerOptions,
    pending: list[TimerTick],
    next_sequence: int,
    next_due: float,
    autojump_clock: MockClock,
) -> None:
    """At 55 s, after tick 1 ended at 10 s, the state holds what each policy would run next."""
    timer = await stopped_after_first_tick(options)
    await trio.sleep(45.0)
    expected = TimerState(
        name="flush",
        interval=10.0,
        options=options,
        last_sequence=1,
        next_sequence=next_sequence,
        next_due=next_due,
        pending=pending,
        captured_at=55.0,
    )
    assert expected == timer.state()
    assert expected == timer.state()  # capturing changes nothing


@pytest.mark.spec("TIMER-28")
@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (SKIP, [(3, 30.0, 1, 35.0), (4, 40.0, 0, 40.0)]),
        (catch_up(2), [(2, 20.0, 0, 35.0), (3, 30.0, 0, 35.0), (4, 40.0, 0, 40.0)]),
        (DELAY, [(2, 20.0, 0, 35.0), (3, 45.0, 0, 45.0)]),
    ],
    ids=["skip", "catch-up", "delay"],
)
async def test_a_timer_restored_from_state_runs_the_pending_ticks_then_the_same_schedule(
    options: TimerOptions, expected: list[Seen], autojump_clock: MockClock
) -> None:
    """from_state() continues where the captured timer stopped: pending ticks first, in order."""
    source = await stopped_after_first_tick(options)
    await trio.sleep(25.0)
    state = source.state()
    target = LogicalTimer.from_state(state)
    recorder = Recorder(target, len(expected))
    await target.run(recorder)
    assert expected == recorder.seen
    assert expected[-1][0] == target.last_sequence


@pytest.mark.spec("TIMER-28")
async def test_pending_ticks_run_first_even_when_more_ticks_fell_due_since_the_capture(
    autojump_clock: MockClock,
) -> None:
    """Pending ticks were chosen already; newer due ticks go through the policy after them."""
    source = await stopped_after_first_tick(SKIP)
    await trio.sleep(25.0)
    target = LogicalTimer.from_state(source.state())  # pending: tick 3, captured at 35 s
    await trio.sleep(30.0)  # 65 s: ticks 4, 5, 6 are due as well
    recorder = Recorder(target, 3)
    await target.run(recorder)
    assert [(3, 30.0, 1, 65.0), (6, 60.0, 2, 65.0), (7, 70.0, 0, 70.0)] == recorder.seen


@pytest.mark.spec("TIMER-28")
async def test_state_rebased_onto_another_clock_moves_every_time_by_the_same_shift(
    autojump_clock: MockClock,
) -> None:
    """rebased(now) keeps sequences and shifts due, pending and capture times to the new clock."""
    source = await stopped_after_first_tick(SKIP)
    await trio.sleep(25.0)
    state = source.state()
    moved = state.rebased(1_035.0)
    assert 1_035.0 == moved.captured_at
    assert 1_040.0 == moved.next_due
    assert (TimerTick("flush", 3, 1_030.0, 1),) == moved.pending
    assert (state.last_sequence, state.next_sequence) == (moved.last_sequence, moved.next_sequence)


@pytest.mark.spec("TIMER-28")
async def test_state_cannot_be_captured_while_a_tick_runs(autojump_clock: MockClock) -> None:
    """Capturing mid-tick raises RuntimeError: the tick's end decides what comes next."""
    timer = LogicalTimer("flush", 10.0)
    failures: list[RuntimeError] = []

    async def on_tick(tick: TimerTick) -> None:
        timer.cancel()
        with pytest.raises(RuntimeError) as raised:
            timer.state()
        failures.append(raised.value)

    await timer.run(on_tick)
    assert 1 == len(failures)


@pytest.mark.spec("TIMER-35")
@pytest.mark.parametrize("options", [SKIP, catch_up(3), DELAY], ids=["skip", "catch-up", "delay"])
async def test_a_deferred_tick_stays_pending_and_runs_first_where_the_state_goes(
    options: TimerOptions, autojump_clock: MockClock
) -> None:
    """on_tick raising TickDeferred ends the run with that tick pending: the state carries it,
    and a timer made from the state runs it first, with its own number, due time and count."""
    timer = LogicalTimer("flush", 10.0, options)
    offered: list[TimerTick] = []

    async def refuse_the_second(tick: TimerTick) -> None:
        offered.append(tick)
        if len(offered) == 2:
            raise TickDeferred

    with trio.fail_after(1_000):
        await timer.run(refuse_the_second)  # returns at the deferral, without a cancel()
    assert 20.0 == trio.current_time()
    deferred = offered[1]
    assert (2, 20.0, 0) == (deferred.number, deferred.scheduled_at, deferred.skipped)
    assert 1 == timer.last_sequence  # the deferred tick did not complete
    state = timer.state()
    assert (deferred,) == state.pending
    assert 3 == state.next_sequence
    target = LogicalTimer.from_state(state)
    recorder = Recorder(target, 2)
    await target.run(recorder)
    assert [2, 3] == [seen[0] for seen in recorder.seen]
    assert (20.0, 0, 20.0) == recorder.seen[0][1:]


@pytest.mark.spec("TIMER-28")
@pytest.mark.parametrize(
    "changes",
    [
        {"pending": (TimerTick("flush", 1, 10.0, 0),)},  # not after last_sequence
        {"pending": (TimerTick("other", 3, 30.0, 1),)},  # another timer's tick
        {"next_sequence": 3},  # not after the pending tick 3
        {"next_due": math.inf},
    ],
)
def test_timer_state_refuses_inconsistent_values(changes: dict[str, object]) -> None:
    """A TimerState whose ticks and cursor contradict each other cannot be made."""
    valid = TimerState(
        name="flush",
        interval=10.0,
        options=SKIP,
        last_sequence=1,
        next_sequence=4,
        next_due=40.0,
        pending=(TimerTick("flush", 3, 30.0, 1),),
        captured_at=35.0,
    )
    with pytest.raises(ValueError):
        attrs.evolve(valid, **changes)  # type: ignore[arg-type]  # values of mixed types on purpose


@pytest.mark.spec("TIMER-29")
async def test_a_timer_without_options_uses_the_default_options(autojump_clock: MockClock) -> None:
    """No options means TimerOptions(): SKIP_LATE_TICKS, as the same overrun shows."""
    timer = LogicalTimer("flush", 10.0)
    assert TimerOptions() == timer.options
    recorder = await run_ticks(None, 3, durations={1: 25.0})
    assert [(1, 10.0, 0, 10.0), (3, 30.0, 1, 35.0), (4, 40.0, 0, 40.0)] == recorder.seen


@pytest.mark.spec("TIMER-30")
@pytest.mark.parametrize(
    ("name", "interval", "error"),
    [
        ("flush", 0.0, ValueError),
        ("flush", -1.0, ValueError),
        ("flush", math.inf, ValueError),
        ("flush", math.nan, ValueError),
        ("flush", True, TypeError),
        ("flush", "10", TypeError),
        ("", 10.0, ValueError),
        (7, 10.0, TypeError),
    ],
)
async def test_a_timer_needs_a_name_and_a_finite_interval_above_zero(
    name: object, interval: object, error: type, autojump_clock: MockClock
) -> None:
    """An empty name, or an interval that is not a finite number of seconds above 0, is refused."""
    with pytest.raises(error):
        LogicalTimer(name, interval)  # type: ignore[arg-type]  # bad values on purpose
