"""Logical timer engine: when, and which, ticks of one timer run (specs/timers.md, TIMER-20..30).

Owns the schedule of one logical timer: its nominal due times, the three overrun policies
(SKIP_LATE_TICKS, CATCH_UP_BOUNDED, DELAY_NEXT_TICK), serial ticks, and the plain value a
relocation would carry (:class:`TimerState`). It does not decide how a tick becomes a turn: the
runner awaits ``on_tick(tick)`` and the Spot's gate or lane behind that callable runs the turn
(TIMER-9 is wired there). Pure Trio, no I/O.
"""

from __future__ import annotations

import collections
import logging
import math
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

import attrs
import trio

from zlink_trio._runtime.engines.clock import TRIO_CLOCK, Clock, check_seconds
from zlink_trio.options import TimerOptions, TimerOverrunPolicy

__all__ = ["LogicalTimer", "TickDeferred", "TimerState", "TimerTick"]

logger = logging.getLogger("zlink_trio.timers")

# Theory of operation
# -------------------
# Rule 1 (TIMER-20): under the fixed-rate policies (SKIP_LATE_TICKS, CATCH_UP_BOUNDED) nominal
#   tick k (k = 1, 2, ...) is due at origin + k * interval. A due time is always computed from k,
#   never by adding an interval to the previous one, so no drift builds up and a late tick never
#   moves the ticks after it. Under DELAY_NEXT_TICK tick k + 1 is due one interval after tick k
#   ended (TIMER-23); tick 1 is due one interval after the start.
# Rule 2: one cursor, ``_next_sequence``, names the oldest nominal tick that has neither run, nor
#   been chosen to run (pending), nor been dropped. Every tick below it is in exactly one of those
#   three states, so no tick is ever delivered twice.
# Rule 3 (TIMER-24): the engine decides only between ticks. After ``on_tick`` returned or raised
#   it reads the clock once and applies the policy to the ticks due at that instant (the
#   backlog); it never calls ``on_tick`` while an earlier call is still running.
# Rule 4: a chosen tick's ``skipped`` is ``chosen.number - cursor``: the cursor moves past
#   dropped ticks only when the tick after them is chosen, so that difference is exactly the
#   nominal ticks dropped since the previously delivered (or pending) one.
# Rule 5 (TIMER-28): pending ticks were chosen before (by a snapshot on the source); they run
#   first, in order, and only then does the policy look at the clock again.
# Rule 6 (TIMER-35): ``on_tick`` may refuse a tick before it starts by raising
#   :class:`TickDeferred` (its Spot is sealed for a relocation): the tick goes back to the front
#   of the pending ticks and the run ends, so :meth:`LogicalTimer.state` carries it and a timer
#   made from that state runs it first. A deferred tick is neither run nor dropped.


class TickDeferred(Exception):
    """Raised by ``on_tick`` when it did not start the tick it was given (Rule 6)."""


def _check_name(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str):
        raise TypeError(f"a timer name is a str, not {type(value).__name__}")
    if not value:
        raise ValueError("a timer name must not be empty")


def _check_interval(_instance: object, _attribute: object, value: Any) -> None:
    if check_seconds("interval", value) <= 0:
        raise ValueError(f"interval must be above zero seconds, got {value}")


def _check_time(_instance: object, attribute: attrs.Attribute[float], value: Any) -> None:
    check_seconds(attribute.name, value)


def _check_count(minimum: int) -> Callable[[object, attrs.Attribute[int], Any], None]:
    def check(_instance: object, attribute: attrs.Attribute[int], value: Any) -> None:
        if type(value) is not int:
            raise TypeError(f"{attribute.name} takes an int, not {type(value).__name__}")
        if value < minimum:
            raise ValueError(f"{attribute.name} must be at least {minimum}, got {value}")

    return check


def _check_options(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, TimerOptions):
        raise TypeError(f"options takes a TimerOptions, not {type(value).__name__}")


