"""Spot authority and object generations in the Location Store (specs/spots.md SPOT-9..SPOT-11,
SPOT-15; specs/identifiers.md ID-6.12; specs/decisions.md DEC-18).

Key layout, all under one prefix per mesh so meshes sharing a database never meet:

    m/<mesh>/spot/<spot id>         the authority record of the live incarnation (CBOR map):
                                    owner node RID, owner node generation, object generation,
                                    Spot kind, stable type, state ("activating" | "ready")
    m/<mesh>/generation/<spot id>   the last object generation issued for the id (CBOR int);
                                    durable, it outlives the incarnation
    actor/<actor id>                an Actor's authority record; Actor ids are unique across
    actor-generation/<actor id>     the whole store, not per mesh (ACT-2), so these keys carry
                                    no mesh prefix; the record's kind is ``INVALID`` (not a Spot)
                                    and its mesh is the mesh of its owner; the counter is a CBOR
                                    map {"g": last generation, "meshes": [every mesh that ever
                                    claimed the id]} (a plain CBOR int: written before counters
                                    said their meshes, so its meshes are unknown; DEC-21)

Rule 1: one winner per id. A claim writes the authority record with ``IfMissing`` and bumps the
generation counter (``IfMissing`` or ``IfVersion`` on the counter) in the same batch: of two
racing claimers exactly one commits, and the loser sees the winner's record (SPOT-15). A claim
writes first and reads never: its first batch guesses (no record, and the counter this node wrote
last for the id, else none), and a wrong guess comes back as a ``Conflict`` carrying the records
at both keys (STORE-41), on which the next batch is built. A new id costs one round trip, an id
created again on the same node one, elsewhere two.
Rule 2: generations only grow. The counter is never deleted while a mesh that claimed the id
lives, so an id created again after its incarnation ended gets a larger generation than every
earlier one (ID-6.12). An Actor's claim adds its own mesh to the counter's meshes in the same
batch, so ``store retire`` of one mesh can tell the counters only that mesh used (deleted) from
those another mesh still relies on (kept without the retired mesh); a counter of unknown meshes
stays one, so retire keeps it for good (``GenerationCounter``; DEC-21, RETIRE-2).
Rule 3: changes are conditional on the version the owner wrote, so a stale owner can never
overwrite or delete a newer incarnation's record.
Rule 4: a store call that was cancelled has an unknown outcome (DEC-17); the runtime settles it by
reading the record again (``forget_if_ours``), never by assuming.
Rule 5: a dead owner's record can be taken over. Once ``check_liveness`` is on (the host's
membership runs), a claim that finds a record whose owner run has no live node record in the
owner's mesh (``m/<mesh>/node/<rid>`` with that generation) replaces it, conditional on the
version it read, with the next generation: a Spot or Actor of a killed host is activated again
elsewhere and its generation only grows (GLOBAL rules in specs/global.md).
Rule 6: a dead owner's records that nobody took over are reclaimed. ``reclaim(owner)`` scans the
mesh's Spot records and the Actor records of the mesh and deletes, conditional on the version it
read, each one held by a run of ``owner`` that is not live; a claim racing it wins or loses by the
same version, so nothing live is ever deleted (GLOBAL-13). ``reclaim(None)`` is the sweep: the
same for every owner run that is not live.
"""

from __future__ import annotations

import logging
from collections import OrderedDict
from datetime import UTC, datetime

import attrs
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Delete,
    Expired,
    Found,
    IfMissing,
    IfVersion,
    LocationStore,
    Missing,
    Put,
)
from zlink_trio._runtime.ownership.batches import RecordBatcher
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.ownership.records import GenerationCounter, SpotRecord
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import (
    ActorId,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    SpotId,
    SpotKind,
    StableTypeName,
)

__all__ = ["Claim", "GenerationCounter", "Held", "SpotAuthority", "SpotRecord"]

_log = logging.getLogger("zlink_trio.runtime.authority")

_RECLAIM_PAGE = 500
"""Records per scan page while reclaiming."""
_RECLAIM_RESTARTS = 3
"""Scans restarted at most after an expired snapshot, per prefix and reclaim."""

