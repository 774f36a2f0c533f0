"""The values stored at an id's authority record and generation counter (authority.py Rules 1
and 2; the key layout is in authority.py's docstring)."""

from __future__ import annotations

from collections.abc import Iterable

import attrs
import cbor2

from zlink_trio._integration.store import Delete, IfVersion, Put, Record
from zlink_trio.ids import (
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    SpotKind,
    StableTypeName,
)

__all__ = ["ActorLeftovers", "GenerationCounter", "SpotRecord", "actor_leftovers"]


@attrs.frozen
class SpotRecord:
    """What the authority record of an id says."""

    owner: NodeRid
    owner_generation: NodeGeneration
    generation: ObjectGeneration
    kind: SpotKind
    type_name: StableTypeName
    state: str
    mesh: MeshName | None = None
    """The owner's mesh (Actor records live outside every mesh prefix, so they say it)."""

    def encode(self) -> bytes:
        """The CBOR bytes stored at the record's key."""
        return cbor2.dumps(
            {
                "owner": self.owner.value,
                "owner_generation": self.owner_generation.value,
                "generation": self.generation.value,
                "kind": int(self.kind),
                "type": self.type_name.value,
                "state": self.state,
                **({} if self.mesh is None else {"mesh": self.mesh.value}),
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> SpotRecord:
        """Read what :meth:`encode` wrote."""
        data = cbor2.loads(raw)
        return cls(
            NodeRid(data["owner"]),
            NodeGeneration(data["owner_generation"]),
            ObjectGeneration(data["generation"]),
            SpotKind(data["kind"]),
            StableTypeName(data["type"]),
            data["state"],
            MeshName(data["mesh"]) if "mesh" in data else None,
        )


@attrs.frozen
class GenerationCounter:
    """The value at a generation counter's key (Rule 2): the last generation issued for the id
    and, for an Actor id, the set of meshes that ever claimed it.

    ``meshes`` is ``None`` for the plain CBOR int form: every Spot counter (its key names its
    mesh) and an Actor counter written before counters said their meshes (unknown meshes).
    """

    last: int
    meshes: frozenset[MeshName] | None = None

    def encode(self) -> bytes:
        """The CBOR bytes stored at the counter's key."""
        if self.meshes is None:
            return cbor2.dumps(self.last)
        return cbor2.dumps({"g": self.last, "meshes": sorted(m.value for m in self.meshes)})

    @classmethod
    def decode(cls, raw: bytes) -> GenerationCounter:
        """Read either form; ``ValueError`` for anything else."""
        data = cbor2.loads(raw)
        meshes: frozenset[MeshName] | None = None
        if isinstance(data, dict):
            names = data.get("meshes")
            if not isinstance(names, list) or not all(type(name) is str for name in names):
                raise ValueError(f"a generation counter's meshes are a list of names: {names!r}")
            meshes = frozenset(MeshName(name) for name in names)
            data = data.get("g")
        if type(data) is not int or data < 0:
            raise ValueError(f"a generation counter holds a generation, not {data!r}")
        return cls(data, meshes)

    def claimed_in(self, mesh: MeshName) -> GenerationCounter:
        """The counter after one more claim from ``mesh``: the next generation, and ``mesh``
        among the meshes unless they are unknown (a plain counter stays plain)."""
        meshes = None if self.meshes is None else self.meshes | {mesh}
        return GenerationCounter(self.last + 1, meshes)


Change = tuple[IfVersion, Put | Delete]
"""One conditional write: the version it needs, and the put or delete."""


@attrs.frozen
class ActorLeftovers:
    """What retiring some meshes changes among the Actors' keys, each on the version read."""

    records: list[Change]
    """Deletions of the Actor records that name one of the meshes."""
    counters_deleted: list[Change]
    """Deletions of the counters only those meshes used."""
    counters_rewritten: list[Change]
    """Rewrites, without those meshes, of the counters other meshes used too."""


def actor_leftovers(
    records: Iterable[Record], counters: Iterable[Record], meshes: frozenset[MeshName]
) -> ActorLeftovers:
    """The Actor records (``actor/``) and generation counters (``actor-generation/``) of
    ``meshes``, for ``store retire`` and the testing kit's clearing: a counter of unknown meshes
    (the plain int form), or a record or counter that does not decode, is left alone."""
    deleted_records: list[Change] = []
    for record in records:
        try:
            owner = SpotRecord.decode(record.value)
        except Exception:  # a record of another shape names no mesh of ours
            continue
        if owner.mesh in meshes:
            deleted_records.append((IfVersion(record.key, record.version), Delete(record.key)))
    deleted: list[Change] = []
    rewritten: list[Change] = []
    for record in counters:
        try:
            counter = GenerationCounter.decode(record.value)
        except Exception:  # cbor2 and MeshName raise several types; what we cannot read stays
            continue
        if counter.meshes is None or not counter.meshes & meshes:
            continue
        condition = IfVersion(record.key, record.version)
        others = counter.meshes - meshes
        if others:
            kept = GenerationCounter(counter.last, others)
            rewritten.append((condition, Put(record.key, kept.encode())))
        else:
            deleted.append((condition, Delete(record.key)))
    return ActorLeftovers(deleted_records, deleted, rewritten)
