"""One live Actor on this host: its queue, lane, membership and deferred joins (specs/actors.md;
specs/spots.md SPOT-51..SPOT-55, SPOT-59, SPOT-67, SPOT-69, SPOT-71..SPOT-73).

Longer than 400 lines: one state machine (creating, ready, closing, closed) and the lane that
serves it; the FIFO claim (Rule 1), the deferred joins that run between turns (Rule 3) and the
seal before closing (Rule 4) are invariants over the same fields, read together.

Theory of operation.

Rule 1: the lane is the FIFO claim. Each Actor has one lane task that takes its queued messages
in order and runs each turn to its end before taking the next (SPOT-73). Because the lane itself
awaits the turn, the claim is kept while the turn is suspended, ``yield_()`` included: another
turn of the Spot may take the gate meanwhile, but never this Actor's next message (SPOT-69).
Rule 2: the gate comes from the membership. A turn of an Actor in a SPOT_WIDE User Spot also
takes that Spot's gate, so it never overlaps another turn of the Spot (SPOT-67); in the Entry
Spot and in a PER_ACTOR User Spot the lane alone orders the Actor's turns, so different Actors run
concurrently (SPOT-72) and such a turn cannot yield (gate.py Rule 5).
Rule 3: joins are deferred. ``join_spot(...).defer()`` only records the join on the running turn.
When the turn ends normally the lane runs the recorded joins in order, before taking the next
message, so nothing queued behind the join runs before it is decided; a turn that raised or was
cancelled discards them. A join to a User Spot asks its ``on_actor_join`` (a control turn of that
Spot); on acceptance the membership changes at once (no checkpoint between the last check and
the change), then the target's ``on_joined_actor`` runs, the source's ``on_leave_actor`` is
started without being waited for, and the Actor's ``on_join_completed`` runs as its next turn.
A rejection or a failure leaves the membership as it was and is reported the same way. Joining
the Spot the Actor is already in is accepted without any callback.
Rule 4: closing seals first, like a Spot (activation.py Rule 3): ``begin_close`` seals the queue;
what was admitted runs (destroy) or is dropped (host shutdown); the running turn is cancelled at
the closing deadline; the lane then releases the Actor's store record. An Actor still being
created when shutdown begins has its creation cancelled at once (``creation``): it never becomes
Ready, its caller gets ``SHUTTING_DOWN`` and its claim is released. There is no per-Actor
closing callback (SPOT-49). Shutdown leaves the membership sets as they are, so a Spot's
``on_closing`` still sees its members.
Rule 5: a seal for a move holds the lane at a turn boundary. The lane serves the front before
the mailbox (ingress.py); while the Actor is sealed it puts the message in hand back in front
and waits for the seal to end, so no turn starts (actors/sealing.py). A move's restored
incarnation keeps the store record out of its hands until its commit (``keeps_record``).
Rule 6: a join to a User Spot of another host moves the Actor there (ACT-27). The lane, between
turns, seals the Actor itself and hands it to the host's mover (``catalog.join_elsewhere``,
host/joining.py): the Spot's host asks ``on_actor_join`` before it restores anything; a
rejection or a failure reopens the Actor here with its completion, as on one host. Once the
record names the other host, the source Spot's ``on_leave_actor`` starts, the lane ends (joins
its turn deferred after this one end ``FAILED`` there) and what waited here is relayed; there
the Spot's ``on_joined_actor`` and the Actor's ``on_join_completed`` run before any message
(``arrive_joined``).
Rule 7: an idle Actor holds no task (specs/spots.md SPOT-96), like an idle Spot (spots/
activation.py Rule 10). The lane is started when the mailbox tells of an arrival and none runs
(``start_lane``), and when a move admits the Actor here; it ends once it has waited in the empty
mailbox through a whole idle period (engines/mailbox.py Rule 5), dropping an empty front. Closing
starts a lane if none runs, so the lane that closes the Actor (Rule 4) always exists; each lane
runs in a cancel scope of its own, which the closing deadline cuts.
"""

from __future__ import annotations

import enum
import logging
import secrets
from typing import Any

import attrs
import trio

