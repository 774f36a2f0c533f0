"""The node record a run publishes, and the peer events membership reports (specs/mesh.md
MESH-1, MESH-2, MESH-7, MESH-13, MESH-16, MESH-24).

Key layout, under the mesh's prefix like the authority records:

    m/<mesh>/node/<node rid>    the node record of the run that holds the RID (CBOR map):
                                rid, generation, application and completion endpoints, state
                                ("serving" | "draining"), stable Spot type names, load,
                                the run's application version, the run's CURVE key and its
                                message limit (when it has them)

This module owns the value and its bytes: ``NodeRecord`` checks every field when made
(MESH-16) and decodes only a CBOR map with every required field, ignoring keys it does not
know (MESH-2); the CURVE key and the message limit may be absent (a run without transport
security, a run of an older version), and a record without an application version is one of
version "0" (MESH-24). ``PeerUp``, ``PeerChanged`` and ``PeerDown`` are what
subscribers are told; a RID whose record names another generation is a ``PeerDown`` then a
``PeerUp``, never a change (MESH-7). The small pure helpers here are shared by the own
record's lease (``lease``) and the watch over the peers (``peer_watch``); this module imports
neither.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import attrs
import cbor2

from zlink_trio._wire.ids import is_z85_key
from zlink_trio._wire.versions import parse_application_version
from zlink_trio.ids import NodeGeneration, NodeRid, StableTypeName

__all__ = [
    "DRAINING",
    "EXPIRY_MARGIN",
    "MAX_LOAD",
    "NodeRecord",
    "PeerChanged",
    "PeerDown",
    "PeerEvent",
    "PeerUp",
    "RELOCATED",
    "RELOCATING",
    "SERVING",
    "STATES",
    "decode_or_none",
    "describe_holder",
]

SERVING = "serving"
"""The node takes new placements."""
DRAINING = "draining"
"""The node is leaving: it keeps serving what it has but takes no new placements."""
RELOCATING = "relocating"
"""The node moves what it runs to other nodes and takes no new placements (RELOC-43)."""
RELOCATED = "relocated"
"""The node has moved everything away; it takes no new placements (RELOC-43)."""
STATES = frozenset({SERVING, DRAINING, RELOCATING, RELOCATED})

MAX_LOAD = 2**63 - 1
EXPIRY_MARGIN = 0.05
"""Seconds past an observed deadline (a silence that may have run out) before re-reading."""
_FIELDS = frozenset({"rid", "generation", "application", "completion", "state", "types", "load"})


# --- the node record ---------------------------------------------------------------------------


def _type_names(value: Iterable[Any]) -> tuple[StableTypeName, ...]:
    if isinstance(value, str | bytes):
        raise TypeError("types takes an iterable of StableTypeName, not a single string")
    return tuple(value)


def _check_types(_instance: object, _attribute: object, value: tuple[Any, ...]) -> None:
    for item in value:
        if not isinstance(item, StableTypeName):
            raise TypeError(f"types holds StableTypeName values, not {type(item).__name__}")
    if len(set(value)) != len(value):
        raise ValueError("types names the same stable type twice")


def _check_state(_instance: object, _attribute: object, value: Any) -> None:
    if type(value) is not str:
        raise TypeError(f"state must be a str, not {type(value).__name__}")
    if value not in STATES:
        raise ValueError(f"state must be one of {sorted(STATES)}, got {value!r}")


def _check_load(_instance: object, _attribute: object, value: Any) -> None:
    if type(value) is not int:
        raise TypeError(f"load must be an int, not {type(value).__name__}")
    if not 0 <= value <= MAX_LOAD:
        raise ValueError(f"load must be in 0..{MAX_LOAD}, got {value}")


def _check_curve_key(_instance: object, _attribute: object, value: Any) -> None:
    if not isinstance(value, str) or (value and not is_z85_key(value)):
        raise ValueError(f"curve_key must be empty or a 40-character Z85 key, got {value!r}")


def _check_message_limit(_instance: object, _attribute: object, value: Any) -> None:
    if value is None:
        return
    if type(value) is not int:
        raise TypeError(f"max_message_bytes must be an int or None, not {type(value).__name__}")
    if value < 1:
        raise ValueError(f"max_message_bytes must be positive, got {value}")


def _check_version(_instance: object, _attribute: object, value: Any) -> None:
    parse_application_version(value)


def _check_endpoint(_instance: object, attribute: attrs.Attribute[str], value: Any) -> None:
    if type(value) is not str:
        raise TypeError(f"{attribute.name} must be a str, not {type(value).__name__}")


@attrs.frozen
class NodeRecord:
    """What a node run publishes about itself (MESH-1)."""

    rid: NodeRid = attrs.field(validator=attrs.validators.instance_of(NodeRid))
    generation: NodeGeneration = attrs.field(validator=attrs.validators.instance_of(NodeGeneration))
    application_endpoint: str = attrs.field(default="", validator=_check_endpoint)
    """Where peers connect for the application connection; empty before the transport binds."""
    completion_endpoint: str = attrs.field(default="", validator=_check_endpoint)
    """Where peers connect for the completion connection; empty before the transport binds."""
    state: str = attrs.field(default=SERVING, validator=_check_state)
    types: tuple[StableTypeName, ...] = attrs.field(
        default=(), converter=_type_names, validator=_check_types
    )
    """The stable Spot type names this node can host (placement input)."""
    load: int = attrs.field(default=0, validator=_check_load)
    """How many activations the node holds, as of its last write."""
    curve_key: str = attrs.field(default="", validator=_check_curve_key)
    """The run's Z85 CURVE public key: peers accept only connections with it (specs/security.md
    SEC-2); empty for a node without transport security."""
    max_message_bytes: int | None = attrs.field(default=None, validator=_check_message_limit)
    """The run's ``HostConfig.max_message_bytes``: the largest payload its transport takes, so
    peers send it nothing larger and reply to it with nothing larger (specs/messages.md MSG-6).
    ``None`` for a record without it (a run of an older version): peers then hold it to their
    own limit, as every host did before the limit was published."""
    application_version: str = attrs.field(default="0", validator=_check_version)
    """The run's ``HostConfig.application_version``, as configured; a record written before
    versions were published decodes as ``"0"`` (MESH-24)."""

    def encode(self) -> bytes:
        """The CBOR bytes stored at the node's key."""
        return cbor2.dumps(
            {
                "rid": self.rid.value,
                "generation": self.generation.value,
                "application": self.application_endpoint,
                "completion": self.completion_endpoint,
                "state": self.state,
                "types": [name.value for name in self.types],
                "load": self.load,
                **({"curve": self.curve_key} if self.curve_key else {}),
                **(
                    {"max_message": self.max_message_bytes}
                    if self.max_message_bytes is not None
                    else {}
                ),
                "app_version": self.application_version,
            }
        )

    @classmethod
    def decode(cls, raw: bytes) -> NodeRecord:
        """Read what :meth:`encode` wrote; ``ValueError`` naming the fault for anything else.

        Keys beyond the known ones are ignored, so a later version may add fields (MESH-2).
        """
        if type(raw) is not bytes:
            raise TypeError(f"a node record is bytes, not {type(raw).__name__}")
        try:
            data = cbor2.loads(raw)
        except Exception as error:  # cbor2 raises several unrelated types for bad input
            raise ValueError(f"a node record is not valid CBOR: {error}") from None
        if not isinstance(data, dict):
            raise ValueError(f"a node record is a CBOR map, not {type(data).__name__}")
        missing = sorted(_FIELDS - data.keys())
        if missing:
            raise ValueError(f"a node record lacks the fields {missing}")
        types = data["types"]
        if not isinstance(types, list):
            raise ValueError(f"a node record's types is a list, not {type(types).__name__}")
        try:
            return cls(
                NodeRid(data["rid"]),
                NodeGeneration(data["generation"]),
                data["application"],
                data["completion"],
                data["state"],
                tuple(StableTypeName(name) for name in types),
                data["load"],
                data.get("curve", ""),
                data.get("max_message"),
                data.get("app_version", "0"),
            )
        except (TypeError, ValueError) as error:
            raise ValueError(f"a node record holds a bad field: {error}") from None


def decode_or_none(raw: bytes) -> NodeRecord | None:
    """The record ``raw`` holds, or ``None`` when it does not decode."""
    try:
        return NodeRecord.decode(raw)
    except ValueError:
        return None


def describe_holder(raw: bytes) -> str:
    """The run a stored record names, for messages about who holds a key."""
    record = decode_or_none(raw)
    if record is None:
        return "an unreadable record"
    return f"run {record.generation!r}"


# --- what subscribers are told -----------------------------------------------------------------


@attrs.frozen
class PeerUp:
    """A run of a peer is live: connect to it."""

    record: NodeRecord


@attrs.frozen
class PeerChanged:
    """A live run's record changed (state, endpoints, types or load); its generation did not."""

    record: NodeRecord


@attrs.frozen
class PeerDown:
    """A run of a peer is no longer live: its record was withdrawn, removed after its silence, or
    replaced."""

    rid: NodeRid
    generation: NodeGeneration


PeerEvent = PeerUp | PeerChanged | PeerDown
