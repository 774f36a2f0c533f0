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
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable

import trio

from zlink_trio._runtime.declarations.registry import SpotType
from zlink_trio._runtime.engines.clock import Clock
from zlink_trio._runtime.engines.timers import LogicalTimer, TimerTick
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import SpotId
from zlink_trio.options import TimerOptions

__all__ = ["SpotTimers"]


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
        self._nursery: trio.Nursery | None = None
        self._stopped = False

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
        method = self._method(name)
        timer = LogicalTimer(name, interval, options, clock=self._clock)
        if self._stopped:
            raise ZLinkError(ErrorKind.INVALID_OPERATION, f"{self._spot_id} is closing")
        if name in self._running:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"timer {name!r} is already running; stop it before starting it again",
            )
        self._running[name] = timer
        if self._nursery is None:
            self._waiting.append(timer)
        else:
            self._nursery.start_soon(self._run, timer, method)

    def stop(self, name: str) -> None:
        """Stop the timer ``name``: no further tick starts; a running tick ends normally.
        Stopping a timer that is not running does nothing."""
        self._method(name)
        timer = self._running.pop(name, None)
        if timer is not None:
            timer.cancel()

    def attach(self, nursery: trio.Nursery) -> None:
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

    async def _run(self, timer: LogicalTimer, method: str) -> None:
        try:
            await timer.run(functools.partial(self._run_tick, method))
        finally:
            if self._running.get(timer.name) is timer:
                del self._running[timer.name]
