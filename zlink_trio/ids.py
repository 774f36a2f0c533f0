"""Identifiers and the Spot value types (specs/identifiers.md, ID-*).

Rule 1: one dedicated type per identifier. Values with different lifetimes (mesh name, node RID,
node generation, channel name, object id, object generation) never share a type, so passing one
where another belongs fails type checking, and two kinds of id never compare equal (seed 004 §6).
Rule 2: validated when made. A bad value raises ``ValueError`` and a wrong type ``TypeError``
at the construction site, so an invalid id never travels.
Rule 3: one canonical form. Text ids keep the caller's exact string: comparison is
case-sensitive and no Unicode normalisation or case folding is applied (seed 000).
"""

from __future__ import annotations

import enum
import secrets
from typing import Any

import attrs

__all__ = [
    "ActorId",
    "ActorRef",
    "ChannelName",
    "MeshName",
    "NodeGeneration",
    "NodeRid",
    "ObjectGeneration",
    "SpotCloseReason",
    "SpotId",
    "SpotKind",
    "SpotRef",
    "StableTypeName",
]

MAX_ID_BYTES = 255
"""Largest UTF-8 size of a text identifier, in bytes (seed 000)."""
MAX_OBJECT_GENERATION = 2**63 - 1
"""Largest object generation: the signed 64-bit maximum shared by every ZLink language."""
_U64_MAX = 2**64 - 1


def _check_text(instance: object, _attribute: object, value: Any) -> None:
    kind = type(instance).__name__
    if type(value) is not str:
        raise TypeError(f"{kind} takes a str, not {type(value).__name__}")
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError:
        raise ValueError(f"{kind} must be valid UTF-8; {value!r} holds a lone surrogate") from None
    if not 1 <= size <= MAX_ID_BYTES:
        raise ValueError(f"{kind} must be 1..{MAX_ID_BYTES} bytes of UTF-8, got {size} bytes")


def _check_int(instance: object, low: int, high: int, value: object) -> int:
    kind = type(instance).__name__
    if type(value) is not int:
        raise TypeError(f"{kind} takes an int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{kind} must be in {low}..{high}, got {value}")
    return value


@attrs.frozen(repr=False)
class _TextId:
    """A UTF-8 identifier of 1..255 bytes, compared exactly."""

    value: str = attrs.field(validator=_check_text)

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.value!r})"


@attrs.frozen(repr=False)
class MeshName(_TextId):
    """The name of a RouteMesh, fixed exactly as written in the configuration."""


@attrs.frozen(repr=False)
class NodeRid(_TextId):
    """A node's routing identity, valid for that node's lifecycle."""


@attrs.frozen(repr=False)
class ChannelName(_TextId):
    """A channel name; meaningful only inside one process."""


@attrs.frozen(repr=False)
class SpotId(_TextId):
    """The global id of a Spot, unique across the Location Store, the same wherever it runs."""


@attrs.frozen(repr=False)
class ActorId(_TextId):
    """The global id of an Actor."""


@attrs.frozen(repr=False)
class StableTypeName(_TextId):
    """The stable name a message, Spot or Actor type is registered under; it travels on the wire
    and in the store, so it must not change when the Python class is renamed."""


@attrs.frozen(repr=False)
class NodeGeneration:
    """An opaque, non-zero token that tells one run of a node from every other run.

    Make a fresh one with :meth:`new` on every start. Only equality means anything: a generation
    is not ordered and its number says nothing about age (DESIGN §6).
    """

    value: int = attrs.field()

    @value.validator
    def _check(self, _attribute: object, value: object) -> None:
        _check_int(self, 1, _U64_MAX, value)

    @classmethod
    def new(cls) -> NodeGeneration:
        """A random generation, distinct from earlier runs with overwhelming probability."""
        while True:
            token = secrets.randbits(64)
            if token:
                return cls(token)

    def __repr__(self) -> str:
        return f"NodeGeneration(0x{self.value:016x})"


@attrs.frozen(repr=False, order=True)
class ObjectGeneration:
    """Which incarnation of a Spot or Actor id this is: 1..2**63-1, growing on each re-creation.

    Its JSON form is a decimal string, so that no JSON reader rounds it (seed 000).
    """

    value: int = attrs.field()

    @value.validator
    def _check(self, _attribute: object, value: object) -> None:
        _check_int(self, 1, MAX_OBJECT_GENERATION, value)

    def to_json(self) -> str:
        """The canonical decimal string, e.g. ``"42"``."""
        return str(self.value)

    @classmethod
    def from_json(cls, text: object) -> ObjectGeneration:
        """Parse the canonical decimal form: digits only, no sign, no leading zero."""
        if type(text) is not str:
            raise TypeError(f"ObjectGeneration JSON form is a str, not {type(text).__name__}")
        if not (text.isascii() and text.isdigit()) or (text[0] == "0"):
            raise ValueError(f"ObjectGeneration JSON form must be a canonical decimal: {text!r}")
        return cls(int(text))

    def __repr__(self) -> str:
        return f"ObjectGeneration({self.value})"


