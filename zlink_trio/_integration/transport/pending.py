"""The pending-reply table: one entry per request waiting for its reply (TRN-12, TRN-16, TRN-17,
TRN-23).

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
:meth:`PendingReply.wait` then returns at once. A caller still waiting for capacity to submit
(see ``mesh.py``) leaves the cancel scope of that wait in the entry, and a pop cancels it, so an
ending that comes first (e.g. :meth:`PendingReplies.fail` at shutdown) also ends that wait.

Timeouts are the table's own, not a cancel scope per request: each entry keeps its deadline, and
one task (:meth:`PendingReplies.expire_forever`) sleeps until the earliest deadline the table may
hold, then pops every entry whose deadline has passed and settles it with :data:`TIMED_OUT`. A
registration with an earlier deadline moves that task's wake-up forward; an entry that ended
otherwise leaves the wake-up where it was, and the task then finds nothing due, recomputes the
earliest deadline and sleeps again. So a timeout is one more pop among the others.

The table counts its entries per peer run, and a registration that would pass
``max_in_flight_per_peer`` ends at once with ``UNAVAILABLE`` (TRN-34): nothing waits for such a
slot, and the table, the only place that remembers a request, stays bounded per connection.
Every pop goes through one method, which gives the slot back.
"""

from __future__ import annotations

import math
from typing import Final

import trio

from zlink_trio._integration.transport.routes import PeerRun
from zlink_trio._wire import ErrorReply, Reply
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "TIMED_OUT", "PendingReplies", "PendingReply"]

DEFAULT_MAX_IN_FLIGHT: Final = 65_536
"""Requests to one peer run that may wait for replies at once, unless configured (TRN-34)."""

_SUCCEEDED = trio.lowlevel.Abort.SUCCEEDED

TIMED_OUT: Final = ZLinkError(ErrorKind.DEADLINE_EXCEEDED, "no reply in time")
"""The outcome of an entry whose deadline passed; its caller raises its own error for it."""


class PendingReply:
    """One waiting request: the run it was sent to and, once settled, its outcome."""

    __slots__ = ("admission", "deadline", "outcome", "run", "task")

    def __init__(self, run: PeerRun, deadline: float) -> None:
        self.run = run
        self.deadline = deadline
        self.outcome: Reply | ZLinkError | None = None
        self.task: trio.lowlevel.Task | None = None
        """The caller's task while it is parked in :meth:`wait`; None otherwise."""
        self.admission: trio.CancelScope | None = None
        """The scope of the caller's wait for capacity while it waits to submit; None otherwise."""

    def settle(self, outcome: Reply | ZLinkError) -> None:
        """Store the outcome and wake the caller; only the path that popped the entry."""
        self.outcome = outcome
        task = self.task
        if task is not None:
            self.task = None
            trio.lowlevel.reschedule(task)
        elif self.admission is not None:
            self.admission.cancel()  # it waits to submit: nothing is left to submit

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
    """Requests of this node run waiting for replies, by ReplyRouteId value; at most
    ``limit`` of them to one peer run at a time."""

    __slots__ = ("_entries", "_expiry", "_in_flight", "_last_route", "_limit", "_next_expiry")

    def __init__(self, limit: int = DEFAULT_MAX_IN_FLIGHT) -> None:
        self._entries: dict[int, PendingReply] = {}
        self._in_flight: dict[PeerRun, int] = {}
        """How many entries wait for each peer run; a run with none has no key."""
        self._limit = limit
        self._last_route = 0
        self._next_expiry = math.inf
        """No entry's deadline is earlier; the expiry task wakes up then."""
        self._expiry: trio.CancelScope | None = None

    def __len__(self) -> int:
        return len(self._entries)

    def register(self, run: PeerRun, deadline: float) -> tuple[int, PendingReply]:
        """A fresh ReplyRouteId value (unique within this run) and its registered entry, which
        ends with :data:`TIMED_OUT` at ``deadline`` unless another ending comes first.
        ``UNAVAILABLE`` when ``run`` has ``limit`` entries already (TRN-34)."""
        waiting = self._in_flight.get(run, 0)
        if waiting >= self._limit:
            raise ZLinkError(
                ErrorKind.UNAVAILABLE,
                f"{waiting} requests to {run.node_rid} wait for replies already "
                f"(max_in_flight_per_peer {self._limit})",
            )
        self._in_flight[run] = waiting + 1
        self._last_route += 1
        entry = PendingReply(run, deadline)
        self._entries[self._last_route] = entry
        if deadline < self._next_expiry:
            self._next_expiry = deadline
            if self._expiry is not None:
                self._expiry.deadline = deadline
        return self._last_route, entry

    async def expire_forever(self) -> None:
        """Settle each entry with :data:`TIMED_OUT` once its deadline passes; until cancelled."""
        while True:
            with trio.CancelScope(deadline=self._next_expiry) as self._expiry:
                await trio.sleep_forever()
            self._expiry = None
            now = trio.current_time()
            entries = self._entries
            due = [route for route, entry in entries.items() if entry.deadline <= now]
            for route in due:
                self._taken(route).settle(TIMED_OUT)
            self._next_expiry = min((e.deadline for e in entries.values()), default=math.inf)

    def peers(self) -> set[NodeRid]:
        """The peer nodes that a request waits for a reply from now (read once per heartbeat
        interval)."""
        return {run.node_rid for run in self._in_flight}

    def claim(self, route: int, entry: PendingReply) -> bool:
        """Take ``entry`` out for its own caller (timeout, cancellation); False if settled."""
        return self._pop(route) is entry  # a route is never reused: found means this entry

    def complete(self, message: Reply | ErrorReply) -> bool:
        """Settle the entry ``message`` answers; False when none waits (a late reply)."""
        entry = self._pop(message.reply_route.value)
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
            self._taken(route).settle(error)
        return len(routes)

    def _pop(self, route: int) -> PendingReply | None:
        """The entry of ``route``, out of the table and its run's count; None when none is."""
        entry = self._entries.pop(route, None)
        if entry is not None:
            run = entry.run
            waiting = self._in_flight[run] - 1
            if waiting:
                self._in_flight[run] = waiting
            else:
                del self._in_flight[run]
        return entry

    def _taken(self, route: int) -> PendingReply:
        """``_pop`` of a route just found in the table (no checkpoint since)."""
        entry = self._pop(route)
        assert entry is not None
        return entry
