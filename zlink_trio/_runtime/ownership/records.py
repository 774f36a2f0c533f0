"""The values stored at an id's authority record and generation counter (authority.py Rules 1
and 2; the key layout is in authority.py's docstring)."""

from __future__ import annotations

import attrs
import cbor2

from zlink_trio.ids import (
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    SpotKind,
    StableTypeName,
)

__all__ = ["GenerationCounter", "SpotRecord"]


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