from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.actors.ingress import ActorIngress
from zlink_trio._runtime.actors.joins import decide_join, refuse_target
from zlink_trio._runtime.declarations.registry import ActorType
from zlink_trio._runtime.declarations.values import (
    ActorJoinCompletion,
    ActorJoinOutcome,
)
from zlink_trio._runtime.engines.completion import shutting_down
from zlink_trio._runtime.engines.gate import ExecutionGate, Turn, enter_turn, leave_turn
from zlink_trio._runtime.engines.mailbox import Burst, Retired
from zlink_trio._runtime.node.envelope import (
    Envelope,
    expired,
    fail_one,
    handler_failed,
    reply,
)
from zlink_trio._runtime.ownership.authority import Claim
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.ingress import WAKE
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, ActorRef, SpotId, SpotKind

__all__ = ["ActorActivation", "ActorState", "DeferredJoin"]

_log = logging.getLogger("zlink_trio.runtime.actor")


class ActorState(enum.Enum):
    """Where an Actor activation is in its life."""

    CREATING = "creating"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"


@attrs.frozen
class DeferredJoin:
    """One join recorded by ``defer()``: the target (``None``: the Entry Spot), the request
    for ``on_actor_join``, the absolute deadline and the join id (Rule 3)."""

    target: SpotId | None
    request: object | None
    deadline: float
    join_id: int = attrs.field(factory=lambda: secrets.randbits(128) or 1)


