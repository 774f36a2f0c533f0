"""The part of an Actor's move that lives in its activation: seal it at a turn boundary, capture
what moves, abort or detach, and restore into a fresh activation (specs/relocation.md RELOC-61..;
the Spot's counterpart is spots/sealing.py, whose rules these follow).

Theory of operation.

Rule 1: a seal is a barrier at a turn boundary. ``seal_actor`` sets the Actor's hold at once, so
everything offered from then on waits in it, unbounded; the lane finishes the turn it runs with
the joins that turn deferred (the FIFO claim: activation.py Rule 1) and then holds back the next
message. The seal completes once the lane has no message in hand. Only an Actor of the Entry
Spot moves alone; a member of a User Spot moves with its Spot (a join that ran during the seal
made it one: the seal is then abandoned). Host shutdown breaks a seal (activation.py
``begin_close``): what it held ends as admitted messages do at shutdown.
Rule 2: a snapshot is a plain value: the unrun entries, then the held ones, in order, each the
admitted ``Envelope`` itself. An Actor has no timers (ACT-3).
Rule 3: abort serves as if never sealed: the unrun entries, then the held ones, go to the front.
Rule 4: detach hands over for good: what the capture did not take goes to ``forward`` in order,
and every later offer too; the Actor leaves its Spot's member set without a callback (the Entry
Spots' memberships move with the record, upstream 28 §8.3), and closes without touching the
store record, which is the target's now.
Rule 6: a User Spot moves with its members (RELOC-6): ``seal_with_members`` seals each member
and then the Spot, and keeps the member set fixed while sealed (a join into a sealed Spot waits
for its control turn); on the target each member is admitted as a member of the restored Spot.
Rule 5: a restore makes a fresh instance of the type with its context and gives it the adapter
payload; ``on_create_actor`` does not run again (it ran for this generation). The restored Actor
is nobody's until ``admit``: then it is Ready in the catalog and a member of this host's Entry
Spot, and what is offered to it waits, sealed, behind what it ``take``s from the source; ``open``
ends that seal.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

import attrs
import trio

from zlink_trio._runtime.actors.activation import ActorActivation, ActorState
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.declarations.registry import ActorType
from zlink_trio._runtime.declarations.relocation import capture_payload, restore_payload
from zlink_trio._runtime.declarations.values import (
    ActorJoinCompletion,
    ActorJoinOutcome,
    MessageContext,
)
from zlink_trio._runtime.engines.completion import shutting_down
from zlink_trio._runtime.node.envelope import Envelope, fail_one
from zlink_trio._runtime.ownership.authority import Claim
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.boundary import serve_again
from zlink_trio._runtime.spots.ingress import WAKE, Hold
from zlink_trio._runtime.spots.sealing import SealedSpot, seal
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, ObjectGeneration, SpotKind, StableTypeName

__all__ = [
    "ActorSnapshot",
    "RestoredActor",
    "SealedActor",
    "prepare_actor_restore",
    "seal_actor",
    "seal_between_turns",
    "seal_with_members",
]


@attrs.frozen
class ActorSnapshot:
    """What a move of one Actor carries besides the adapter payload (Rule 2)."""

    actor_id: ActorId
    type_name: StableTypeName
    generation: ObjectGeneration
    entries: tuple[Envelope, ...]


def _refuse_seal(actor: ActorActivation, spot: Activation | None) -> ZLinkError | None:
    if actor.state is not ActorState.READY:
        return ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor.actor_id} is not Ready")
    if actor.hold is not None:
        return ZLinkError(ErrorKind.INVALID_OPERATION, f"Actor {actor.actor_id} is sealed already")
    if actor.spot.kind is not SpotKind.ENTRY and actor.spot is not spot:
        return ZLinkError(
            ErrorKind.INVALID_OPERATION,
            f"Actor {actor.actor_id} is a member of {actor.spot.spot_id}: it moves with it",
        )
    return None


async def seal_actor(actor: ActorActivation, spot: Activation | None = None) -> SealedActor:
    """Seal ``actor`` at a turn boundary (Rule 1): ``UNAVAILABLE`` when it is not Ready (or
    host shutdown breaks the seal), ``INVALID_OPERATION`` when it is sealed already or a member
    of a User Spot other than ``spot`` (whose move seals its members: ``seal_with_members``)."""
    refused = _refuse_seal(actor, spot)
    if refused is not None:
        raise refused
    hold = Hold()
    actor.hold = hold
    try:
        while not hold.broken and not actor.resting:
            if actor.busy:  # a turn (or its deferred joins) runs: its end sets quiet
                await hold.quiet.wait()
                hold.quiet = trio.Event()
            else:
                # The lane has something in hand (a message, or a wake-up with none) and is on
                # its way back to its queue, as a Spot's gate task (spots/sealing.py Rule 1).
                await trio.lowlevel.checkpoint()
        refused = None if hold.broken else _refuse_seal_after(actor, spot)
        if refused is not None:
            raise refused
    except BaseException:
        if actor.hold is hold:
            actor.reopen()  # admission as it was: what is queued still goes first
        raise
    if hold.broken:
        raise shutting_down()
    return _sealed(actor, hold)


def seal_between_turns(actor: ActorActivation) -> SealedActor:
    """Seal ``actor`` from its own lane between turns, for a join that moves it (activation.py
    Rule 6): no turn runs, so the seal holds at once. ``UNAVAILABLE`` when another move has
    sealed it or it is closing."""
    if actor.state is not ActorState.READY or actor.hold is not None:
        raise ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor.actor_id} is moving or closing")
    hold = Hold()
    actor.hold = hold
    return _sealed(actor, hold)


def _sealed(actor: ActorActivation, hold: Hold) -> SealedActor:
    """The seal complete: what the lane had not run yet (the front, then the mailbox) is the
    hold's unrun part, in order (Rule 2)."""
    queued = ((envelope, True) for envelope in actor.mailbox.take_all() if envelope is not WAKE)
    hold.unrun = [*actor.front, *queued]
    actor.front.clear()
    return SealedActor(actor, hold)