def _ticks(value: Iterable[TimerTick]) -> tuple[TimerTick, ...]:
    return tuple(value)


@attrs.frozen
class TimerTick:
    """One delivered tick of a logical timer: which nominal tick it is and how late it may be."""

    name: str = attrs.field(validator=_check_name)
    """The timer's name, as it was started."""
    # Named ``number``, not ``sequence``: public values carry no field named like a queue
    # sequence (ID-7.2), and this is the timer's own tick count, not a transport sequence.
    number: int = attrs.field(validator=_check_count(1))
    """The nominal tick this delivery stands for: 1 for the first due time, then 2, 3, ..."""
    scheduled_at: float = attrs.field(validator=_check_time)
    """When that nominal tick fell due, on the host's application clock (engines/clock.py;
    Trio's clock, ``trio.current_time()``, unless the host runs on a test's clock)."""
    skipped: int = attrs.field(validator=_check_count(0))
    """How many nominal ticks were dropped between the previously delivered tick and this one."""

    def __attrs_post_init__(self) -> None:
        if self.skipped >= self.number:
            # Only ticks 1..number-1 precede this one, so at most number-1 can be dropped.
            raise ValueError(f"tick {self.number} cannot follow {self.skipped} skipped ticks")


@attrs.frozen
class TimerState:
    """What a logical timer needs to go on elsewhere, captured between two ticks (TIMER-28).

    Times are on the application clock of the host that captured the state; :meth:`rebased` moves
    them onto another clock. ``pending`` are ticks already chosen to run but not yet started;
    ``next_sequence`` is the first nominal tick after them that is neither run nor dropped, due at
    ``next_due`` (under DELAY_NEXT_TICK with pending ticks, the earliest it can be: the real due
    time is set when the last pending tick ends).
    """

    name: str = attrs.field(validator=_check_name)
    interval: float = attrs.field(validator=_check_interval)
    options: TimerOptions = attrs.field(validator=_check_options)
    last_sequence: int = attrs.field(validator=_check_count(0))
    """The nominal sequence of the last tick whose handler ended; 0 before the first."""
    next_sequence: int = attrs.field(validator=_check_count(1))
    next_due: float = attrs.field(validator=_check_time)
    pending: tuple[TimerTick, ...] = attrs.field(converter=_ticks)
    captured_at: float = attrs.field(validator=_check_time)
    """The application clock's time at which the state was captured."""

    def __attrs_post_init__(self) -> None:
        floor = self.last_sequence
        for tick in self.pending:
            if not isinstance(tick, TimerTick) or tick.name != self.name:
                raise ValueError(f"pending holds {tick!r}, not a tick of timer {self.name!r}")
            if tick.number <= floor:
                raise ValueError("pending ticks must come after last_sequence, in rising order")
            floor = tick.number
        if self.next_sequence <= floor:
            raise ValueError("next_sequence must come after last_sequence and every pending tick")

    def rebased(self, now: float) -> TimerState:
        """The same state on a clock that reads ``now`` at the moment this one was captured."""
        shift = check_seconds("now", now) - self.captured_at
        return attrs.evolve(
            self,
            next_due=self.next_due + shift,
            pending=tuple(
                attrs.evolve(tick, scheduled_at=tick.scheduled_at + shift) for tick in self.pending
            ),
            captured_at=now,
        )


