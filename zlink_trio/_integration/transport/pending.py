"""The pending-reply table: one entry per request waiting for its reply (TRN-12, TRN-16, TRN-23).

Theory of operation (seed 002 §10). A request's entry is registered under a fresh ReplyRouteId
*before* its frames are submitted, so a reply can never arrive ahead of its entry. Every path that
can end a request (its reply or error reply, its timeout or cancellation, the loss of its peer's
run, shutdown) ends it the same way: by popping the entry from the table. The pop is atomic in
Trio (no checkpoint inside), so exactly one path wins and sets the outcome; the losers find no
entry and do nothing. A reply that finds no entry is late and is discarded.

The hand-over to the waiting caller is one slot, not an Event: the caller parks its own task in
the entry (:meth:`PendingReply.wait`), and the path that pops the entry stores the outcome and
reschedules that task directly. This is the request's latency path: an Event would add a parking
lot and its bookkeeping per request. A caller that is cancelled or times out while parked leaves
the slot empty (its abort), so no later pop can reschedule a task that is no longer waiting; a pop
while the caller is not parked yet (it still waits for capacity) only stores the outcome, which
:meth:`PendingReply.wait` then returns at once.
"""

from __future__ import annotations

import trio

from zlink_trio._integration.transport.routes import PeerRun
from zlink_trio._wire import ErrorReply, Reply
from zlink_trio.errors import ZLinkError

__all__ = ["PendingReplies", "PendingReply"]

_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED


class PendingReply:
    """One waiting request: the run it was sent to and, once settled, its outcome."""

    __slots__ = ("outcome", "run", "task")

    def __init__(self, run: PeerRun) -> None:
        self.run = run
        self.outcome: Reply | ZLinkError | None = None
        self.task: trio.lowlevel.Task | None = None
        """The caller's task while it is parked in :meth:`wait`; None otherwise."""

    def settle(self, outcome: Reply | ZLinkError) -> None:
        """Store the outcome and wake the parked caller; only the path that popped the entry."""
        self.outcome = outcome
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task)

    async def wait(self) -> None:
        """Return once the entry is settled; cancellable (then the entry stays unsettled)."""
        if self.outcome is not None:
            await trio.lowlevel.checkpoint()  # every wait is a checkpoint, even a settled one
            return
        self.task = trio.lowlevel.current_task()
        await trio.lowlevel.wait_task_rescheduled(self._abort)

    def _abort(self, _raise_cancel: object) -> trio.lowlevel.Abort:
        self.task = None  # a settle from now on must not reschedule a task that left
        return _SUCCEEDED


class PendingReplies:
    """Requests of this node run waiting for replies, by ReplyRouteId value."""

    __slots__ = ("_entries", "_last_route")

    def __init__(self) -> None:
        self._entries: dict[int, PendingReply] = {}
        self._last_route = 0

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, run: PeerRun) -> tuple[int, PendingReply]:
        """A fresh ReplyRouteId value (unique within this run) and its registered entry."""
        self._last_route += 1
        entry = PendingReply(run)
        self._entries[self._last_route] = entry
        return self._last_route, entry

    def claim(self, route: int, entry: PendingReply) -> bool:
        """Take ``entry`` out for its own caller (timeout, cancellation); False if settled."""
        return self._entries.pop(route, None) is entry

    def complete(self, message: Reply | ErrorReply) -> bool:
        """Settle the entry ``message`` answers; False when none waits (a late reply)."""
        entry = self._entries.pop(message.reply_route.value, None)
        if entry is None:
            return False
        if type(message) is Reply:
            entry.settle(message)
        else:
            entry.settle(ZLinkError(message.kind, message.message))  # type: ignore[union-attr]  # ErrorReply
        return True

    def fail(self, error: ZLinkError, run: PeerRun | None = None) -> int:
        """Settle with ``error`` every entry sent to ``run`` (every entry when None); how many."""
        routes = [r for r, e in self._entries.items() if run is None or e.run == run]
        for route in routes:
            self._entries.pop(route).settle(error)
        return len(routes)