def _refuse_seal_after(actor: ActorActivation, spot: Activation | None) -> ZLinkError | None:
    if actor.spot.kind is not SpotKind.ENTRY and actor.spot is not spot:
        # A join during the seal made it a member of another Spot.
        return ZLinkError(
            ErrorKind.INVALID_OPERATION,
            f"Actor {actor.actor_id} joined {actor.spot.spot_id}: it moves with it",
        )
    if actor.state is not ActorState.READY:
        return ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor.actor_id} is closing")
    return None


async def seal_with_members(
    activation: Activation, held: Hold | None = None
) -> tuple[SealedSpot, list[SealedActor]]:
    """Seal a User Spot and every member Actor, as one unit (Rule 6): the members first (their
    turns take the Spot's gate), then the Spot, which holds every join into it; then any Actor
    that joined meanwhile is sealed too, and one that left for the Entry Spot is let go (it
    moves on its own). Raises as ``seal`` and ``seal_actor`` do, everything let go.
    ``held``: the Spot's seal a signalled boundary set (``seal``'s)."""
    members: dict[ActorActivation, SealedActor] = {}
    try:
        for actor in _by_id(activation.members):
            members[actor] = await seal_actor(actor, activation)
        sealed = await seal(activation, with_members=True, held=held)
        try:
            while True:
                current = set(activation.members)
                for actor in [actor for actor in members if actor not in current]:
                    members.pop(actor).abort()
                joined = [actor for actor in _by_id(current) if actor not in members]
                if not joined:
                    break
                for actor in joined:
                    members[actor] = await seal_actor(actor, activation)
        except BaseException:
            sealed.abort()
            raise
    except BaseException:
        for member in members.values():
            member.abort_if_sealed()
        if held is not None and activation.hold is held:
            serve_again(activation, held)  # a member's seal failed before the Spot's
        raise
    return sealed, [members[actor] for actor in _by_id(members)]