class LogicalTimer:
    """The schedule of one logical timer and the runner that delivers its ticks.

    Make it inside a Trio run (the schedule starts at ``origin``, by default the current time of
    ``clock``, the host's application clock, Trio's own by default), then run it once with
    :meth:`run`. :meth:`cancel` stops it gracefully; cancelling the
    scope around :meth:`run` stops it at once.
    """

    def __init__(
        self,
        name: str,
        interval: float,
        options: TimerOptions | None = None,
        *,
        origin: float | None = None,
        clock: Clock = TRIO_CLOCK,
    ) -> None:
        _check_name(self, None, name)
        _check_interval(self, None, interval)
        # A timer without options behaves exactly as with TimerOptions() (TIMER-29).
        options = TimerOptions() if options is None else options
        _check_options(self, None, options)
        self._name = name
        self._interval = float(interval)
        self._options = options
        self._clock = clock
        self._origin = clock.now() if origin is None else check_seconds("origin", origin)
        self._last_sequence = 0
        self._next_sequence = 1
        # Used only by DELAY_NEXT_TICK; the fixed-rate policies derive due times (Rule 1).
        self._delay_due = self._origin + self._interval
        self._pending: collections.deque[TimerTick] = collections.deque()
        self._running: TimerTick | None = None
        self._started = False
        self._cancelled = False
        self._sleep_scope: trio.CancelScope | None = None

    @classmethod
    def from_state(cls, state: TimerState, *, clock: Clock = TRIO_CLOCK) -> LogicalTimer:
        """A timer that continues ``state``: its pending ticks first, then the same schedule."""
        timer = cls(
            state.name,
            state.interval,
            state.options,
            # Recovers the fixed-rate origin; due times stay computed from k (Rule 1), so a
            # rounding difference here can shift them by an ulp but never makes one come twice.
            origin=state.next_due - state.next_sequence * state.interval,
            clock=clock,
        )
        timer._last_sequence = state.last_sequence
        timer._next_sequence = state.next_sequence
        timer._delay_due = state.next_due
        timer._pending.extend(state.pending)
        return timer

    @property
    def name(self) -> str:
        return self._name

    @property
    def interval(self) -> float:
        return self._interval

    @property
    def options(self) -> TimerOptions:
        return self._options

    @property
    def last_sequence(self) -> int:
        """The nominal sequence of the last tick whose handler ended (returned or raised)."""
        return self._last_sequence

    @property
    def cancelled(self) -> bool:
        return self._cancelled

    def cancel(self) -> None:
        """Start no further tick; a tick already running ends normally, then :meth:`run` returns.

        Safe to call from the tick handler itself, from another task, before or after the run.
        """
        self._cancelled = True
        if self._sleep_scope is not None:
            self._sleep_scope.cancel()

    def state(self, now: float | None = None) -> TimerState:
        """Capture the timer between ticks, as of ``now`` (default: the clock's current time).

        The ticks the policy would run for the backlog at ``now`` become ``pending``; the engine
        itself is not changed. Raises ``RuntimeError`` while a tick is running: its end decides
        what comes next (a relocation seal waits for the running turn first, TIMER-17). A tick
        cut short by cancelling the run's scope counts as delivered but not completed: it is
        neither ``last_sequence`` nor pending.
        """
        if self._running is not None:
            raise RuntimeError(f"timer {self._name!r} is running tick {self._running.number}")
        now = self._clock.now() if now is None else check_seconds("now", now)
        pending = list(self._pending)
        next_sequence = self._next_sequence
        window = self._window(now) if not pending else None
        if window is not None:
            first, last = window
            pending.append(self._tick(first, skipped=first - next_sequence))
            pending.extend(self._tick(k, skipped=0) for k in range(first + 1, last + 1))
            next_sequence = last + 1
        if self._options.overrun_policy is not TimerOverrunPolicy.DELAY_NEXT_TICK:
            next_due = self._due(next_sequence)
        elif pending:
            next_due = pending[-1].scheduled_at + self._interval
        else:
            next_due = self._delay_due
        return TimerState(
            name=self._name,
            interval=self._interval,
            options=self._options,
            last_sequence=self._last_sequence,
            next_sequence=next_sequence,
            next_due=next_due,
            pending=tuple(pending),
            captured_at=now,
        )

    async def run(
        self,
        on_tick: Callable[[TimerTick], Awaitable[None]],
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """Deliver ticks to ``on_tick``, one at a time, until :meth:`cancel` or cancellation.

        ``on_tick`` is how the caller turns a tick into a turn. An exception it raises is logged
        and the schedule goes on (TIMER-26); ``trio.Cancelled`` and other ``BaseException`` end
        the run; :class:`TickDeferred` ends it with the tick pending again (Rule 6). A timer runs
        once: a second call raises ``RuntimeError``.
        """
        if self._started:
            raise RuntimeError(f"timer {self._name!r} has already run")
        self._started = True
        task_status.started()
        while not self._cancelled:
            tick = self._pending.popleft() if self._pending else self._choose(self._clock.now())
            if tick is None:
                await self._sleep_until_due()
                continue
            self._running = tick
            try:
                await on_tick(tick)
            except TickDeferred:
                self._pending.appendleft(tick)  # not started: it runs first wherever state goes
                return
            except Exception:
                logger.exception(
                    "timer %r: tick %d raised; the timer keeps running", self._name, tick.number
                )
            finally:
                self._running = None
            self._last_sequence = tick.number
            if self._options.overrun_policy is TimerOverrunPolicy.DELAY_NEXT_TICK:
                # Fixed delay: measured from the end of this tick, not from its due time.
                self._delay_due = self._clock.now() + self._interval

    async def _sleep_until_due(self) -> None:
        # Only this wait is cancelled by cancel(): a running handler is never interrupted by it.
        with trio.CancelScope() as scope:
            self._sleep_scope = scope
            try:
                await self._clock.sleep_until(self._next_due())
            finally:
                self._sleep_scope = None

    def _next_due(self) -> float:
        if self._options.overrun_policy is TimerOverrunPolicy.DELAY_NEXT_TICK:
            return self._delay_due
        return self._due(self._next_sequence)

    def _due(self, sequence: int) -> float:
        return self._origin + sequence * self._interval

    def _tick(self, sequence: int, *, skipped: int) -> TimerTick:
        if self._options.overrun_policy is TimerOverrunPolicy.DELAY_NEXT_TICK:
            scheduled_at = self._delay_due
        else:
            scheduled_at = self._due(sequence)
        return TimerTick(self._name, sequence, scheduled_at, skipped)

    def _window(self, now: float) -> tuple[int, int] | None:
        """The nominal ticks the policy runs for the backlog at ``now``: ``first..last``."""
        policy = self._options.overrun_policy
        cursor = self._next_sequence
        if policy is TimerOverrunPolicy.DELAY_NEXT_TICK:
            # No catch-up: there is never more than the one next tick (TIMER-23).
            return (cursor, cursor) if self._delay_due <= now else None
        latest = self._latest_due(now)
        if latest < cursor:
            return None
        if policy is TimerOverrunPolicy.SKIP_LATE_TICKS:
            return latest, latest  # TIMER-21: only the latest due tick runs.
        # TIMER-22: the newest max_catch_up_ticks of the backlog, oldest of them first.
        return max(cursor, latest - self._options.max_catch_up_ticks + 1), latest

    def _choose(self, now: float) -> TimerTick | None:
        """Choose the next tick to run and move the cursor past it and the ticks it drops."""
        window = self._window(now)
        if window is None:
            return None
        first, _last = window
        # Only the first tick of the window is taken: the window is worked out again after it
        # ends, so a slow catch-up never runs a tick more than max_catch_up_ticks behind.
        tick = self._tick(first, skipped=first - self._next_sequence)
        self._next_sequence = first + 1
        return tick

    def _latest_due(self, now: float) -> int:
        """The largest nominal sequence due at ``now`` (below the cursor when none is due)."""
        latest = math.floor((now - self._origin) / self._interval)
        # The division can land one off an exact multiple; settle it with the same formula that
        # makes the due times, so a tick is due exactly when _due() says it is.
        while self._due(latest + 1) <= now:
            latest += 1
        while latest >= self._next_sequence and self._due(latest) > now:
            latest -= 1
        return latest