class ActorActivation(ActorIngress):
    """One incarnation of an Actor on this host."""

    def __init__(
        self,
        catalog: ActorCatalog[ActorActivation],
        actor_type: ActorType,
        actor_id: ActorId,
        claim: Claim,
    ) -> None:
        node = catalog.node
        self.catalog = catalog
        self.node = node
        self.actor_type = actor_type
        self.actor_id = actor_id
        self._claim = claim
        self.state = ActorState.CREATING
        super().__init__(node)
        self.spot: Activation = catalog.spots.entry
        """The Spot this Actor is a member of (Rule 2)."""
        self.instance: Any = None
        self.joining = False
        """A join is being decided: destroy answers UNAVAILABLE meanwhile."""
        self.busy = False
        """Whether the lane is in a message's turn or the joins it deferred (a quiet check)."""
        self._drop_admitted = False
        self.keeps_record = False
        """The store record is another incarnation's (a move's source after the commit, or a
        restore before it): closing leaves it alone."""
        self._turns: trio.CancelScope | None = None
        """The running lane's scope, which the closing deadline cuts (Rule 4)."""
        self._closing_at: float | None = None
        self.creation = trio.CancelScope()
        """The creation of this activation (``creation.py``); shutdown cancels it (Rule 4)."""
        self.closed = trio.Event()
        catalog.live.add(self)

    @property
    def ref(self) -> ActorRef:
        """The snapshot naming this incarnation."""
        return ActorRef(
            self.actor_id, self._claim.record.generation, self.node.mesh, self.node.node_rid
        )

    @property
    def accepting(self) -> bool:
        """Whether the queue still admits messages."""
        return self.state is ActorState.READY

    def _gate(self) -> ExecutionGate | None:
        return self.spot.shared_gate

    # --- creation ------------------------------------------------------------------------------

    def make_instance(self) -> Any:
        """A new instance of the Actor class with its context set before ``__init__``."""
        cls: Any = self.actor_type.cls
        instance = cls.__new__(cls)
        instance._zl_context = self.catalog.make_context(self)
        instance.__init__()
        self.instance = instance
        return instance

    async def become_ready(self) -> None:
        """Record Ready in the store, join the Entry Spot and start the lane."""
        self._claim = await self.node.authority.mark_ready(self._claim)
        if self.creation.cancel_called or not self.node.admitting:
            # The write came back after shutdown had begun: never Ready (Rule 4); the caller
            # abandons, which deletes the record because it is this run's.
            raise shutting_down()
        self.state = ActorState.READY
        self.spot = self.catalog.spots.entry
        self.spot.members.add(self)
        self.catalog.actors[self.actor_id] = self
        if self.queued:
            self.start_lane()

    def start_lane(self) -> None:
        """Start the lane unless it runs (Rule 7)."""
        if not self.lane_running:
            self.lane_running = self.node.spawn(self.run)

    @property
    def stranded(self) -> bool:
        """Closing, with no lane to close it: ``begin_close`` could not start one because the
        activations nursery has ended (a part of the host crashed)."""
        return self.state is ActorState.CLOSING and not self.lane_running

    async def close_stranded(self) -> None:
        """The lane that closes a ``stranded`` Actor, run by the shutdown itself."""
        self.lane_running = True
        await self.run()

    def _arrived(self) -> None:
        """The mailbox's ``on_arrival``: an item no parked lane will take (Rule 7)."""
        if self.state is ActorState.READY or self.state is ActorState.CLOSING:
            self.start_lane()

    async def abandon(self) -> None:
        """Creation did not reach Ready: release the store record (shielded, bounded)."""
        self.state = ActorState.CLOSED
        self.catalog.live.discard(self)
        self.instance = None
        with trio.CancelScope(shield=True):
            try:
                with trio.move_on_after(self.node.config.store_release_timeout):
                    # By record owner, not version: a cancelled mark_ready may have committed.
                    await self.node.authority.forget_if_ours(self.actor_id)
            except ZLinkError as error:
                _log.warning("could not release the record of Actor %s: %s", self.actor_id, error)
        self.closed.set()

    # --- the lane ------------------------------------------------------------------------------

    async def run(self) -> None:
        """The lane: turns in queue order, each followed by the joins it deferred (Rules 1, 3);
        it ends after a whole idle period, or closes the Actor once its queue is closed and
        empty (Rules 4 and 7)."""
        front, burst = self.front, Burst(self.mailbox)  # mailbox.py Rule 4
        retired = False
        scope = self._turns = trio.CancelScope()
        if self._closing_at is not None:
            self.node.clock.set_deadline(scope, self._closing_at)
        try:
            with scope:
                while True:
                    if front:
                        envelope, permit = front.popleft()
                        await trio.lowlevel.checkpoint()
                        burst.checkpointed()
                    else:
                        try:
                            envelope = await burst.take()
                        except trio.EndOfChannel:
                            break
                        except Retired:
                            retired = True
                            break
                        if envelope is WAKE:
                            continue
                        permit = True
                    if (hold := self.hold) is not None and hold.forward is None:
                        # Sealed: back in front, unrun, until the seal ends (sealing.py Rule 1).
                        front.appendleft((envelope, permit))
                        self.parked = True
                        hold.quiet.set()
                        try:
                            await hold.ended.wait()
                        finally:
                            self.parked = False
                        continue
                    if self._drop_admitted:
                        if permit:
                            self.node.jobs.release()
                        fail_one(self.node.dispatcher, envelope, self._gone())
                        continue
                    self.busy = True
                    joins = await self._message_turn(envelope, permit)
                    for index, join in enumerate(joins):
                        if not self.accepting or not await self._run_join(join, joins[index:]):
                            break  # closing, or moved to another host by the join (Rule 6)
                    self.busy = False
                    if self.hold is not None:
                        self.hold.quiet.set()
        except Exception:
            _log.exception("the lane of Actor %s failed", self.actor_id)
        finally:
            if retired:
                self.lane_running = False
                if not front:
                    self._front = None  # an idle Actor keeps no deque (Rule 7)
            else:
                with trio.CancelScope(shield=True):
                    await self._finish()

    async def _message_turn(self, envelope: Envelope, permit: bool) -> list[DeferredJoin]:
        handler = envelope.handler
        gate = self._gate()
        try:
            if gate is not None and not gate.try_acquire():
                try:
                    await gate.acquire()
                except trio.Cancelled:
                    fail_one(self.node.dispatcher, envelope, self._gone())
                    raise
        finally:
            # The job leaves the queue: failed or about to start (mailbox.py Rule 2).
            if permit:
                self.node.jobs.release()
        turn = Turn(gate, actor=self)
        token = enter_turn(turn)
        if self.node.trace is not None:
            self.node.trace(f"turn {handler.name} of Actor {self.actor_id} starts")
        try:
            method = getattr(self.instance, handler.name)
            if handler.takes_context:
                context = envelope.context
                if context.spot_id != self.spot.spot_id:
                    # Admitted before a join moved the Actor: name the Spot it is handled in.
                    context = attrs.evolve(context, spot_id=self.spot.spot_id)
                arguments: tuple[object, ...] = (envelope.message, context)
            else:
                arguments = (envelope.message,)
            try:
                fence = self.node.fence
                if not fence.serving:  # a turn starts only while the lease holds (MESH-21)
                    await fence.wait_serving()
                late = expired(envelope, self.node.clock)
                if late is not None:  # nobody waits for it any more (envelope.py Rule 3)
                    fail_one(self.node.dispatcher, envelope, late)
                    return []
                result = await method(*arguments)
            except Exception as error:
                if envelope.reply_route is None:
                    _log.exception("packet handler %s of %s raised", handler.name, self.actor_id)
                    return []
                _log.exception("request handler %s of %s raised", handler.name, self.actor_id)
                result = handler_failed(handler, f"Actor {self.actor_id}", error)
                reply(self.node.dispatcher, envelope.reply_route, handler, result, self._name())
                return []
            except trio.Cancelled:
                fail_one(self.node.dispatcher, envelope, self._gone())
                raise
            if envelope.reply_route is not None:
                reply(self.node.dispatcher, envelope.reply_route, handler, result, self._name())
            return [join for join in turn.joins if isinstance(join, DeferredJoin)]
        finally:
            if self.node.trace is not None:
                self.node.trace(f"turn {handler.name} of Actor {self.actor_id} ends")
            leave_turn(token)
            if gate is not None:
                gate.release()

    async def _own_turn(self, completion: ActorJoinCompletion) -> None:
        """``on_join_completed`` as a turn of this Actor, on its (new) Spot's gate."""
        gate = self._gate()
        if gate is not None:
            await gate.acquire()
        token = enter_turn(Turn(gate, actor=self))
        try:
            await self.node.fence.wait_serving()
            await self.instance.on_join_completed(completion)
        except Exception:
            _log.exception("on_join_completed of Actor %s raised", self.actor_id)
        finally:
            leave_turn(token)
            if gate is not None:
                gate.release()

    # --- joins ---------------------------------------------------------------------------------

    async def _run_join(self, join: DeferredJoin, joins: list[DeferredJoin]) -> bool:
        """Decide ``join`` (the first of ``joins``, what its turn deferred from it on) and run
        ``on_join_completed``; ``False`` when it moved the Actor to another host (Rule 6)."""
        spots = self.catalog.spots
        target_id = spots.entry.spot_id if join.target is None else join.target
        self.joining = True
        try:
            completion: ActorJoinCompletion | None = None
            with self.node.clock.scope_until(join.deadline) as scope:
                completion = await self._join(join, target_id)
            if completion is None and not scope.cancelled_caught:
                # Not a Spot of this host: the join may move the Actor to its owner (Rule 6).
                completion = await self.catalog.join_elsewhere(self, joins, target_id)
                if completion is None:
                    return False
            if completion is None:
                timed_out = f"the join to {target_id} timed out"
                completion = self._fail(join, target_id, ErrorKind.DEADLINE_EXCEEDED, timed_out)
        finally:
            self.joining = False
        if self.accepting:
            await self._own_turn(completion)
        return True

    async def _join(self, join: DeferredJoin, target_id: SpotId) -> ActorJoinCompletion | None:
        """The join's end on this host; ``None`` when no Spot ``target_id`` is live here."""
        node = self.node
        if not node.admitting:
            return self._fail(join, target_id, ErrorKind.SHUTTING_DOWN, "the host is shutting down")
        spots = self.catalog.spots
        target = spots.entry if join.target is None else spots.activations.get(join.target)
        if target is None:
            return None
        refused = refuse_target(target, target_id)
        if refused is not None:
            return self._failed(join, target_id, refused)
        if target is self.spot:
            # Already a member: accepted, with no callback and no change (ACT-14).
            return ActorJoinCompletion(
                ActorJoinOutcome.ACCEPTED, join.join_id, target_id.value, self.ref
            )
        reply_message: object | None = None
        if target.kind is SpotKind.USER:
            try:
                decision = await decide_join(target, self.actor_id, join.request)
            except ZLinkError as error:
                return self._failed(join, target_id, error)
            if not decision.accepted:
                return ActorJoinCompletion(
                    ActorJoinOutcome.REJECTED,
                    join.join_id,
                    target_id.value,
                    reply=decision.reply,
                )
            reply_message = decision.reply
            if not (target.accepting and node.admitting and self.accepting):
                closed = f"Spot {target_id} closed during the join"
                return self._fail(join, target_id, ErrorKind.NOT_FOUND, closed)
        # The commit: no checkpoint since the last check (Rule 3).
        source = self.spot
        source.members.discard(self)
        target.members.add(self)
        self.spot = target
        await self._notify(target, "on_joined_actor")
        node.activation_nursery.start_soon(self._notify, source, "on_leave_actor")
        return ActorJoinCompletion(
            ActorJoinOutcome.ACCEPTED,
            join.join_id,
            target_id.value,
            self.ref,
            reply_message,
        )

    async def arrive_joined(self, completions: list[ActorJoinCompletion]) -> None:
        """A join moved this restored Actor here (Rule 6): the Spot's ``on_joined_actor``, then
        ``on_join_completed`` with each of ``completions`` as the Actor's turns, then serve."""
        self.busy = True
        try:
            await self._notify(self.spot, "on_joined_actor")
            for completion in completions:
                if self.accepting:
                    await self._own_turn(completion)
        finally:
            self.busy = False
            if (hold := self.hold) is not None and hold.forward is None and not hold.broken:
                self.reopen()

    def leave_for_move(self) -> None:
        """Start the ``on_leave_actor`` of the Spot a join to another host took it from."""
        spot, instance = self.spot, self.instance
        self.node.activation_nursery.start_soon(self._notify, spot, "on_leave_actor", instance)

    async def _notify(self, spot: Activation, callback: str, instance: Any = None) -> None:
        instance = self.instance if instance is None else instance
        try:
            await spot.control_turn(lambda s: getattr(s, callback)(instance))
        except ZLinkError as error:
            _log.info(
                "%s of %s for Actor %s skipped: %s", callback, spot.spot_id, self.actor_id, error
            )
        except Exception:
            _log.exception("%s of %s raised for Actor %s", callback, spot.spot_id, self.actor_id)

    async def notify_disconnected(self) -> None:
        """Run ``on_disconnect_actor`` of this Actor's current Spot for it."""
        await self._notify(self.spot, "on_disconnect_actor")

    def _failed(
        self, join: DeferredJoin, target_id: SpotId, error: ZLinkError
    ) -> ActorJoinCompletion:
        return ActorJoinCompletion(
            ActorJoinOutcome.FAILED, join.join_id, target_id.value, error=error
        )

    def _fail(
        self, join: DeferredJoin, target_id: SpotId, kind: ErrorKind, text: str
    ) -> ActorJoinCompletion:
        return self._failed(join, target_id, ZLinkError(kind, text))

    # --- closing -------------------------------------------------------------------------------

    def begin_close(self, deadline: float, *, drain: bool) -> bool:
        """Seal the queue and start closing (Rule 4); ``False`` if closing had begun. An
        activation still being created has its creation cancelled instead: its caller gets
        ``SHUTTING_DOWN`` and the claim is released (``abandon``)."""
        if self.state is ActorState.CREATING:
            self.creation.cancel()
            return False
        if self.state is not ActorState.READY:
            return False
        if (hold := self.hold) is not None and hold.forward is None:
            if drain:  # only host shutdown breaks a seal (actors/sealing.py Rule 1)
                raise ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {self.actor_id} is sealed to move")
            hold.broken = True
            hold.quiet.set()
            self.reopen()
        self.state = ActorState.CLOSING
        self._drop_admitted = not drain
        self.mailbox.close()
        self._closing_at = deadline
        if self._turns is not None:
            self.node.clock.set_deadline(self._turns, deadline)
        self.start_lane()  # the lane drains or drops what is queued, then closes (Rule 4)
        return True

    async def _finish(self) -> None:
        self.state = ActorState.CLOSED
        self.catalog.live.discard(self)
        self.mailbox.close()
        left = [*(self._front or ()), *((envelope, True) for envelope in self.mailbox.take_all())]
        self._front = None
        for envelope, permit in left:
            if envelope is WAKE:
                continue
            if permit:
                self.node.jobs.release()
            if not self.keeps_record:  # else what it carries is still the source's
                fail_one(self.node.dispatcher, envelope, self._gone())
        if not self.keeps_record:
            try:
                with trio.move_on_after(self.node.config.store_release_timeout):
                    await self.node.authority.release(self._claim)
            except ZLinkError as error:
                _log.warning("could not release the record of Actor %s: %s", self.actor_id, error)
        if self.catalog.actors.get(self.actor_id) is self:
            del self.catalog.actors[self.actor_id]
        self.instance = None  # the instance does not outlive its activation (SPOT-61)
        self.closed.set()

    def leave_membership(self) -> None:
        """Leave the current Spot's member set (destroy, not shutdown: Rule 4)."""
        self.spot.members.discard(self)

    def _gone(self) -> ZLinkError:
        return ZLinkError(
            ErrorKind.UNAVAILABLE, f"Actor {self.actor_id} closed before handling the message"
        )

    def _name(self) -> str:
        return f"Actor {self.actor_id}"
