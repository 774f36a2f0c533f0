"""The target's side of a unit's move: a Spot, an Actor, a User Spot with its members
(specs/relocation.md RELOC-47..RELOC-50, RELOC-60..RELOC-66; the source's side is
host/moving.py).

Longer than 400 lines: one state machine (arriving, admitted, committed, open, or dropped) of a
unit on the target, read together with the store's word that settles it when the source is
silent (Rule 6); split, each half would need the other's private state.

Rule 1: a move arrives as the framework's requests from the source, in order on the source's
connection. A host relocation first sends ``zlink.RelocateBegin``, answered once this host's
view of the source's node record says ``relocating`` (at most ``BEGIN_WAIT``), so this host has
taken in that change before any unit of the source is sealed (RELOC-74); then each unit comes
as ``zlink.RelocateIn`` (the unit and its timers), one ``zlink.RelocateChunk`` per
payload chunk when the type has an adapter (taken by the reader itself, in order), then
``zlink.RelocateCommit`` or ``zlink.RelocateAbort``, and after a commit ``zlink.RelocateOpen``.
Each is answered with ``zlink.RelocateAnswer``.
Rule 2: the unit is restored and admitted, sealed, before the commit. Once every chunk is in, a
fresh instance is made and restored (``prepare_restore``, ``prepare_actor_restore``) and put in
the catalog at once, serving nothing: whatever reaches it (a peer that read the commit before
this host heard of it, this host's own callers) waits in it, and it keeps its hands off the
store record, which is still the source's (RELOC-65). An adapter whose ``restore`` raises is
given a fresh instance and the identical payload again, up to ``RESTORE_ATTEMPTS`` times here
(RELOC-16, RELOC-19); a restore that still fails answers ``ok=False`` with the reason, and the
source keeps the unit and tries no other target. A restore that ends after its move was dropped
(the source gave up, or a newer attempt replaced it) is discarded unseen (RELOC-21, RELOC-22).
Rule 3: the commit gives it the record; the source's ``RelocateOpen`` lets it serve.
``RelocateCommit`` carries the version of the record that names this host now. What the source
relays until its ``RelocateOpen`` (the messages it held, in the order it admitted them) goes in
front of what waited (``relayed``), so a sender that learned the new owner early is not served
ahead of what it sent before the move: per-sender order holds (RELOC-60). ``RelocateOpen``
travels on the same connection after the relay, so it arrives after the last relayed message;
then the unit serves.
Rule 4: an abort, a new ``RelocateIn`` for the same id, or the store's word that the source is
gone drops what was prepared: its instance closes without a turn, what it carried is dropped
(the source has it), and what waited in it goes back to the source, in order.
Rule 5: a User Spot's members move with it. Each member's ``RelocateIn`` names the Spot, whose
own came first; each member is admitted as a member of the restored Spot; the Spot's
``RelocateCommit`` lists every member with its record's version (one batch wrote them all), and
its ``RelocateOpen`` opens them all. An abort of the Spot drops its members too. A PER_ACTOR Spot
moves as a shell first; each of its Actors then moves alone into it, as an Entry Actor does.
Rule 6: what the source does not say, the store does (RELOC-66). A unit not committed
``request_timeout`` after its restore is looked up: a record naming this host is a commit whose
word was lost; a record that is gone, or whose owner's run is no longer live, means the source
can no longer commit: the unit is dropped, and what waited in it goes on as this host's calls,
meeting the id as any caller would now (a cold activation of an Instance Spot, a missing User
Spot or Actor); anything else is read again later. A committed unit that gets no
``RelocateOpen`` within ``request_timeout`` opens by itself.
Rule 7: a join from another host moves its Actor here (ACT-27, routing/joins_in.py). The
Actor's ``RelocateIn`` names the Spot it joins, which decides before anything is restored; an
accepted Actor is admitted as a member of that Spot (so the Spot cannot close under it), and
at its opening runs the Spot's ``on_joined_actor`` and its own ``on_join_completed`` before
any message.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from functools import partial

import attrs
import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.actors.sealing import ActorSnapshot, RestoredActor, prepare_actor_restore
from zlink_trio._runtime.declarations.registry import ActorType, SpotType
from zlink_trio._runtime.declarations.relocation import AdapterFailure
from zlink_trio._runtime.declarations.system import (
    RelocateAbort,
    RelocateAnswer,
    RelocateBegin,
    RelocateChunk,
    RelocateCommit,
    RelocateIn,
    RelocateOpen,
)
from zlink_trio._runtime.ownership.authority import READY, Claim, SpotRecord
from zlink_trio._runtime.ownership.node_record import RELOCATING
from zlink_trio._runtime.routing.forward import relay
from zlink_trio._runtime.routing.joins_in import JoinAccepted, ask_join
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.routing.send_on import send_on
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._runtime.spots.sealing import RestoredSpot, SpotSnapshot, prepare_restore
from zlink_trio._runtime.spots.transfer import PayloadAssembly, timer_states_from_wire
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, NodeRid, ObjectGeneration, SpotId, SpotKind, StableTypeName
from zlink_trio.options import SpotFactoryMode

__all__ = ["RESTORE_ATTEMPTS", "Arrivals"]

RESTORE_ATTEMPTS = 3
"""How many times the target restores a unit whose adapter's restore raised (Rule 2)."""
RESTORE_PAUSE = 0.05
"""Seconds before the second restore attempt; each later one waits that much longer."""
BEGIN_WAIT = 0.1
"""Seconds a ``RelocateBegin`` waits at most for this host to see the source relocating."""