class SpotKind(enum.IntEnum):
    """The kind of a Spot; the numbers are shared by every ZLink language (seed 000)."""

    INVALID = 0
    ENTRY = 1
    USER = 2
    INSTANCE = 3


class SpotCloseReason(enum.IntEnum):
    """Why a Spot activation is closing; given to ``on_closing`` (seed 000)."""

    EXPLICIT_CLOSE = 0
    HOST_SHUTDOWN = 1
    RELOCATION_OUT = 2
    IDLE_EVICTED = 3


def _spot_id(value: SpotId | str) -> SpotId:
    return value if isinstance(value, SpotId) else SpotId(value)


def _mesh_name(value: MeshName | str) -> MeshName:
    return value if isinstance(value, MeshName) else MeshName(value)


def _node_rid(value: NodeRid | str) -> NodeRid:
    return value if isinstance(value, NodeRid) else NodeRid(value)


def _object_generation(value: ObjectGeneration | int) -> ObjectGeneration:
    return value if isinstance(value, ObjectGeneration) else ObjectGeneration(value)


@attrs.frozen
class SpotRef:
    """An immutable snapshot naming one incarnation of a User Spot, used to close exactly it.

    Plain ``str``/``int`` arguments are converted once, here, to their identifier types.
    """

    spot_id: SpotId = attrs.field(converter=_spot_id)
    object_generation: ObjectGeneration = attrs.field(converter=_object_generation)
    mesh_name: MeshName = attrs.field(converter=_mesh_name)
    node_rid: NodeRid = attrs.field(converter=_node_rid)

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dict; the generation is a decimal string."""
        return {
            "spot_id": self.spot_id.value,
            "object_generation": self.object_generation.to_json(),
            "mesh_name": self.mesh_name.value,
            "node_rid": self.node_rid.value,
        }

    @classmethod
    def from_json(cls, data: Any) -> SpotRef:
        """Read the form :meth:`to_json` writes; anything else raises ValueError/TypeError."""
        if not isinstance(data, dict):
            raise TypeError(f"SpotRef JSON form is an object, not {type(data).__name__}")
        expected = {"spot_id", "object_generation", "mesh_name", "node_rid"}
        if set(data) != expected:
            raise ValueError(f"SpotRef JSON form needs exactly the keys {sorted(expected)}")
        return cls(
            SpotId(data["spot_id"]),
            ObjectGeneration.from_json(data["object_generation"]),
            MeshName(data["mesh_name"]),
            NodeRid(data["node_rid"]),
        )


def _actor_id(value: ActorId | str) -> ActorId:
    return value if isinstance(value, ActorId) else ActorId(value)


@attrs.frozen
class ActorRef:
    """An immutable snapshot of where one Actor incarnation lives: used to destroy exactly it,
    never as a message target (Actors are addressed by ``ActorId``)."""

    actor_id: ActorId = attrs.field(converter=_actor_id)
    object_generation: ObjectGeneration = attrs.field(converter=_object_generation)
    mesh_name: MeshName = attrs.field(converter=_mesh_name)
    node_rid: NodeRid = attrs.field(converter=_node_rid)

    def to_json(self) -> dict[str, str]:
        """A JSON-ready dict; the generation is a decimal string."""
        return {
            "actor_id": self.actor_id.value,
            "object_generation": self.object_generation.to_json(),
            "mesh_name": self.mesh_name.value,
            "node_rid": self.node_rid.value,
        }

    @classmethod
    def from_json(cls, data: Any) -> ActorRef:
        """Read the form :meth:`to_json` writes; anything else raises ValueError/TypeError."""
        if not isinstance(data, dict):
            raise TypeError(f"ActorRef JSON form is an object, not {type(data).__name__}")
        expected = {"actor_id", "object_generation", "mesh_name", "node_rid"}
        if set(data) != expected:
            raise ValueError(f"ActorRef JSON form needs exactly the keys {sorted(expected)}")
        return cls(
            ActorId(data["actor_id"]),
            ObjectGeneration.from_json(data["object_generation"]),
            MeshName(data["mesh_name"]),
            NodeRid(data["node_rid"]),
        )
