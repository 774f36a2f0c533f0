"""One-way messages from peers that cannot be admitted at once wait per target, not in the
transport's reader (specs/overload.md OVL-1, OVL-3, OVL-5).

Rule 1: the reader never waits for one target. A send from a peer to a Spot or an Actor is
admitted on the spot when a job permit and queue room are free, or the target is sealed: its
hold takes it past the job queue's size (``try_admit``: no checkpoint, no task; local.py Rule 5).
Otherwise, or while earlier messages to the same target still wait, it joins that target's
backlog, in arrival order, and one feeder task per target admits the backlog through the
ordinary waiting send (``Messaging.send`` / ``send_actor`` with ``local=True``), so the order
per sender and target is
the order of arrival and every other target keeps being served (OVL-1).
Rule 2: the backlogs together are bounded. Past ``limit`` parked messages the reader waits until
a feeder has admitted one, so memory stays bounded when many targets are slow at once; the
first wait of each episode is logged (OVL-3).
Rule 4: a request never overtakes a backlog. A request from a peer to a target whose backlog is
not empty finds it full: it is answered ``UNAVAILABLE`` at once (the owner's queue is full,
ERR-5.11), so it is neither handled before the sends that came first nor held behind them.
Rule 5: backpressure reaches the senders of a full Spot and no others. When a target's backlog
reaches ``PAUSE_AT`` messages, every peer that sent to it is told to pause (``signal(peer,
target, True)``, a ``zlink.Pause``, credit.py), and so is any peer whose message arrives while it
is paused; once the backlog is down to ``RESUME_AT``, or empty, they are told to resume (OVL-2).
Rule 3: what a feeder cannot admit (the Spot closed, the host shuts down) is logged and dropped,
as the reader did before: the sender's call completed at its own transport (CMP-4.3).
"""

from __future__ import annotations

import collections
import logging
from collections.abc import Callable, Mapping

import trio

from zlink_trio._runtime.declarations.handlers import HandlerKind
from zlink_trio._runtime.declarations.values import MessageContext
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.routing.local import (
    InstanceChoice,
    actor_context,
    permit_for_hold,
    resolve_actor,
    resolve_spot,
)
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import ActorId, NodeRid, SpotId

__all__ = ["BACKLOG_LIMIT", "PAUSE_AT", "RESUME_AT", "Backlogs"]

_log = logging.getLogger("zlink_trio.runtime.remote")

BACKLOG_LIMIT = 65_536
"""Most one-way messages from peers parked across all targets of a host (Rule 2)."""
PAUSE_AT = 256
"""A target's backlog at which its senders are paused (Rule 5)."""
RESUME_AT = 64
"""A paused target's backlog at which its senders resume (Rule 5)."""

Target = SpotId | ActorId
_Parked = tuple[NodeRid, object, Mapping[str, str], InstanceChoice | None]


