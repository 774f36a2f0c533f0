"""What a Spot activation admits and where it waits for its turn: the mailbox, the front and the
relocation hold (specs/relocation.md RELOC-34..RELOC-37; specs/spots.md SPOT-89).

The base class of ``Activation`` (activation.py), so that the activation's state machine keeps to
its lifecycle and turns; sealing, capturing and moving are spots/sealing.py.

Theory of operation.

Rule 1: three queues, one order. The mailbox (engines/mailbox.py) admits messages up to its
limit. The front is an unbounded deque that the gate task serves before the mailbox: what must run
before anything admitted later (a sealed Spot's unrun and held messages after an abort, the
messages a restored Spot carried over). While a ``Hold`` is set (the Spot is sealed for a
relocation) an offered message goes into it, in arrival order, never into the mailbox, and never
fails for room: a hold is unbounded (DESIGN §6). Once the Spot is detached the hold hands every
late message to the target's ``forward`` at once, in order.
Rule 2: one job permit per queued envelope (mailbox.py Rule 2). An envelope in the mailbox or a
hold holds one (taken past ``app_job_queue_size`` for a hold: the job queue never bounds it,
routing/local.py Rule 5); a front entry says whether it does, because a snapshot's entries
carried into a fresh activation of the same host hold none (their permits stayed where they
were admitted), while what a move relays to a restored Spot takes one here (sealing.py
``RestoredSpot.take``, ERR-5.16). A held message that is forwarded gives its permit back first:
it leaves this host's queue.
Rule 3: waking an idle gate task. When idle, the gate task waits in the mailbox; whoever gives an
empty front entries from outside it puts ``WAKE`` into the mailbox, a marker with no permit that
the gate task skips before looking at the front again.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Callable, Iterable
from typing import cast

import trio

from zlink_trio._runtime.engines.mailbox import Mailbox
from zlink_trio._runtime.node.envelope import Envelope, admitted, fail_one
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import SpotId

__all__ = ["WAKE", "Hold", "Queues", "SpotIngress"]

WAKE = cast(Envelope, object())
"""The marker that wakes an idle gate task (Rule 3); it is never a message."""

Entry = tuple[Envelope, bool]
"""A front entry: the envelope, and whether it holds a job permit of this host (Rule 2)."""


class Hold:
    """The seal of one activation (spots/sealing.py): what it held, what its gate task left
    unrun, and how it ends."""

    def __init__(self) -> None:
        self.unrun: list[Entry] = []
        """The front and mailbox entries at the seal, in order (Rule 1)."""
        self.held: list[Envelope] = []
        """What was offered since the seal, in arrival order; each holds a permit."""
        self.forward: Callable[[Envelope], None] | None = None
        """Set by a detach: where held and late messages go, in order."""
        self.quiet = trio.Event()
        """Set when the last running turn ends after the seal began."""
        self.ended = trio.Event()
        """Set when the seal ends: aborted, broken by host shutdown, or detached."""
        self.broken = False
        """Host shutdown began while sealed: the Spot closes instead."""
        self.continuing = False
        """A signalled boundary set this seal and the Spot is told ``CONTINUED`` before it
        serves again (spots/boundary.py Rule 3)."""

    def reopened(self) -> list[Entry]:
        """End the seal as if it had never been: what it left unrun, then what it held, in the
        order they are to be served first."""
        assert self.forward is None
        entries = [*self.unrun, *((envelope, True) for envelope in self.held)]
        self.unrun, self.held = [], []
        self.ended.set()
        return entries

    def detach(
        self, cut: int | None, forward: Callable[[Envelope], None], release: Callable[[], None]
    ) -> None:
        """End the seal for good: what a capture took (the unrun entries and the first ``cut``
        held ones; nothing when ``cut`` is ``None``) is dropped here, the rest and every later
        offer go to ``forward`` in order; each gives its job permit back (``release``) first."""
        if cut is None:
            taken, late = [], [*self.unrun, *((envelope, True) for envelope in self.held)]
        else:
            taken = [*self.unrun, *((envelope, True) for envelope in self.held[:cut])]
            late = [(envelope, True) for envelope in self.held[cut:]]
        self.unrun, self.held = [], []
        self.forward = forward
        for _envelope, permit in taken:
            if permit:
                release()
        for envelope, permit in late:
            if permit:
                release()
            forward(envelope)
        self.ended.set()

    def admit(self, envelope: Envelope, release: Callable[[], None]) -> None:
        """An offer while sealed: held, or forwarded at once once detached (its permit given back
        first: it leaves this host's queue)."""
        if self.forward is None:
            self.held.append(envelope)
        else:
            release()
            self.forward(envelope)


class Queues:
    """The mailbox and the front of one Spot or Actor activation (Rule 1), which an idle one
    keeps without a task or a deque (spots/activation.py Rule 10, actors/activation.py
    Rule 7)."""

    __slots__ = ("_front", "mailbox")

    def __init__(self, node: LocalNode) -> None:
        self.mailbox: Mailbox[Envelope] = Mailbox(
            node.config.mailbox_limit, self._arrived, node.idle_servers
        )
        self._front: collections.deque[Entry] | None = None

    def _arrived(self) -> None:
        """The mailbox's ``on_arrival``: start the unit's serving task if none runs."""
        raise NotImplementedError

    @property
    def front(self) -> collections.deque[Entry]:
        """Served before the mailbox (Rule 1); made when first used, dropped by a serving task
        that ends with it empty."""
        front = self._front
        if front is None:
            front = self._front = collections.deque()
        return front

    @property
    def queued(self) -> bool:
        """Whether anything waits in the front or the mailbox."""
        return bool(self._front) or len(self.mailbox) > 0


class SpotIngress(Queues):
    """The admission side of one Spot activation (Rules 1-3)."""

    __slots__ = ("hold", "node", "spot_id")

    node: LocalNode
    spot_id: SpotId

    def __init__(self, node: LocalNode) -> None:
        super().__init__(node)
        self.hold: Hold | None = None
        """Set while sealed for a relocation, and for good once detached (Rule 1)."""

    @property
    def accepting(self) -> bool:
        raise NotImplementedError

    def traced_name(self) -> str:
        raise NotImplementedError

    def _refused(self) -> ZLinkError:
        return ZLinkError(ErrorKind.NOT_FOUND, f"Spot {self.spot_id} is closing")

    def _held(self, hold: Hold, envelope: Envelope) -> None:
        hold.admit(envelope, self.node.jobs.release)  # a forwarded one leaves (Rule 2)
        if self.node.trace is not None:
            self.node.trace(admitted(envelope, f"the hold of {self.traced_name()}"))

    def offer(self, envelope: Envelope) -> None:
        """Put ``envelope`` in the mailbox now: the local admission boundary (CMP-4.4);
        ``CAPACITY_EXCEEDED`` when it is full (mailbox.py Rule 1). Into the hold while sealed."""
        if (hold := self.hold) is not None:
            return self._held(hold, envelope)
        if not self.accepting:
            raise self._refused()
        self.mailbox.offer(envelope, f"Spot {self.spot_id}")
        if self.node.trace is not None:
            self.node.trace(admitted(envelope, self.traced_name()))
        return None

    async def put(self, envelope: Envelope, *, over: bool = False) -> None:
        """Put ``envelope`` in the mailbox, waiting for room while it is full (``over``: past
        the limit instead, routing/local.py Rule 4); a wait that the Spot's closing ends is
        ``UNAVAILABLE``, or ``SHUTTING_DOWN`` with its host (CMP-7.9)."""
        if (hold := self.hold) is not None:
            return self._held(hold, envelope)
        if not self.accepting:
            raise self._refused()
        mailbox = self.mailbox
        if not mailbox.try_put(envelope, f"Spot {self.spot_id}") and not (
            mailbox.put_over(envelope) if over else await mailbox.put(envelope)
        ):
            raise self.node.not_admitted(f"Spot {self.spot_id}")
        if self.node.trace is not None:
            self.node.trace(admitted(envelope, self.traced_name()))
        return None

    def try_put(self, envelope: Envelope) -> bool:
        """``put`` without waiting: ``False`` when the mailbox is full."""
        if (hold := self.hold) is not None:
            self._held(hold, envelope)
            return True
        if not self.accepting:
            raise self._refused()
        if not self.mailbox.try_put(envelope, f"Spot {self.spot_id}"):
            return False
        if self.node.trace is not None:
            self.node.trace(admitted(envelope, self.traced_name()))
        return True

    def push_front(self, entries: Iterable[Entry]) -> None:
        """Queue ``entries`` after the front's, before the mailbox, and wake an idle gate task
        (Rule 3)."""
        front = self.front
        was_empty = not front
        front.extend(entries)
        if was_empty and front:
            # A mailbox sealed by closing refuses it: the gate task ends, and _finish fails
            # whatever is left.
            with contextlib.suppress(ZLinkError):
                self.mailbox.try_put(WAKE, "")

    def reopen(self) -> None:
        """End the seal: what it left unrun, then what it held, are served first (Rule 1)."""
        hold = self.hold
        assert hold is not None
        assert hold.forward is None
        self.hold = None
        self.push_front(hold.reopened())

    def take_queued(self) -> list[Entry]:
        """Everything queued here, in serving order, removed: the front, then the mailbox (each
        holding a permit), markers dropped."""
        front = self._front
        taken = list(front or ())
        if front:
            front.clear()  # in place: a running gate task holds this deque
        queued = self.mailbox.take_all()
        taken.extend((envelope, True) for envelope in queued if envelope is not WAKE)
        return taken

    def _fail_admitted(self, error: ZLinkError) -> None:
        entries = self.take_queued()
        hold = self.hold
        if hold is not None and hold.forward is None:
            entries += [*hold.unrun, *((envelope, True) for envelope in hold.held)]
            hold.unrun.clear()
            hold.held.clear()
        for envelope, permit in entries:
            if permit:
                self.node.jobs.release()
            fail_one(self.node.dispatcher, envelope, error)
