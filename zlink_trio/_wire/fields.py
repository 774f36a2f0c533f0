"""Header field values, checked and built once at the boundary (specs/wire.md, WIRE-7..15).

Every function takes a value just decoded by cbor2 and returns it as its identifier or message
field type, or raises ``ZLinkError(PROTOCOL_ERROR)``; none raises anything else (codec Rule 2).
Each accepts the common case with a few inline comparisons and leaves the precise message to its
error path. Only exact types pass: a boolean is not an integer, a float is not an integer, a
tagged value (a date, a decimal) is not text (WIRE-7).

Rule 1: the checks are those of the identifier types themselves (``zlink_trio.ids``,
``zlink_trio._wire.ids``), so the objects are built without running those validators a second
time: made with ``object.__new__``, their fields stored through the classes' slot descriptors, as
attrs' frozen ``__init__`` stores them. The setters are taken once, at import, for every field by
name: a class that stopped being slotted, or gained a field, fails at import instead of decoding
half-built objects. ``tests/wire`` proves the results equal validated construction.
Rule 2: decoded Spot ids, Actor ids, type names, mesh names and node RIDs are remembered (at most
``KNOWN_LIMIT`` of each, then forgotten at once): names repeat, so most never get rebuilt.
"""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from typing import Any, Final, TypeVar

import attrs