def _by_id(actors: Iterable[ActorActivation]) -> list[ActorActivation]:
    return sorted(actors, key=lambda actor: actor.actor_id.value)


class SealedActor:
    """A sealed Actor: ``capture()``, then ``abort()`` or ``detach(forward)``."""

    def __init__(self, actor: ActorActivation, hold: Hold) -> None:
        self.actor = actor
        self._hold = hold
        self._cut: int | None = None
        """How many held entries the last capture took (``None``: none yet)."""
        self._ended = False

    @property
    def claim(self) -> Claim:
        """The authority record this incarnation holds."""
        return self.actor._claim

    def _live(self) -> Hold:
        if self._ended or self._hold.broken:
            raise ZLinkError(ErrorKind.INVALID_OPERATION, "the seal has ended")
        return self._hold

    def capture(self) -> ActorSnapshot:
        """What the move carries besides the adapter payload (Rule 2)."""
        hold = self._live()
        actor = self.actor
        self._cut = len(hold.held)
        return ActorSnapshot(
            actor.actor_id,
            actor.actor_type.name,
            actor.ref.object_generation,
            (*(envelope for envelope, _ in hold.unrun), *hold.held),
        )

    async def capture_payload(self) -> bytes | None:
        """The adapter payload of a ``preserve_state_with`` type, ``None`` for any other."""
        self._live()
        adapter = self.actor.actor_type.relocation.adapter
        if adapter is None:
            return None
        return await capture_payload(adapter(), self.actor.instance)

    def abort(self) -> None:
        """Serve again as if never sealed (Rule 3)."""
        self._live()
        self._ended = True
        self.actor.reopen()

    def abort_if_sealed(self) -> None:
        """``abort`` unless the seal has ended already (host shutdown broke it)."""
        if not (self._ended or self._hold.broken):
            self.abort()

    def detach(self, forward: Callable[[Envelope], None], *, closing: bool = True) -> None:
        """Hand over for good (Rule 4); ``forward`` must not block and receives each envelope
        once, in order. With ``closing=False`` the Actor stays registered, forwarding, until
        ``close()``."""
        hold = self._live()
        self._ended = True
        hold.detach(self._cut, forward, self.actor.node.jobs.release)
        self.actor.keeps_record = True
        if closing:
            self.close()

    def close(self) -> None:
        """Leave the Spot's member set without a callback and close (Rule 4)."""
        actor = self.actor
        assert self._ended, "detached"
        actor.leave_membership()
        actor.begin_close(actor.node.clock.now() + actor.node.config.closing_timeout, drain=True)


async def prepare_actor_restore(
    actors: ActorCatalog[ActorActivation],
    actor_type: ActorType,
    snapshot: ActorSnapshot,
    claim: Claim,
    payload: bytes | None = None,
) -> RestoredActor:
    """A fresh activation of the snapshot's Actor, restored, reachable by nobody yet (Rule 5).
    Raises ``INTERNAL_FAILURE`` when the constructor raises, ``AdapterFailure`` when the
    adapter does."""
    adapter = actor_type.relocation.adapter
    if (adapter is None) != (payload is None):
        raise ValueError(f"{actor_type.name} takes {'a' if adapter else 'no'} payload")
    actor = ActorActivation(actors, actor_type, snapshot.actor_id, claim)
    actor.keeps_record = True
    restored = RestoredActor(actor)
    try:
        try:
            instance = actor.make_instance()
        except Exception as error:
            raise ZLinkError(
                ErrorKind.INTERNAL_FAILURE,
                f"{actor_type.cls.__qualname__}() raised {type(error).__name__}",
            ) from None
        if adapter is not None and payload is not None:
            await restore_payload(adapter(), instance, payload)
    except BaseException:
        restored.discard()
        raise
    actor.front.extend((envelope, False) for envelope in snapshot.entries)
    return restored


