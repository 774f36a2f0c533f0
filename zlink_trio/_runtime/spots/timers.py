"""The timers of one Spot activation: ``self.context.timers`` (specs/timers.md TIMER-5, TIMER-9,
TIMER-10, TIMER-12, TIMER-14, TIMER-31, TIMER-32; specs/spots.md SPOT-43).

Theory of operation.

Rule 1: the activation owns its timers. Each started timer is one ``LogicalTimer``
(engines/timers.py) run by a task in the activation's turns nursery, so a timer never outlives
its activation; a timer started before serving begins (in the constructor or ``on_initialize``)
waits and is launched when serving begins, so no tick runs before ``on_initialize`` has returned
(SPOT-43).
Rule 2: a tick is a turn. The engine's ``on_tick`` is the activation's ``run_tick`` (handed in
when the activation makes its timers, so this module never names the activation), which takes
the Spot gate like a message turn (activation.py), so a tick never runs beside a handler
(TIMER-9) and the engine's serial ticks stay serial (TIMER-10).
Rule 4: timers follow the host's application clock (engines/clock.py, VCLK-2), handed in with
``run_tick``: Trio's clock in production, a test's own clock under ``zlink_trio.testing``.
Rule 3: closing stops every timer first. ``stop_all`` runs when closing begins, before the gate is
given to ``on_closing``: no new tick starts, a tick already waiting for the gate finds the Spot
closing and returns without running, and a running tick ends normally or at the closing deadline
(TIMER-14).
Rule 5: a seal pauses, it does not stop. ``pause`` (a relocation seal, spots/sealing.py) starts
no tick from then on but keeps every registration: a running tick ends, a tick waiting for the
gate is deferred back into its timer's pending ticks (engines/timers.py Rule 6), and once
``wait_paused`` returns no runner is left, so ``states`` can capture every timer between ticks
(TIMER-15). ``resume`` (the seal is aborted) re-arms each timer from its state now, with its
schedule and overrun policy, ticks that fell due meanwhile chosen by that policy; ``restore``
arms a fresh activation's timers from carried states, launched only when serving begins, so no
restored tick runs before the activation is Ready (TIMER-16, TIMER-17).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

import trio

from zlink_trio._runtime.declarations.registry import SpotType
from zlink_trio._runtime.engines.clock import Clock
from zlink_trio._runtime.engines.timers import LogicalTimer, TimerState, TimerTick
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import SpotId
from zlink_trio.options import TimerOptions

__all__ = ["SpotTimers"]


class Spawner(Protocol):
    """Where timer tasks run: the activation's own tasks (spots/activation.py Rule 10)."""

    def start_soon(self, function: Callable[..., Awaitable[None]], *args: Any) -> object: ...


class SpotTimers:
    """The logical timers of this Spot activation: ``start(name, interval, options=None)`` and
    ``stop(name)``; ticks go to the method declared with ``@zl.timer_handler(name)``."""

    def __init__(
        self,
        spot_type: SpotType,
        spot_id: SpotId,
        run_tick: Callable[[str, TimerTick], Awaitable[None]],
        clock: Clock,
    ) -> None:
        self._spot_type = spot_type
        self._clock = clock
        self._spot_id = spot_id
        self._run_tick = run_tick
        self._running: dict[str, LogicalTimer] = {}
        self._waiting: list[LogicalTimer] = []
        self._nursery: Spawner | None = None
        self._stopped = False
        self._paused = False
        self._runners = 0
        self._no_runner = trio.Event()

    def _method(self, name: object) -> str:
        if not isinstance(name, str):
            raise TypeError(f"a timer name is a str, not {type(name).__name__}")
        method = self._spot_type.timers.get(name)
        if method is None:
            raise ZLinkError(
                ErrorKind.NOT_CONFIGURED,
                f"{self._spot_type.name} has no @timer_handler({name!r})",
            )
        return method

    def start(self, name: str, interval: float, options: TimerOptions | None = None) -> None:
        """Start the timer ``name``: its first tick is due ``interval`` seconds from now.

        ``ZLinkError(NOT_CONFIGURED)`` when no ``@zl.timer_handler(name)`` is declared,
        ``ValueError``/``TypeError`` for an interval that is not a finite number of seconds above
        zero, ``ZLinkError(INVALID_OPERATION)`` when the timer is already running (stop it
        first) or the Spot is closing.
        """
        self._method(name)
        timer = LogicalTimer(name, interval, options, clock=self._clock)
        if self._stopped:
            raise ZLinkError(ErrorKind.INVALID_OPERATION, f"{self._spot_id} is closing")
        if name in self._running:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"timer {name!r} is already running; stop it before starting it again",
            )
        self._arm(timer)

    def _arm(self, timer: LogicalTimer) -> None:
        self._running[timer.name] = timer
        if self._paused:
            return  # registered only: resume() re-arms it (Rule 5)
        if self._nursery is None:
            self._waiting.append(timer)
        else:
            self._nursery.start_soon(self._run, timer, self._method(timer.name))

    def stop(self, name: str) -> None:
        """Stop the timer ``name``: no further tick starts; a running tick ends normally.
        Stopping a timer that is not running does nothing."""
        self._method(name)
        timer = self._running.pop(name, None)
        if timer is not None:
            timer.cancel()

    def attach(self, nursery: Spawner) -> None:
        """Serving has begun: run the waiting timers, and later ones, in ``nursery`` (Rule 1)."""
        self._nursery = nursery
        waiting, self._waiting = self._waiting, []
        for timer in waiting:
            if not timer.cancelled:
                nursery.start_soon(self._run, timer, self._method(timer.name))

    def stop_all(self) -> None:
        """Closing has begun: no tick starts from now on (Rule 3)."""
        self._stopped = True
        for timer in self._running.values():
            timer.cancel()
        self._running.clear()
        self._waiting.clear()

    def pause(self) -> None:
        """A seal began: no tick starts from now on; every registration stays (Rule 5)."""
        self._paused = True
        for timer in self._running.values():
            timer.cancel()

    async def wait_paused(self) -> None:
        """Return once no timer runner is left: a running tick has ended, a waiting one has been
        deferred (Rule 5)."""
        while self._runners:
            await self._no_runner.wait()

    def states(self, now: float) -> tuple[TimerState, ...]:
        """Every paused timer's state as of ``now``, in the order they were started (Rule 5)."""
        return tuple(timer.state(now) for timer in self._running.values())

    def resume(self) -> None:
        """The seal was aborted: each timer goes on from its state now (Rule 5)."""
        states = self.states(self._clock.now())
        self._paused = False
        self._running.clear()
        for state in states:
            self._arm(LogicalTimer.from_state(state, clock=self._clock))

    def restore(self, states: tuple[TimerState, ...]) -> None:
        """Arm carried timer states in a fresh activation, rebased onto this host's clock so
        the time the move took shifts the schedule; they tick once serving begins (Rule 5)."""
        now = self._clock.now()
        for state in states:
            self._method(state.name)
            self._arm(LogicalTimer.from_state(state.rebased(now), clock=self._clock))

    async def _run(self, timer: LogicalTimer, method: str) -> None:
        if not self._runners:
            self._no_runner = trio.Event()
        self._runners += 1
        try:
            await timer.run(functools.partial(self._run_tick, method))
        finally:
            self._runners -= 1
            if not self._runners:
                self._no_runner.set()
            if not self._paused and self._running.get(timer.name) is timer:
                del self._running[timer.name]