from zlink_trio._wire.ids import OperationId, ReplyRouteId
from zlink_trio._wire.messages import (
    MAX_METADATA_KEY_BYTES,
    MAX_METADATA_PAIRS,
    MAX_METADATA_VALUE_BYTES,
    Metadata,
    Target,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

__all__ = [
    "KNOWN_LIMIT",
    "TARGET_ACTOR",
    "TARGET_CHANNEL",
    "TARGET_NODE",
    "TARGET_SPOT",
    "Setter",
    "as_generation",
    "as_mesh_name",
    "as_metadata",
    "as_node_rid",
    "as_operation_id",
    "as_optional_type_name",
    "as_payload",
    "as_reply_route",
    "as_target",
    "as_text",
    "as_type_name",
    "protocol_error",
    "slot_setters",
]

TARGET_SPOT, TARGET_ACTOR, TARGET_NODE, TARGET_CHANNEL = 1, 2, 3, 4
KNOWN_LIMIT: Final = 4096
"""How many decoded names of one kind are remembered before all are forgotten (Rule 2)."""

_U64_MAX: Final = 2**64 - 1
_TYPE_NAMES: Final[dict[str, StableTypeName]] = {}
_SPOT_IDS: Final[dict[str, SpotId]] = {}
_ACTOR_IDS: Final[dict[str, ActorId]] = {}
_MESH_NAMES: Final[dict[str, MeshName]] = {}
_NODE_RIDS: Final[dict[str, NodeRid]] = {}

_new = object.__new__
_T = TypeVar("_T")
Setter = Callable[[Any, Any], None]


def protocol_error(detail: str) -> ZLinkError:
    """The one error a decoder raises for bad input."""
    return ZLinkError(ErrorKind.PROTOCOL_ERROR, detail)


def slot_setters(cls: type, *names: str) -> tuple[Setter, ...]:
    """The slot setters of ``cls``'s fields, which must be exactly ``names`` in order (Rule 1)."""
    if tuple(field.name for field in attrs.fields(cls)) != names:
        raise TypeError(f"{cls.__name__} fields are not exactly {names}")
    slots = [inspect.getattr_static(cls, name) for name in names]
    if not all(type(slot) is types.MemberDescriptorType for slot in slots):
        raise TypeError(f"{cls.__name__} is not a slotted class")
    return tuple(slot.__set__ for slot in slots)


_TEXT_SETTERS: Final[dict[type, Setter]] = {
    cls: slot_setters(cls, "value")[0]
    for cls in (SpotId, ActorId, StableTypeName, MeshName, NodeRid)
}
_SET_HIGH, _SET_LOW = slot_setters(OperationId, "high", "low")
(_SET_ROUTE,) = slot_setters(ReplyRouteId, "value")
(_SET_GENERATION,) = slot_setters(NodeGeneration, "value")


def _fits(text: str, limit: int) -> bool:
    # At most 4 UTF-8 bytes per code point, so short text needs no encoding. cbor2 decodes text
    # strictly: a decoded str holds no lone surrogate, so encode() cannot fail here.
    size = len(text)
    return size <= limit // 4 or (size <= limit and len(text.encode()) <= limit)


def _text_id(known: dict[str, _T], cls: type[_T], value: object, what: str) -> _T:
    # The rule of zlink_trio.ids: 1..255 bytes of UTF-8 (WIRE-10); ``known`` is Rule 2.
    if type(value) is str:
        ident = known.get(value)
        if ident is not None:
            return ident
        if 0 < len(value) <= 63 or (value and _fits(value, 255)):
            if len(known) >= KNOWN_LIMIT:
                known.clear()
            ident = _new(cls)
            _TEXT_SETTERS[cls](ident, value)
            known[value] = ident
            return ident
    raise protocol_error(f"{what} must be text of 1..255 UTF-8 bytes")


def as_mesh_name(value: object) -> MeshName:
    return _text_id(_MESH_NAMES, MeshName, value, "mesh name")


def as_node_rid(value: object) -> NodeRid:
    return _text_id(_NODE_RIDS, NodeRid, value, "node RID")


def as_type_name(value: object, what: str) -> StableTypeName:
    known = _TYPE_NAMES.get(value) if type(value) is str else None
    return known if known is not None else _text_id(_TYPE_NAMES, StableTypeName, value, what)


def as_optional_type_name(value: object, what: str) -> StableTypeName | None:
    return None if value is None else _text_id(_TYPE_NAMES, StableTypeName, value, what)


def as_target(kind: object, value: object) -> Target:
    """A Spot id (kind 1) or Actor id (kind 2); node and channel kinds are reserved (WIRE-14)."""
    if kind == TARGET_SPOT and type(kind) is int:
        return _text_id(_SPOT_IDS, SpotId, value, "target Spot id")
    if kind == TARGET_ACTOR and type(kind) is int:
        return _text_id(_ACTOR_IDS, ActorId, value, "target Actor id")
    if type(kind) is int and kind in (TARGET_NODE, TARGET_CHANNEL):
        raise protocol_error(f"target kind {kind} (node or channel) is not supported yet")
    raise protocol_error("unknown target kind")


def as_operation_id(high: object, low: object) -> OperationId:
    """Two u64 words, not both zero (seed 002 §10, WIRE-8)."""
    if (
        type(high) is not int
        or type(low) is not int
        or not (0 <= high <= _U64_MAX and 0 <= low <= _U64_MAX)
    ):
        raise protocol_error("operation id words must be unsigned 64-bit integers")
    if not (high or low):
        raise protocol_error("operation id cannot have both words zero")
    operation: OperationId = _new(OperationId)
    _SET_HIGH(operation, high)
    _SET_LOW(operation, low)
    return operation


def as_reply_route(value: object) -> ReplyRouteId:
    """A non-zero u64 (seed 002 §10, WIRE-9)."""
    if type(value) is not int or not 0 < value <= _U64_MAX:
        raise protocol_error("reply route must be a non-zero unsigned 64-bit integer")
    route: ReplyRouteId = _new(ReplyRouteId)
    _SET_ROUTE(route, value)
    return route


def as_generation(value: object, what: str) -> NodeGeneration:
    """A non-zero u64 (WIRE-11)."""
    if type(value) is not int or not 0 < value <= _U64_MAX:
        raise protocol_error(f"{what} must be a non-zero unsigned 64-bit integer")
    generation: NodeGeneration = _new(NodeGeneration)
    _SET_GENERATION(generation, value)
    return generation


def as_text(value: object, limit: int, what: str) -> str:
    if type(value) is not str or not _fits(value, limit):
        raise protocol_error(f"{what} must be text of at most {limit} UTF-8 bytes")
    return value


def as_metadata(value: object) -> Metadata:
    """A flat array of key, value text pairs (WIRE-15)."""
    if type(value) is list and len(value) == 2:  # one short pair: the common non-empty case
        key, text = value
        if type(key) is str and type(text) is str and 0 < len(key) <= 63 and len(text) <= 256:
            return ((key, text),)
    if type(value) is not list or len(value) % 2 or len(value) > 2 * MAX_METADATA_PAIRS:
        raise protocol_error(f"metadata must be an array of up to {MAX_METADATA_PAIRS} text pairs")
    pairs = []
    for index in range(0, len(value), 2):
        key = value[index]
        if type(key) is not str or not key or not _fits(key, MAX_METADATA_KEY_BYTES):
            raise protocol_error(f"metadata key must be text of 1..{MAX_METADATA_KEY_BYTES} bytes")
        text = as_text(value[index + 1], MAX_METADATA_VALUE_BYTES, "metadata value")
        pairs.append((key, text))
    return tuple(pairs)


def as_payload(frame: object) -> bytes:
    """The payload frame itself, never copied (WIRE-6); a non-bytes frame is the caller's bug."""
    if type(frame) is not bytes:
        raise TypeError(f"frames must be bytes, not {type(frame).__name__}")
    return frame