_log = logging.getLogger("zlink_trio.runtime.relocation")


Restored = RestoredSpot | RestoredActor
Restore = Callable[[Claim, bytes | None], Awaitable[Restored]]


@attrs.define
class _Arriving:
    source: NodeRid
    record: SpotRecord
    """The unit's record as the source holds it; the commit names this host in it (Rule 3)."""
    restore: Restore
    assembly: PayloadAssembly | None
    restored: Restored | None = None
    committed: bool = False
    committing: trio.Event = attrs.field(factory=trio.Event)
    """Set at the commit, or when the unit is dropped: the settling task looks again."""
    opened: trio.Event = attrs.field(factory=trio.Event)
    spot: SpotId | None = None
    """For an Actor moving with its User Spot: that Spot."""
    members: list[ActorId] = attrs.field(factory=list)
    """The Actors moving with this User Spot, in the order announced (Rule 5)."""
    joined: JoinAccepted | None = None
    """For an Actor that a join moves here: the Spot it joins and what it is told (Rule 7)."""


class Arrivals:
    """The units moving to this host, by id (Rules 1-4)."""

    def __init__(
        self,
        spots: SpotCatalog[Activation],
        actors: ActorCatalog[ActorActivation],
        remote: Remote,
        messaging: Messaging,
    ) -> None:
        self._spots = spots
        self._actors = actors
        self._remote = remote
        self._messaging = messaging
        self._node = spots.node
        self._arriving: dict[SpotId | ActorId, _Arriving] = {}

    @property
    def under_way(self) -> bool:
        """Whether any unit is moving here (the reader's cheap first check)."""
        return bool(self._arriving)

    async def on_request(
        self, source: NodeRid, target: SpotId | ActorId, message: object
    ) -> RelocateAnswer:
        """Answer one of the move's requests from ``source`` for ``target`` (Rule 1)."""
        self._node.check_admitting()
        if isinstance(message, RelocateBegin):  # Rule 1: settled before the first seal
            with trio.move_on_after(BEGIN_WAIT):
                await self._remote.sees_state(source, RELOCATING)
            return RelocateAnswer(True)
        if isinstance(message, RelocateIn):
            self.drop(target)
            if self._node.placing is not None:  # a relocating host takes nothing (RELOC-44)
                return RelocateAnswer(False, f"this host takes no new units: {self._node.placing}")
            if isinstance(target, SpotId):
                return await self._begin_spot(source, target, message)
            return await self._begin_actor(source, target, message)
        arriving = self._arriving.get(target)
        if arriving is None or arriving.source != source:
            return RelocateAnswer(False, f"no move of {target} from {source} is under way here")
        if arriving.committed and not isinstance(message, RelocateOpen):
            return RelocateAnswer(False, f"{target} was committed here already")
        if isinstance(message, RelocateChunk):
            taken = self.take_chunk(source, target, message)
            return await self.restore_assembled(target) if taken is None else taken
        if isinstance(message, RelocateOpen):
            return self.open(source, target)
        if isinstance(message, RelocateAbort):
            self.drop(target)
            return RelocateAnswer(True)
        raise ZLinkError(ErrorKind.PROTOCOL_ERROR, f"not a move's request: {message!r}")

    def take_chunk(
        self, source: NodeRid, target: SpotId | ActorId, message: RelocateChunk
    ) -> RelocateAnswer | None:
        """Add one payload chunk, from the reader itself so the chunks stay in their order
        (Rule 1); ``None`` when it was the last: ``restore_assembled`` answers then."""
        arriving = self._arriving.get(target)
        if arriving is None or arriving.source != source:
            return RelocateAnswer(False, f"no move of {target} from {source} is under way here")
        if arriving.committed:
            return RelocateAnswer(False, f"{target} was committed here already")
        if arriving.assembly is None:
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, f"{target} takes no payload")
        arriving.assembly.add(message.index, message.count, message.data)
        return None if arriving.assembly.complete else RelocateAnswer(True)

    async def restore_assembled(self, target: SpotId | ActorId) -> RelocateAnswer:
        """Restore the unit whose payload ``take_chunk`` completed."""
        arriving = self._arriving.get(target)
        if arriving is None or arriving.assembly is None or not arriving.assembly.complete:
            return RelocateAnswer(False, f"no payload of {target} is complete here")
        return await self._restore(target, arriving, arriving.assembly.payload)

    async def _begin_spot(
        self, source: NodeRid, target: SpotId, message: RelocateIn
    ) -> RelocateAnswer:
        spot_type = self._node.registry.spot_types.get(StableTypeName(message.type_name))
        if spot_type is None or int(spot_type.kind) != message.kind:
            return RelocateAnswer(False, f"no {message.type_name} Spot type is served here")
        if target in self._spots.activations:
            return RelocateAnswer(False, f"{target} is live here already")
        now = self._node.clock.now()
        snapshot = SpotSnapshot(
            target,
            spot_type.name,
            ObjectGeneration(message.generation),
            (),
            timer_states_from_wire(message.timers, now),
            now,
            message.ready,
        )

        async def restore(claim: Claim, payload: bytes | None) -> Restored:
            return await prepare_restore(self._spots, snapshot, claim, payload)

        kind = SpotKind(spot_type.kind)
        return await self._begin(source, target, message, kind, spot_type, restore)

    async def _begin_actor(
        self, source: NodeRid, target: ActorId, message: RelocateIn
    ) -> RelocateAnswer:
        actor_type = self._node.registry.actor_types.get(StableTypeName(message.type_name))
        if actor_type is None or message.kind != int(SpotKind.INVALID):
            return RelocateAnswer(False, f"no {message.type_name} Actor type is served here")
        if target in self._actors.actors:
            return RelocateAnswer(False, f"Actor {target} is live here already")
        if timer_states_from_wire(message.timers, 0.0):
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "an Actor has no timers (ACT-3)")
        generation = ObjectGeneration(message.generation)
        snapshot = ActorSnapshot(target, actor_type.name, generation, ())
        member_of = None if message.spot is None else SpotId(message.spot)
        join = None
        if message.join:  # a join moves it here (Rule 7)
            join = partial(ask_join, self._spots, self._node, target, message)
        elif member_of is not None and not self._here_per_actor(member_of):
            spot = self._arriving.get(member_of)
            if spot is None or spot.source != source or spot.committed:
                why = f"no move of {message.spot} from {source} takes members here"
                return RelocateAnswer(False, why)
            spot.members.append(target)

        async def restore(claim: Claim, payload: bytes | None) -> Restored:
            return await prepare_actor_restore(self._actors, actor_type, snapshot, claim, payload)

        return await self._begin(
            source, target, message, SpotKind.INVALID, actor_type, restore, member_of, join
        )

    async def _begin(
        self,
        source: NodeRid,
        target: SpotId | ActorId,
        message: RelocateIn,
        kind: SpotKind,
        declared: SpotType | ActorType,
        restore: Restore,
        spot: SpotId | None = None,
        join: Callable[[], Awaitable[RelocateAnswer | JoinAccepted]] | None = None,
    ) -> RelocateAnswer:
        adapter = declared.relocation.adapter
        if (adapter is None) != (message.chunks == 0):
            return RelocateAnswer(False, f"{declared.name}'s payload does not match its policy")
        if message.payload is not None and message.chunks != 1:
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "a payload inside RelocateIn is 1 chunk")
        # Until the commit the claim is the source's record as the source holds it; the commit
        # gives the version that names this host (Rule 3).
        record = SpotRecord(
            source,
            self._node.node_generation,
            ObjectGeneration(message.generation),
            kind,
            declared.name,
            READY,
            self._node.mesh,
        )
        # Chunks are cut by the source's limit; here each is bounded as any message is.
        limit = self._node.config.max_message_bytes
        assembly = None if adapter is None else PayloadAssembly(limit)
        arriving = _Arriving(source, record, restore, assembly, spot=spot)
        self._arriving[target] = arriving
        if join is not None:
            # Registered first, so that the source's abort during the join ends it (Rule 7).
            asked = await join()
            if self._arriving.get(target) is not arriving:
                why = f"the move of {target} ended during its join"
                return RelocateAnswer(False, why, kind=int(ErrorKind.UNAVAILABLE))
            if isinstance(asked, RelocateAnswer):
                del self._arriving[target]
                return asked
            arriving.joined = asked
        if assembly is None:
            return await self._restore(target, arriving, None)
        if message.payload is not None:  # all of it came inside (RELOC-71)
            assembly.add(0, 1, message.payload)
            return await self._restore(target, arriving, assembly.payload)
        return RelocateAnswer(True)

    async def _restore(
        self, target: SpotId | ActorId, arriving: _Arriving, payload: bytes | None
    ) -> RelocateAnswer:
        restored: Restored | None = None
        failure: Exception | None = None
        for attempt in range(1, RESTORE_ATTEMPTS + 1):
            try:  # each attempt into a fresh instance, from the identical payload (Rule 2)
                restored = await arriving.restore(Claim(target, arriving.record, 0), payload)
                break
            except (AdapterFailure, ZLinkError) as error:
                # A Spot's adapter failure comes as INTERNAL_FAILURE, as a constructor's does.
                failure = error
                _log.warning("restoring %s failed (attempt %d): %s", target, attempt, error)
                if isinstance(error, ZLinkError) and error.kind is not ErrorKind.INTERNAL_FAILURE:
                    break
            if attempt == RESTORE_ATTEMPTS or self._arriving.get(target) is not arriving:
                break
            await trio.sleep(RESTORE_PAUSE * attempt)
        if restored is None:
            if self._arriving.get(target) is arriving:  # not a newer attempt's (RELOC-22)
                del self._arriving[target]
            return RelocateAnswer(False, f"restoring {target} failed: {failure}")
        if self._arriving.get(target) is not arriving:  # dropped meanwhile
            restored.discard()
            return RelocateAnswer(False, f"the move of {target} ended during its restore")
        arriving.restored = restored
        # This host's own calls go to it here from now on: the first flushes the route to the
        # source, where one may still be on its way (reroute.py Rule 1).
        self._remote.forget(target)
        self._remote.forgotten(target, arriving.source)
        # Admitted at once, sealed: whoever learns of the commit before this host hears of it
        # finds the unit here and waits in it, never a missing id (Rule 2).
        alone = True  # not one of a SPOT_WIDE Spot's members, which settle with their Spot
        if isinstance(restored, RestoredActor):
            if arriving.joined is not None:
                if not arriving.joined.spot.accepting:
                    self._arriving.pop(target, None)
                    restored.discard()
                    why = f"Spot {arriving.spot} closed during the join"
                    return RelocateAnswer(False, why, kind=int(ErrorKind.NOT_FOUND))
                restored.joined = arriving.joined.completions
                restored.admit(arriving.joined.spot)
            elif arriving.spot is not None and self._here_per_actor(arriving.spot):
                restored.admit(self._spots.activations[arriving.spot])  # its shell moved first
            else:
                spot = self._arriving.get(arriving.spot) if arriving.spot is not None else None
                host = spot.restored if spot is not None else None
                restored.admit(host.activation if isinstance(host, RestoredSpot) else None)
                alone = spot is None
        else:
            restored.admit()
        if alone:
            self._node.activation_nursery.start_soon(self._settle, target, arriving)
        return RelocateAnswer(True)

    def commit(
        self, source: NodeRid, target: SpotId | ActorId, message: RelocateCommit
    ) -> RelocateAnswer:
        """``RelocateCommit`` from ``source``: the record names this host (Rule 3); taken by the
        reader itself, before the relay behind it (moves_in.py Rule 1)."""
        self._node.check_admitting()
        arriving = self._arriving.get(target)
        if arriving is None or arriving.source != source:
            return RelocateAnswer(False, f"no move of {target} from {source} is under way here")
        if arriving.committed:
            return RelocateAnswer(False, f"{target} was committed here already")
        return self._commit(target, arriving, message.version, message.members)

    def _commit(
        self,
        target: SpotId | ActorId,
        arriving: _Arriving,
        version: int,
        members: tuple[tuple[str, int], ...],
    ) -> RelocateAnswer:
        restored = arriving.restored
        if restored is None:
            return RelocateAnswer(False, f"{target} was not restored here")
        versions = dict(members)
        missing = [m for m in arriving.members if m.value not in versions or not self._ready(m)]
        if missing or len(versions) != len(arriving.members):
            # The records name this host whatever is answered: keep what came, say what did not.
            _log.error("%s committed here without its members %s", target, missing)
        self._take_claim(target, arriving, version)
        for member in arriving.members:
            if member.value in versions and self._ready(member):
                self._take_claim(member, self._arriving[member], versions[member.value])
        arriving.committing.set()
        _log.info("%s moved here from %s", target, arriving.source)
        return RelocateAnswer(True)

    def _here_per_actor(self, spot_id: SpotId) -> bool:
        """Whether ``spot_id`` is a PER_ACTOR Spot live here: its shell moved before its Actors
        (Rule 5)."""
        spot = self._spots.activations.get(spot_id)
        return spot is not None and spot.spot_type.mode is SpotFactoryMode.PER_ACTOR

    def _ready(self, member: ActorId) -> bool:
        arriving = self._arriving.get(member)
        return arriving is not None and arriving.restored is not None

    def _take_claim(self, target: SpotId | ActorId, arriving: _Arriving, version: int) -> None:
        arriving.committed = True
        record = attrs.evolve(
            arriving.record, owner=self._node.node_rid, owner_generation=self._node.node_generation
        )
        assert arriving.restored is not None  # _commit and _ready checked
        arriving.restored.commit(Claim(target, record, version))

    async def _settle(self, target: SpotId | ActorId, arriving: _Arriving) -> None:
        """Rule 6: what the source does not say, the store does."""
        wait = self._node.config.request_timeout
        while not arriving.committed and self._arriving.get(target) is arriving:
            with trio.move_on_after(wait):
                await arriving.committing.wait()
            if arriving.committed or self._arriving.get(target) is not arriving:
                break
            try:
                await self._settle_by_store(target, arriving)
            except ZLinkError as error:
                _log.info("the store cannot say yet whether %s moved here: %s", target, error)
        if not arriving.committed:
            return
        with trio.move_on_after(wait):
            await arriving.opened.wait()
            return
        if self._arriving.get(target) is arriving:
            _log.warning("%s opens without its source %s's word", target, arriving.source)
            self._open(target, arriving)

    async def _settle_by_store(self, target: SpotId | ActorId, arriving: _Arriving) -> None:
        authority = self._node.authority
        claim = await authority.read_claim(target)
        if claim is not None and claim.record.owner == self._node.node_rid:
            members = []
            for member in arriving.members:
                found = await authority.read_claim(member)
                if found is not None and found.record.owner == self._node.node_rid:
                    members.append((member.value, found.version))
            _log.warning(
                "%s was committed here without its source %s's word", target, arriving.source
            )
            self._commit(target, arriving, claim.version, tuple(members))
        elif claim is None or await authority.is_stale(claim.record):
            # The source's run is gone, or the id was given up: the source can no longer commit
            # (its write is conditional on the version a peer's reclaim changes). What waited
            # here goes on as new calls, which meet the id as any caller would now.
            _log.warning("%s will not move here: its source %s is gone", target, arriving.source)
            self.drop(target, reroute=True)

    def relayed(self, source: NodeRid, target: SpotId | ActorId) -> Restored | None:
        """The committed unit that takes what ``source`` sends to ``target`` in front of its
        mailbox, until the source's ``RelocateOpen`` (Rule 3); else ``None``."""
        arriving = self._arriving.get(target)
        if arriving is None or not arriving.committed or arriving.source != source:
            return None
        return arriving.restored

    def open(self, source: NodeRid, target: SpotId | ActorId) -> RelocateAnswer:
        """``RelocateOpen`` from ``source``: the unit serves (Rule 3)."""
        arriving = self._arriving.get(target)
        if arriving is None or arriving.source != source or not arriving.committed:
            return RelocateAnswer(False, f"no move of {target} from {source} awaits its opening")
        self._open(target, arriving)
        return RelocateAnswer(True)

    def _open(self, target: SpotId | ActorId, arriving: _Arriving) -> None:
        del self._arriving[target]
        assert arriving.restored is not None  # committed only once restored
        arriving.restored.open()
        arriving.opened.set()
        for member in arriving.members:  # a User Spot's members open with it (Rule 5)
            joined = self._arriving.pop(member, None)
            if joined is not None and joined.restored is not None and joined.committed:
                joined.restored.open()

    def drop(self, target: SpotId | ActorId, *, reroute: bool = False) -> None:
        """Rule 4: forget a prepared unit that will not open here; what waited in it goes back
        to the source, or, ``reroute``, on as new calls from this host (Rule 6)."""
        arriving = self._arriving.get(target)
        if arriving is None or arriving.committed:
            return  # committed: the unit is this host's now
        del self._arriving[target]
        arriving.committing.set()
        for member in arriving.members:  # a User Spot's members are dropped with it (Rule 5)
            self.drop(member, reroute=reroute)
        if arriving.restored is not None:
            instance = (
                arriving.record.type_name if arriving.record.kind is SpotKind.INSTANCE else None
            )
            if reroute or self._remote.peer_record(arriving.source) is None:
                # The source is gone: on as this host's calls (Rule 6).
                later = partial(send_on, self._messaging, target, instance)
            else:  # back to the owner, in order (Rule 4)
                later = partial(relay, self._remote, self._node, target, instance, arriving.source)
            arriving.restored.discard(partial(self._node.activation_nursery.start_soon, later))
