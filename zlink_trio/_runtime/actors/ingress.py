"""What an Actor activation admits and where it waits for its turn: the mailbox, the front and
the relocation hold (actors/sealing.py; the Spot's counterpart is spots/ingress.py, whose rules
these follow).

The base class of ``ActorActivation`` (activation.py), so that the activation keeps to its
lifecycle, its lane and its joins.

Rule 1: three queues, one order. The mailbox admits messages up to its limit; the front is an
unbounded deque the lane serves before the mailbox (what a seal left unrun after an abort, what
a move carried here); while a ``Hold`` is set an offered message goes into it, in arrival order,
never into the mailbox, and never fails for room. Once the Actor is detached, the hold hands
every late message to the move's ``forward`` at once, in order.
Rule 2: one job permit per queued envelope; a front entry says whether it holds one.
Rule 3: whoever gives an idle lane front entries from outside puts ``WAKE`` into the mailbox.
"""

from __future__ import annotations

import contextlib

from zlink_trio._runtime.node.envelope import Envelope, admitted
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.spots.ingress import WAKE, Entry, Hold, Queues
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId

__all__ = ["ActorIngress"]


class ActorIngress(Queues):
    """The admission side of one Actor activation (Rules 1-3)."""

    node: LocalNode
    actor_id: ActorId
    busy: bool

    def __init__(self, node: LocalNode) -> None:
        super().__init__(node)
        self.lane_running = False
        """A lane task exists (serving, or parked in the mailbox: activation.py Rule 7)."""
        self.hold: Hold | None = None
        """Set while sealed for a move, and for good once detached (actors/sealing.py)."""
        self.parked = False
        """The lane holds a message back because the Actor is sealed."""

    @property
    def accepting(self) -> bool:
        raise NotImplementedError

    @property
    def resting(self) -> bool:
        """The lane has no message in hand: there is no lane, it waits in the mailbox, or it
        waits for a seal to end."""
        return (
            self.parked or not self.lane_running or (not self.busy and self.mailbox.server_waiting)
        )

    def _held(self, hold: Hold, envelope: Envelope) -> None:
        hold.admit(envelope, self.node.jobs.release)

    def push_front(self, entries: list[Entry]) -> None:
        """Queue ``entries`` after the front's, before the mailbox, and wake an idle lane."""
        front = self.front
        was_empty = not front
        front.extend(entries)
        if was_empty and front:
            # A mailbox closed by closing refuses it: the lane ends, and _finish fails the rest.
            with contextlib.suppress(ZLinkError):
                self.mailbox.try_put(WAKE, "")

    def offer(self, envelope: Envelope) -> None:
        """Admit now; ``CAPACITY_EXCEEDED`` when the queue is full (mailbox.py Rule 1)."""
        if (hold := self.hold) is not None:
            self._held(hold, envelope)
            return
        if not self.accepting:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"Actor {self.actor_id} is closing")
        self.mailbox.offer(envelope, f"Actor {self.actor_id}")
        if self.node.trace is not None:
            self.node.trace(admitted(envelope, f"Actor {self.actor_id}"))

    def try_put(self, envelope: Envelope) -> bool:
        """``put`` without waiting: ``False`` when the queue is full."""
        if (hold := self.hold) is not None:
            self._held(hold, envelope)
            return True
        if not self.accepting:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"Actor {self.actor_id} is closing")
        if not self.mailbox.try_put(envelope, f"Actor {self.actor_id}"):
            return False
        if self.node.trace is not None:
            self.node.trace(admitted(envelope, f"Actor {self.actor_id}"))
        return True

    async def put(self, envelope: Envelope, *, over: bool = False) -> None:
        """Admit, waiting for room while the queue is full (``over``: past the limit instead,
        routing/local.py Rule 4); a wait that the Actor's closing ends is ``UNAVAILABLE``, or
        ``SHUTTING_DOWN`` with its host (CMP-7.9)."""
        if (hold := self.hold) is not None:
            self._held(hold, envelope)
            return
        if not self.accepting:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"Actor {self.actor_id} is closing")
        mailbox = self.mailbox
        if not (mailbox.put_over(envelope) if over else await mailbox.put(envelope)):
            raise self.node.not_admitted(f"Actor {self.actor_id}")
        if self.node.trace is not None:
            self.node.trace(admitted(envelope, f"Actor {self.actor_id}"))

    def reopen(self) -> None:
        """End a seal: what it left unrun, then what it held, are served first."""
        hold = self.hold
        assert hold is not None
        assert hold.forward is None
        self.hold = None
        self.push_front(hold.reopened())
