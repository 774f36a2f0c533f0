"""The application clock: the time Spot timers and the deadlines of calls follow (specs/testing.md
VCLK-1, VCLK-2).

A host keeps two times. Trio's clock runs its infrastructure: the store, the transport, the
node lease and the fence, store and release timeouts. The application clock runs what the
application sees as time passing: timers, request timeouts and the deadline a handler sees,
closing deadlines, idle eviction (the list is VCLK-2). A host owns one application clock
(``LocalNode.clock``). In production it is Trio's clock itself, :data:`TRIO_CLOCK`, so the two
are one time and this module only names the call sites that use application time; a test opens
a host on a clock it moves itself (``zlink_trio.testing.VirtualClock``), and then only the
application's time stands still while the host keeps serving in real time.

Rule 1: a deadline on the application clock is a cancel scope that clock cancels. ``now()``
reads the clock, ``scope_until(t)`` is a scope cancelled once the clock reaches ``t``,
``set_deadline(scope, t)`` does the same for a scope that exists already, and
``sleep_until(t)`` waits for ``t``. A Trio deadline (``trio.move_on_at``, ``scope.deadline``)
is never given a time of the application clock, and the other way round.
Rule 2: Trio's clock costs nothing. :class:`TrioClock` hands out Trio's own functions and cancel
scopes with a Trio deadline, exactly what the call sites did before; it has no state and one
instance, so the hot path makes no object for it.
"""

from __future__ import annotations

import abc
import math
from typing import ClassVar, Final

import trio

__all__ = ["TRIO_CLOCK", "Clock", "TrioClock", "check_seconds"]


def check_seconds(what: str, value: object) -> float:
    """``value`` as a float of seconds: ``TypeError`` for a non-number (``bool`` included: True
    seconds is a typo, not a time), ``ValueError`` for NaN or an infinity."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{what} takes a number of seconds, not {type(value).__name__}")
    if not math.isfinite(value):
        raise ValueError(f"{what} must be finite, got {value}")
    return float(value)


class Clock(abc.ABC):
    """Application time for one host (Rule 1): read it, wait for it, bound work by it."""

    __slots__ = ()

    trio_time: ClassVar[bool] = False
    """Whether this clock is Trio's own: then a deadline on it is also one for Trio's cancel
    scopes and for the transport's own request timeouts."""

    @abc.abstractmethod
    def now(self) -> float:
        """The current application time, in seconds."""

    @abc.abstractmethod
    def set_deadline(self, scope: trio.CancelScope, deadline: float) -> None:
        """Cancel ``scope`` once this clock reaches ``deadline`` (at once when it has already);
        a later call for the same scope replaces the deadline, ``math.inf`` removes it."""

    def scope_until(self, deadline: float) -> trio.CancelScope:
        """A new cancel scope that this clock cancels at ``deadline`` (``trio.move_on_at``)."""
        scope = trio.CancelScope()
        self.set_deadline(scope, deadline)
        return scope

    async def sleep_until(self, deadline: float) -> None:
        """Wait until this clock reaches ``deadline``; a checkpoint even when it has."""
        with self.scope_until(deadline):
            await trio.sleep_forever()


class TrioClock(Clock):
    """Trio's own clock as the application clock: production (Rule 2)."""

    __slots__ = ()

    trio_time: ClassVar[bool] = True
    now = staticmethod(trio.current_time)
    sleep_until = staticmethod(trio.sleep_until)

    def scope_until(self, deadline: float) -> trio.CancelScope:
        return trio.CancelScope(deadline=deadline)

    def set_deadline(self, scope: trio.CancelScope, deadline: float) -> None:
        scope.deadline = deadline


TRIO_CLOCK: Final = TrioClock()
"""The application clock of every host opened with ``open_host``."""
