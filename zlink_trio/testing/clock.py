"""Virtual application time for tests (specs/testing.md VCLK-1, VCLK-2).

A host opened on a :class:`VirtualClock` runs its store, transport, lease and fence on Trio's
clock as always, so it starts and serves in real time; only application time (Spot timers, the
deadlines of calls, closing deadlines, idle eviction: VCLK-2) stands still until the test moves
it with :meth:`VirtualClock.advance` or :meth:`VirtualClock.advance_to`.

Theory of operation.

Rule 1: a deadline is a cancel scope the clock holds. Every wait on application time is a Trio
cancel scope registered here with its due time (``set_deadline``); the clock keeps them in a
heap and cancels each when time reaches it. The clock holds scopes weakly: a scope nobody holds
any more is dropped unseen, and a scope given a new deadline keeps only the last one.
Rule 2: advancing visits each due point in order. ``advance_to(t)`` takes the earliest due time
not after ``t``, sets the clock to it, cancels every scope due there, and lets the host settle
(``settle``, by default until every task is blocked) before it looks for the next one, so a
deadline registered while settling (a timer's next tick) is visited too when it falls before
``t``. Timer ticks and deadlines therefore interleave as they would in real time. Only then does
the clock read ``t``.
Rule 3: a clock serves one Trio run. Its scopes belong to the run that registered them, so the
first run that uses it owns it, and any other raises ``RuntimeError``.
"""

from __future__ import annotations

import heapq
import itertools
import math
import weakref
from collections.abc import Awaitable, Callable

import trio
import trio.testing

from zlink_trio._runtime.engines.clock import Clock, check_seconds

__all__ = ["VirtualClock"]


class VirtualClock(Clock):
    """Application time that moves only when the test moves it.

    Give it to a test host (``zlink_trio.testing``); its timers, request timeouts, the
    ``deadline`` handlers see, closing deadlines and idle eviction then follow this clock, while
    the store, the transport and the lease keep real time (VCLK-1, VCLK-2). Time starts at
    ``start`` (0.0 by default) and never goes back. One clock serves one Trio run.
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = check_seconds("start", start)
        self._due: list[tuple[float, int, weakref.ref[trio.CancelScope]]] = []
        self._deadlines: weakref.WeakKeyDictionary[trio.CancelScope, float] = (
            weakref.WeakKeyDictionary()
        )
        self._order = itertools.count()
        self._run: trio.lowlevel.TrioToken | None = None
        self._advancing = False
        self.settle: Callable[[], Awaitable[None]] | None = None
        """What ``advance`` awaits after each due point so the host can act on it before time
        moves on; ``None`` (the default) waits until every task of the run is blocked
        (``trio.testing.wait_all_tasks_blocked``)."""

    def now(self) -> float:
        """The current virtual time, in seconds."""
        return self._now

    @property
    def next_deadline(self) -> float:
        """The earliest time at which something waits to be woken; ``math.inf`` when nothing
        does."""
        self._drop_stale()
        return self._due[0][0] if self._due else math.inf

    def set_deadline(self, scope: trio.CancelScope, deadline: float) -> None:
        """Cancel ``scope`` once this clock reaches ``deadline`` (at once if it has); a later
        call for the same scope replaces its deadline, ``math.inf`` removes it."""
        self._check_run()
        if math.isnan(deadline):
            raise ValueError("a deadline must not be NaN")
        if deadline == math.inf:
            self._deadlines.pop(scope, None)
            return
        self._deadlines[scope] = deadline
        if deadline <= self._now:
            scope.cancel()
            return
        heapq.heappush(self._due, (deadline, next(self._order), weakref.ref(scope)))

    async def advance(self, seconds: float) -> None:
        """Move time forward by ``seconds`` (not negative), visiting every due point on the way
        (Rule 2); ``ValueError`` for a negative or non-finite amount."""
        step = check_seconds("advance", seconds)
        if step < 0:
            raise ValueError(f"virtual time cannot go back: advance({seconds})")
        await self.advance_to(self._now + step)

    async def advance_to(self, when: float) -> None:
        """Move time forward to ``when`` (not before ``now()``), visiting every due point on the
        way in order and letting the host settle after each (Rule 2), then once at ``when``."""
        target = check_seconds("advance_to", when)
        self._check_run()
        if target < self._now:
            raise ValueError(f"virtual time cannot go back from {self._now} to {target}")
        if self._advancing:
            raise RuntimeError("the VirtualClock is already advancing in another task")
        self._advancing = True
        try:
            while (due := self.next_deadline) <= target:
                self._now = due
                self._fire(due)
                await self._settle()
            self._now = target
            await self._settle()
        finally:
            self._advancing = False

    def _fire(self, now: float) -> None:
        """Cancel every scope due at ``now`` (Rule 1)."""
        due = self._due
        while due and due[0][0] <= now:
            deadline, _, ref = heapq.heappop(due)
            scope = ref()
            if scope is not None and self._deadlines.get(scope) == deadline:
                del self._deadlines[scope]
                scope.cancel()

    def _drop_stale(self) -> None:
        """Pop heap entries whose scope is gone or was given another deadline (Rule 1)."""
        due = self._due
        while due:
            deadline, _, ref = due[0]
            scope = ref()
            if scope is not None and self._deadlines.get(scope) == deadline:
                return
            heapq.heappop(due)

    async def _settle(self) -> None:
        settle = self.settle
        if settle is None:
            await trio.testing.wait_all_tasks_blocked()
        else:
            await settle()

    def _check_run(self) -> None:
        """Rule 3: the first Trio run that uses the clock owns it."""
        token = trio.lowlevel.current_trio_token()
        if self._run is None:
            self._run = token
        elif self._run is not token:
            raise RuntimeError(
                "this VirtualClock belongs to another Trio run; make a new one for each run"
            )

    def __repr__(self) -> str:
        return f"VirtualClock(now={self._now})"
