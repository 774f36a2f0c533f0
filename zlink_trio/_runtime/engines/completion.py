"""The in-flight call table and the completion dispatcher (specs/completion.md CMP-10.1,
CMP-10.2, CMP-10.7, CMP-10.8, CMP-11.1..CMP-11.5, CMP-11.8, CMP-11.9, CMP-17.14, CMP-17.15).

Theory of operation.

Rule 1: an entry is registered before its request is submitted; only ``pop()`` completes it.
``register()`` runs before the message is admitted anywhere, so even a reply produced in the same
process cannot arrive before its entry (CMP-10.8) and no holding map for early replies exists.
Rule 2: one atomic pop decides. Reply, timeout, cancellation and shutdown all call ``pop(route)``;
the path that gets the entry back owns the right to complete it, every other path gets ``None``
and does nothing (CMP-10.1, CMP-10.2). ``pop`` has no checkpoint, so on Trio's single thread it
is atomic and the "settlement lock" is held for no longer than the dict operation: no
application code runs under it (CMP-11.1).
Rule 3: completions run in a fresh turn. The winner hands the outcome to ``deliver()``, which
returns at once. A completion that runs code (a callback entry, Rule 5) goes on one unbounded
memory channel, and the dispatcher task runs it later, never on the settling path's stack
(CMP-11.2, CMP-11.3). A completion that only wakes a parked caller reschedules that task at once:
it resumes in a later turn of its own, after the settling path has returned, as a remote reply
does (CMP-11.2); a hop through the lane would only add a task switch. Enqueueing never fails for
lack of room (CMP-11.4), and since only a popped entry can be delivered, the lane never holds
more completions than there were calls (CMP-11.5).
Rule 4: one failure never stops the lane. An exception raised by one completion is logged and
the next one runs (CMP-11.9); ``close()`` lets the lane run everything already accepted before
its task ends (CMP-11.8).
Rule 5: an entry may complete into a callback instead of a waiting task. ``register(callback)``
gives an entry that has no waiter: delivering it runs ``callback(outcome)`` on the lane, like any
completion, so the same pop decides and the callback runs in a fresh turn. Work received from a
peer uses it to answer on the wire with no task of its own per request (routing/inbound.py
Rule 2).
Rule 6: the first settled result is the result, also against a later cancellation. The winner's
outcome is on the entry (``settled``) the moment it pops the slot. A waiter cancelled before the
lane has run that completion asks ``claim()`` whether its cancellation can still take the slot;
when another path took it first, the wait ends with that outcome instead of ``trio.Cancelled``,
and the caller's next checkpoint raises the cancellation (CMP-9.1, CMP-17.7).
Rule 7: a test may watch the completions: with ``trace`` set (``LocalNode.set_trace``) each
delivered outcome is reported as one line; unset, delivering reads one attribute more.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import attrs
import trio

from zlink_trio._wire.ids import U64_MAX, ReplyRouteId
from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["CompletionDispatcher", "Outcome", "PendingCall", "describe"]

_log = logging.getLogger("zlink_trio.runtime.completion")

LANE_BATCH = 32
"""Completions the lane runs per checkpoint at most, when that many are already queued."""


@attrs.frozen
class Outcome:
    """How a call ended: a reply value, or the error to raise."""

    value: object = None
    error: ZLinkError | None = None

    def unwrap(self) -> object:
        """The reply value, or raise the error."""
        if self.error is not None:
            raise self.error
        return self.value


class PendingCall:
    """The waiting side of one request: the one completion slot of its call (CMP-10.1)."""

    __slots__ = ("_outcome", "_waiter", "route", "settled")

    def __init__(self, route: ReplyRouteId) -> None:
        self.route = route
        self._outcome: Outcome | None = None
        self._waiter: trio.lowlevel.Task | None = None
        self.settled: Outcome | None = None
        """The outcome of the path that won the slot, from the moment it won (Rule 6)."""

    def complete(self, outcome: Outcome) -> None:
        """Record the outcome and wake the waiter; run by the dispatcher lane only."""
        self._outcome = outcome
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter)

    async def wait(self, claim: Callable[[], bool] | None = None) -> Outcome:
        """Wait until the dispatcher has delivered this call's outcome (Rule 6).

        When the wait is cancelled, ``claim()`` (popping the slot for the cancellation) decides:
        ``True``, the cancellation won and ``trio.Cancelled`` is raised; ``False``, another path
        had won already and its outcome is returned at once (the caller's next checkpoint raises
        ``trio.Cancelled``). Without ``claim`` a cancellation always ends the wait.
        """
        if self._outcome is None:
            task = trio.lowlevel.current_task()
            self._waiter = task

            def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
                won = self.settled
                if claim is None or claim() or won is None:
                    self._waiter = None
                    return trio.lowlevel.Abort.SUCCEEDED
                # Another path settled the slot first: its outcome is the result (CMP-9.1).
                self._waiter = None
                self._outcome = won
                trio.lowlevel.reschedule(task)
                return trio.lowlevel.Abort.FAILED

            await trio.lowlevel.wait_task_rescheduled(abort)
        else:
            await trio.lowlevel.cancel_shielded_checkpoint()
        assert self._outcome is not None  # set before the waiter is woken
        return self._outcome


class _CallbackCall(PendingCall):
    """An entry with no waiter: its completion runs ``on_complete(outcome)`` (Rule 5)."""

    __slots__ = ("_on_complete",)

    def __init__(self, route: ReplyRouteId, on_complete: Callable[[Outcome], object]) -> None:
        self.route = route
        self._on_complete = on_complete

    def complete(self, outcome: Outcome) -> None:
        """Run the callback with the outcome; run by the dispatcher lane only."""
        self._on_complete(outcome)

    async def wait(self, claim: Callable[[], bool] | None = None) -> Outcome:
        raise TypeError("an entry registered with a callback has no waiter")


class CompletionDispatcher:
    """One host's in-flight call table and its single completion lane."""

    def __init__(self) -> None:
        self._pending: dict[ReplyRouteId, PendingCall] = {}
        self._last_route = 0
        self._send, self._receive = trio.open_memory_channel[Callable[[], object]](math.inf)
        self._drained = trio.Event()
        self.trace: Callable[[str], None] | None = None
        """Told of each delivered outcome when set (Rule 7)."""

    @property
    def queued(self) -> int:
        """How many completions wait on the lane to be delivered (for tests and diagnostics)."""
        return self._receive.statistics().current_buffer_used

    @property
    def in_flight(self) -> int:
        """How many calls wait for their outcome (for tests and diagnostics)."""
        return len(self._pending)

    def register(self, on_complete: Callable[[Outcome], object] | None = None) -> PendingCall:
        """A new entry under a fresh ReplyRouteId, registered now, before any submission.

        With ``on_complete`` the entry has no waiter: its completion calls
        ``on_complete(outcome)`` on the lane instead (Rule 5).
        """
        # Routes count up within one node run; a run would need 2**64 calls to wrap (CMP-10.7).
        self._last_route = self._last_route % U64_MAX + 1
        route = ReplyRouteId(self._last_route)
        entry = PendingCall(route) if on_complete is None else _CallbackCall(route, on_complete)
        self._pending[route] = entry
        return entry

    def pop(self, route: ReplyRouteId) -> PendingCall | None:
        """Take the entry out of the table: the caller wins the right to complete it, or gets
        ``None`` because another path already did (Rule 2)."""
        return self._pending.pop(route, None)

    def deliver(self, entry: PendingCall, outcome: Outcome) -> None:
        """Queue the completion of a popped entry on the lane; never blocks, never fails. The
        entry knows its outcome at once (``settled``, Rule 6)."""
        entry.settled = outcome
        if type(entry) is PendingCall:
            # A parked caller only: rescheduled now, it resumes in a later turn of its own task
            # with nothing of this stack under it, which a lane hop would only delay (Rule 3).
            entry.complete(outcome)
        else:
            self.enqueue(lambda: entry.complete(outcome))
        if self.trace is not None:
            self.trace(f"call {entry.route.value} completed: {describe(outcome)}")

    def enqueue(self, callback: Callable[[], object]) -> None:
        """Run ``callback`` later, in a fresh turn of the lane (CMP-11.2)."""
        try:
            self._send.send_nowait(callback)
        except trio.ClosedResourceError:
            # Only reachable after the final drain; by then every entry has been settled, so
            # nothing that reaches here has a waiter (SHUT-4.4).
            _log.debug("completion after the dispatcher closed was dropped")

    def settle_all(self, error: ZLinkError) -> int:
        """Pop every entry still in flight and deliver ``error`` to each; returns how many."""
        settled = 0
        for route in list(self._pending):
            entry = self.pop(route)
            if entry is not None:
                self.deliver(entry, Outcome(error=error))
                settled += 1
        return settled

    def close(self) -> None:
        """Accept no more completions; the lane runs what it holds, then its task ends."""
        self._send.close()

    async def wait_drained(self) -> None:
        """Wait until the lane has run every completion it accepted and has ended."""
        await self._drained.wait()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """The lane: run completions one by one until ``close()`` and the queue is empty."""
        task_status.started()
        receive_nowait = self._receive.receive_nowait
        try:
            async with self._receive:
                # Every receive is a checkpoint, even when a completion is already queued, so a
                # long queue cannot starve the loop without a checkpoint of the lane's own; what
                # is already queued then runs in the same turn, up to LANE_BATCH completions.
                async for callback in self._receive:
                    left = LANE_BATCH
                    while True:
                        try:
                            callback()
                        except Exception:
                            _log.exception("a completion callback raised; the lane goes on")
                        left -= 1
                        if not left:
                            break
                        try:
                            callback = receive_nowait()
                        except (trio.WouldBlock, trio.EndOfChannel):
                            break
        finally:
            self._drained.set()


def describe(outcome: Outcome) -> str:
    """An outcome in a few words, for a trace (Rule 7): its error kind or its value's class."""
    if outcome.error is not None:
        return f"error {outcome.error.kind.name}"
    return f"reply {type(outcome.value).__qualname__}"


def shutting_down() -> ZLinkError:
    """The error every call gets once its host stops admitting (CMP-5.14)."""
    return ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down")