class RestoredActor:
    """A restored Actor: ``admit()`` at the commit, ``take(envelope)`` for what the source
    relays, ``open()`` when the relay is complete; or ``discard()`` before the commit."""

    def __init__(self, actor: ActorActivation) -> None:
        self.actor = actor
        self._opened = False
        self.joined: list[ActorJoinCompletion] | None = None
        """Set when a join moved it here (activation.py Rule 6): what ``open`` reports to it
        (the join's completion first) before it serves."""

    @property
    def declared(self) -> ActorType:
        """The Actor's declared type (its handlers)."""
        return self.actor.actor_type

    def context(self, metadata: dict[str, str], deadline: float | None) -> MessageContext:
        """The context of a message relayed to it."""
        actor = self.actor
        return MessageContext(actor.spot.spot_id, metadata, actor.actor_id, deadline)

    def admit(self, spot: Activation | None = None) -> None:
        """Ready in the catalog before the commit, a member of ``spot`` (the User Spot it moved
        with) or this host's Entry Spot, sealed: what is offered waits behind what it takes
        (Rule 5). The store record stays out of its hands until ``commit``."""
        actor = self.actor
        actor.hold = Hold()
        actor.state = ActorState.READY
        member_of = actor.catalog.spots.entry if spot is None else spot
        actor.spot = member_of
        member_of.members.add(actor)
        actor.catalog.actors[actor.actor_id] = actor
        actor.start_lane()

    def commit(self, claim: Claim) -> None:
        """The record names this host: ``claim`` is this incarnation's from now on."""
        self.actor._claim = claim
        self.actor.keeps_record = False

    def take(self, envelope: Envelope) -> None:
        """Queue a relayed message behind the snapshot's and earlier ones, holding a job permit
        of this host taken past the size if none is free (``RestoredSpot.take``, ERR-5.16)."""
        actor = self.actor
        if actor.state is not ActorState.READY:
            error = ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor.actor_id} has closed")
            fail_one(actor.node.dispatcher, envelope, error)
            return
        actor.node.jobs.acquire_over()
        actor.push_front([(envelope, True)])

    def open(self) -> None:
        """Serve: the relayed messages first, then what waited (Rule 5)."""
        if self._opened:
            return
        self._opened = True
        actor = self.actor
        if self.joined is not None:
            accepted = ActorJoinOutcome.ACCEPTED  # the incarnation here is the accepted one
            completions = [
                attrs.evolve(c, actor_ref=actor.ref) if c.outcome is accepted else c
                for c in self.joined
            ]
            actor.node.activation_nursery.start_soon(actor.arrive_joined, completions)
        elif actor.hold is not None and actor.hold.forward is None and not actor.hold.broken:
            actor.reopen()

    def discard(self, give_back: Callable[[list[Envelope]], None] | None = None) -> None:
        """Give it up before the commit: it ends without a turn and leaves the store alone; what
        was offered to it since ``admit`` goes to ``give_back`` in order (each holding its job
        permit), and what it carried from the source is dropped (the source has it)."""
        actor = self.actor
        if actor.state is ActorState.CREATING:  # never admitted
            actor.state = ActorState.CLOSED
            actor.catalog.live.discard(actor)
            actor.instance = None
            actor.closed.set()
            return
        hold = actor.hold
        if self._opened or actor.state is not ActorState.READY or hold is None:
            return
        actor.keeps_record = True
        offered, hold.held = list(hold.held), []
        actor.front.clear()
        actor.leave_membership()
        if actor.catalog.actors.get(actor.actor_id) is actor:
            del actor.catalog.actors[actor.actor_id]
        if give_back is not None:
            give_back(offered)
        else:
            for envelope in offered:
                actor.node.jobs.release()
                gone = ZLinkError(ErrorKind.UNAVAILABLE, f"the move of {actor.actor_id} ended")
                fail_one(actor.node.dispatcher, envelope, gone)
        actor.begin_close(actor.node.clock.now(), drain=False)