class Backlogs:
    """The per-target backlogs of one host's inbound one-way messages (Rules 1-3)."""

    def __init__(
        self,
        messaging: Messaging,
        limit: int = BACKLOG_LIMIT,
        signal: Callable[[NodeRid, Target, bool], None] | None = None,
    ) -> None:
        self._messaging = messaging
        self._limit = limit
        self.signal = signal
        """Tells ``peer`` to pause (``True``) or resume sends to a target (Rule 5)."""
        self._queues: dict[Target, collections.deque[_Parked]] = {}
        self._paused: dict[Target, set[NodeRid]] = {}
        self._parked = 0
        self._room = trio.Event()
        self._overloaded = False
        self._drained: dict[Target, trio.Event] = {}

    def holds(self, target: Target) -> int:
        """How many messages from peers wait for ``target`` (0 when none)."""
        queue = self._queues.get(target)
        return 0 if queue is None else len(queue)

    async def wait_drained(self, target: Target) -> None:
        """Return once nothing from peers waits for ``target`` (a sender's flush, reroute.py
        Rule 2: what came before it is admitted before the sender's next call)."""
        if target in self._queues:
            await self._drained.setdefault(target, trio.Event()).wait()

    @property
    def parked(self) -> int:
        """How many messages wait in backlogs now (for tests and diagnostics)."""
        return self._parked

    def try_admit(
        self,
        target: Target,
        message: object,
        metadata: Mapping[str, str],
        instance: InstanceChoice | None,
    ) -> bool:
        """Admit ``message`` now if nothing of its target waits and nothing has to wait;
        ``False`` when it must be parked (Rule 1). Errors raise as from ``Messaging.send``
        (``send_actor`` for an Actor)."""
        messaging = self._messaging
        # A unit that moved away never gets here: the reader relays its sends (follow.py).
        if target in self._queues:
            return False  # parked behind sends that came first
        node = messaging.node
        node.check_admitting()
        jobs = node.jobs
        if not jobs.try_acquire():  # the units are looked up only on a shortage
            units = (
                messaging.actors.actors if type(target) is ActorId else messaging.spots.activations
            )
            if not permit_for_hold(node, units, target):  # a sealed one's hold takes it
                return False
        try:
            if type(target) is ActorId:
                actor, handler = resolve_actor(
                    messaging.actors, target, type(message), HandlerKind.PACKET
                )
                context = actor_context(actor, target, metadata)
                if actor.try_put(Envelope(message, handler, context, None)):
                    return True
            else:
                assert isinstance(target, SpotId)
                found = resolve_spot(
                    messaging.spots, target, type(message), HandlerKind.PACKET, instance, True
                )
                if isinstance(found, tuple):
                    activation, handler = found
                    envelope = Envelope(message, handler, MessageContext(target, metadata), None)
                    if activation.try_put(envelope):
                        return True
        except BaseException:
            jobs.release()
            raise
        jobs.release()
        return False

    async def park(
        self,
        nursery: trio.Nursery,
        origin: NodeRid,
        spot_id: Target,
        message: object,
        metadata: Mapping[str, str],
        instance: InstanceChoice | None,
    ) -> None:
        """Add ``message`` to its target's backlog, starting the target's feeder if it has
        none; waits only while the backlogs are full (Rule 2)."""
        while self._parked >= self._limit:
            if not self._overloaded:
                self._overloaded = True
                _log.warning(
                    "%d one-way messages from peers wait for their Spots; reading from peers "
                    "pauses until they are admitted",
                    self._parked,
                )
            await self._room.wait()
        self._overloaded = False
        queue = self._queues.get(spot_id)
        if queue is None:
            queue = self._queues[spot_id] = collections.deque()
            nursery.start_soon(self._feed, spot_id, queue)
        queue.append((origin, message, metadata, instance))
        self._parked += 1
        paused = self._paused.get(spot_id)
        if paused is not None:
            if origin not in paused:
                paused.add(origin)
                self._tell(origin, spot_id, True)
        elif len(queue) >= PAUSE_AT:
            senders = {parked[0] for parked in queue}
            self._paused[spot_id] = senders
            for peer in sorted(senders, key=lambda rid: rid.value):
                self._tell(peer, spot_id, True)

    def _tell(self, peer: NodeRid, spot_id: Target, pause: bool) -> None:
        if self.signal is not None:
            self.signal(peer, spot_id, pause)

    def _resume(self, spot_id: Target) -> None:
        for peer in sorted(self._paused.pop(spot_id, ()), key=lambda rid: rid.value):
            self._tell(peer, spot_id, False)

    async def _feed(self, spot_id: Target, queue: collections.deque[_Parked]) -> None:
        """Admit ``spot_id``'s backlog in order through the waiting send (Rules 1, 3)."""
        messaging = self._messaging
        try:
            while queue:
                origin, message, metadata, instance = queue[0]
                try:
                    if type(spot_id) is ActorId:
                        await messaging.send_actor(spot_id, message, metadata, local=True)
                    else:
                        assert isinstance(spot_id, SpotId)
                        await messaging.send(spot_id, message, metadata, instance, None, local=True)
                except ZLinkError as error:
                    _log.info("a send from %s to %s was not admitted: %s", origin, spot_id, error)
                queue.popleft()
                self._parked -= 1
                self._room.set()
                self._room = trio.Event()
                if len(queue) <= RESUME_AT and spot_id in self._paused:
                    self._resume(spot_id)
        finally:
            if self._queues.get(spot_id) is queue:
                del self._queues[spot_id]
                drained = self._drained.pop(spot_id, None)
                if drained is not None:
                    drained.set()
            self._resume(spot_id)
            self._parked -= len(queue)
            queue.clear()