_REREAD_FIRST = 0.05
_REREAD_MOST = 1.0
"""Seconds between reads of a record whose hand-over has an unknown outcome, doubling."""
_REMEMBERED_COUNTERS = 4096
"""Generation counters a node keeps as its first guess for a claim (Rule 1)."""
_NO_CLOCK = datetime.min.replace(tzinfo=UTC)
"""The clock of a guess: no statement has observed it."""

ACTIVATING = "activating"
READY = "ready"


def _expect(key: str, seen: Missing | Found) -> IfMissing | IfVersion:
    """The condition that holds while ``key`` is as it was seen."""
    return IfVersion(key, seen.version) if isinstance(seen, Found) else IfMissing(key)


@attrs.frozen
class Claim:
    """This node holds the id's authority at ``generation``; ``version`` is the record's."""

    spot_id: SpotId | ActorId
    """The Spot or Actor whose authority this is."""
    record: SpotRecord
    version: int


@attrs.frozen
class Held:
    """Another incarnation already holds the id."""

    record: SpotRecord


class SpotAuthority:
    """This node's reads and conditional writes of Spot authority records in one mesh."""

    def __init__(
        self,
        store: LocationStore,
        mesh: MeshName,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
    ) -> None:
        self._store = store
        self._prefix = f"m/{mesh.value}/"
        self._node_rid = node_rid
        self._node_generation = node_generation
        self._mesh = mesh
        self.check_liveness = False
        """Take over records of owners that are not live; on once membership runs (Rule 5)."""
        self.batches = RecordBatcher(store)
        """Releases in conditional batches; its flusher runs in the host's task tree."""
        self._counters: OrderedDict[str, Found] = OrderedDict()
        """The generation counters this node wrote last, newest last (Rule 1's first guess)."""

    def _record_key(self, target: SpotId | ActorId) -> str:
        if isinstance(target, ActorId):
            return f"actor/{target.value}"
        return f"{self._prefix}spot/{target.value}"

    def _generation_key(self, target: SpotId | ActorId) -> str:
        if isinstance(target, ActorId):
            return f"actor-generation/{target.value}"
        return f"{self._prefix}generation/{target.value}"

    async def read(self, spot_id: SpotId | ActorId) -> SpotRecord | None:
        """The live authority record of ``spot_id``, or ``None``."""
        found = await self._store.read(self._record_key(spot_id))
        return SpotRecord.decode(found.value) if isinstance(found, Found) else None

    async def read_live(self, spot_id: SpotId | ActorId) -> SpotRecord | None:
        """The Ready authority record of ``spot_id`` whose owner run is live, or ``None``."""
        record = await self.read(spot_id)
        if record is None or record.state != READY or await self.is_stale(record):
            return None
        return record

    async def read_claim(self, spot_id: SpotId | ActorId) -> Claim | None:
        """The authority record of ``spot_id`` with its version, or ``None``."""
        found = await self._store.read(self._record_key(spot_id))
        if not isinstance(found, Found):
            return None
        return Claim(spot_id, SpotRecord.decode(found.value), found.version)

    async def claim(
        self, spot_id: SpotId | ActorId, kind: SpotKind, type_name: StableTypeName
    ) -> Claim | Held:
        """Take the id's authority for this node with the next generation, or report who holds
        it (Rule 1). Store failures raise ``ZLinkError(UNAVAILABLE)`` from the store."""
        record_key = self._record_key(spot_id)
        generation_key = self._generation_key(spot_id)
        held: Missing | Found = Missing(_NO_CLOCK)
        counted = self._counters.get(generation_key) or Missing(_NO_CLOCK)
        while True:
            if isinstance(held, Found):
                holder = SpotRecord.decode(held.value)
                if not await self._is_stale(holder):
                    return Held(holder)
                _log.info("taking over %s from %s, which is not live", spot_id, holder.owner)
            if isinstance(counted, Found):
                counter = GenerationCounter.decode(counted.value)
            else:
                # A Spot's counter stays a plain int (its key names the mesh); an Actor's says
                # its meshes from the first claim on (Rule 2).
                actor = isinstance(spot_id, ActorId)
                counter = GenerationCounter(0, frozenset() if actor else None)
            counter = counter.claimed_in(self._mesh)
            record = SpotRecord(
                self._node_rid,
                self._node_generation,
                ObjectGeneration(counter.last),
                kind,
                type_name,
                ACTIVATING,
                self._mesh,
            )
            batch = Batch(
                [_expect(record_key, held), _expect(generation_key, counted)],
                [Put(record_key, record.encode()), Put(generation_key, counter.encode())],
            )
            written = await self.batches.write(batch)  # with other claims (batches.py)
            if isinstance(written, Applied):
                record_version, counter_version = written.versions
                self._remember(
                    generation_key,
                    Found(counter.encode(), counter_version, None, written.store_now),
                )
                return Claim(spot_id, record, record_version)
            # The guess was wrong or someone else wrote first: decide on what is there now.
            held, counted = written.current
            self._counters.pop(generation_key, None)

    def _remember(self, key: str, counter: Found) -> None:
        """Keep the counter this node last wrote, the best guess for the id's next claim."""
        self._counters[key] = counter
        self._counters.move_to_end(key)
        if len(self._counters) > _REMEMBERED_COUNTERS:
            self._counters.popitem(last=False)

    async def is_stale(self, record: SpotRecord) -> bool:
        """Whether ``record``'s owner run has no live node record (Rule 5)."""
        return await self._is_stale(record)

    async def _is_stale(self, record: SpotRecord) -> bool:
        if not self.check_liveness:
            return False
        if record.owner == self._node_rid and record.owner_generation == self._node_generation:
            return False
        mesh = self._mesh if record.mesh is None else record.mesh
        found = await self._store.read(f"m/{mesh.value}/node/{record.owner.value}")
        if not isinstance(found, Found):
            return True
        try:
            node = NodeRecord.decode(found.value)
        except ValueError:
            return True
        return node.generation != record.owner_generation

    async def mark_ready(self, claim: Claim) -> Claim:
        """Record that the claimed incarnation is Ready; ``None`` never: a lost record raises."""
        ready = attrs.evolve(claim.record, state=READY)
        key = self._record_key(claim.spot_id)
        # Coalesced with the Ready marks of other new incarnations into one batch (batches.py).
        version = await self.batches.put(key, claim.version, ready.encode())
        if version is None:
            raise LookupError(f"the authority record of {claim.spot_id} changed under its owner")
        return Claim(claim.spot_id, ready, version)

    async def hand_over(
        self,
        claims: list[Claim],
        owner: NodeRid,
        owner_generation: NodeGeneration,
        *,
        quiet: bool = False,
    ) -> list[Claim] | None:
        """Give the ids' authority to another node run, keeping each object generation (a
        relocation's commit), in one conditional batch: every record this node holds at its
        claim's version now names ``owner``; ``None`` when any was no longer ours, and then none
        changed (Rule 3). ``quiet``: the batch notifies nothing, the mover announces the ids
        once the new owner serves them (``announce``, RELOC-76). An unknown outcome is settled
        by reading the records, as often as it takes (Rule 4): neither side may serve the units
        while it is unknown, so this returns only once it is known (or is cancelled)."""
        moved = [
            attrs.evolve(claim.record, owner=owner, owner_generation=owner_generation, state=READY)
            for claim in claims
        ]
        keys = [self._record_key(claim.spot_id) for claim in claims]
        batch = Batch(
            [IfVersion(key, claim.version) for key, claim in zip(keys, claims, strict=True)],
            [Put(key, record.encode()) for key, record in zip(keys, moved, strict=True)],
            notify=not quiet,
        )
        try:
            batches = self.batches
            # Alone on its host it waits for no other move (batches.py Rule 7).
            written = await (batches.write_now(batch) if quiet else batches.write(batch))
        except ZLinkError as error:
            _log.warning("the hand-over of %s has an unknown outcome: %s", keys[0], error)
            pause = _REREAD_FIRST
            while True:
                try:
                    found = await self._store.read(keys[0])
                    break
                except ZLinkError:
                    await trio.sleep(pause)
                    pause = min(pause * 2, _REREAD_MOST)
            # One batch: the first record tells what became of all of them.
            if isinstance(found, Found) and SpotRecord.decode(found.value) == moved[0]:
                return await self._read_claims(claims, moved)
            return None  # the records are as they were, or not ours: nothing was handed over
        if not isinstance(written, Applied):
            return None
        return [
            Claim(claim.spot_id, record, version)
            for claim, record, version in zip(claims, moved, written.versions, strict=True)
        ]

    async def announce(self, ids: list[SpotId | ActorId]) -> None:
        """Tell every host that the ids' records changed, as a notifying write would have
        (STORE-50): after a quiet ``hand_over``; shared with other moves (batches.py Rule 6)."""
        await self.batches.announce([self._record_key(spot_id) for spot_id in ids])

    async def _read_claims(self, claims: list[Claim], moved: list[SpotRecord]) -> list[Claim]:
        """The claims a hand-over that did commit wrote, read back for their versions."""
        result: list[Claim] = []
        for claim, record in zip(claims, moved, strict=True):
            pause = _REREAD_FIRST
            while True:
                try:
                    found = await self._store.read(self._record_key(claim.spot_id))
                    break
                except ZLinkError:
                    await trio.sleep(pause)
                    pause = min(pause * 2, _REREAD_MOST)
            # Nothing but the new owner writes these records now; a missing one was reclaimed
            # or released by it, and its version no longer matters to the source.
            version = found.version if isinstance(found, Found) else 0
            result.append(Claim(claim.spot_id, record, version))
        return result

    async def release(self, claim: Claim) -> bool:
        """Delete the record this node wrote; ``False`` when it was no longer ours (Rule 3)."""
        key = self._record_key(claim.spot_id)
        # Coalesced with the releases of other incarnations into one batch (batches.py).
        if not await self.batches.release(key, claim.version):
            _log.warning("authority record of %s was not ours any more", claim.spot_id)
            return False
        return True

    async def reclaim(self, owner: NodeRid | None) -> int:
        """Delete the records of this mesh's Spots and Actors that a run of ``owner`` held (of
        any owner but this run, for ``None``: the sweep), where that run is not live (Rule 6);
        returns how many were deleted."""
        stale: dict[tuple[NodeRid, NodeGeneration], bool] = {}
        removed = 0
        for prefix in (f"{self._prefix}spot/", "actor/"):
            cursor: str | None = None
            restarts = 0
            while True:
                page = await self._store.scan(prefix, _RECLAIM_PAGE, cursor)
                if isinstance(page, Expired):
                    restarts += 1
                    if restarts > _RECLAIM_RESTARTS:
                        break  # the next PeerDown or sweep tries again
                    cursor = None
                    continue
                doomed: list[tuple[str, int]] = []
                for record in page.records:
                    try:
                        holder = SpotRecord.decode(record.value)
                    except (ValueError, KeyError, TypeError):
                        continue
                    if owner is not None and holder.owner != owner:
                        continue
                    if holder.mesh not in (None, self._mesh):
                        continue
                    run = (holder.owner, holder.owner_generation)
                    if run not in stale:
                        stale[run] = await self._is_stale(holder)
                    if stale[run]:
                        doomed.append((record.key, record.version))
                for key, version in doomed:
                    # Each on the version read, so a claim racing it decides by the same
                    # version; a record changed meanwhile keeps none of the others (batches.py
                    # settles a conflicting batch record by record).
                    removed += await self.batches.release(key, version)
                if page.cursor is None:
                    break
                cursor = page.cursor
        return removed

    async def forget_if_ours(self, spot_id: SpotId | ActorId) -> None:
        """After a claim whose outcome is unknown: delete the record if this node run wrote it."""
        key = self._record_key(spot_id)
        found = await self._store.read(key)
        if not isinstance(found, Found):
            return
        record = SpotRecord.decode(found.value)
        if record.owner == self._node_rid and record.owner_generation == self._node_generation:
            await self._store.write(Batch([IfVersion(key, found.version)], [Delete(key)]))
