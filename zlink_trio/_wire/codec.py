"""Wire messages to and from multipart frames (specs/wire.md, WIRE-1..18).

Frame layout (frame 0 is one CBOR array; ``s`` marks a text identifier of 1..255 UTF-8 bytes)::

    kind  message     frames  frame 0 (CBOR array)                                     frame 1
    1     Hello       1       [1, version, mesh s, node_rid s, generation, role]       -
    2     Send        2       [2, target_kind, target s, instance_type s|null,         payload
                               message_type s, metadata]
    3     Request     2       [3, op_high, op_low, reply_route, target_kind, target s,  payload
                               instance_type s|null, message_type s, budget_us, metadata]
    4     Reply       2       [4, reply_route, op_high, op_low, requester_gen,         payload
                               reply_type s]
    5     ErrorReply  1       [5, reply_route, op_high, op_low, requester_gen,         -
                               error_kind, message]
    6     Heartbeat   1       [6]                                                      -

``metadata`` is a flat array ``[k1, v1, k2, v2, ...]``. ``target_kind`` is 1 for a Spot id, 2 for
an Actor id; 3 (node) and 4 (channel) are reserved. Frame kinds 16..31 are reserved for relocation.

Rule 1: the application payload is its own frame and is never re-encoded: ``encode`` puts the
message's bytes object in the frame list and ``decode`` puts the received frame object in the
message (seed 004 §1, performance checkpoint: no double conversion, no copy).
Rule 2: whatever bytes arrive, ``decode`` returns a message or raises
``ZLinkError(PROTOCOL_ERROR)`` and nothing else (seed 003 §2). cbor2 is a foreign parser, so the
one call into it turns any exception into PROTOCOL_ERROR; every check after it is written not to
raise anything else. Frame 0 is refused unread above ``MAX_HEADER_BYTES``, which also bounds the
work a crafted header can cause (deep nesting, huge declared lengths).
Rule 3: values are checked once, here, at the boundary (seed 004 §6), by ``fields.py``; the
identifier and message objects are then built without running their validators again, which would
apply the same checks a second time on the hot path (``fields.py`` Rule 1).
Rule 4: the payload frame's size is the transport's business (its configurable frame limit);
this codec only bounds the header. Bytes after frame 0's CBOR item are not read.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Final

import cbor2

from zlink_trio._wire.fields import (
    TARGET_ACTOR,
    TARGET_SPOT,
    as_generation,
    as_mesh_name,
    as_metadata,
    as_node_rid,
    as_operation_id,
    as_optional_type_name,
    as_payload,
    as_reply_route,
    as_target,
    as_text,
    as_type_name,
    protocol_error,
    slot_setters,
)
from zlink_trio._wire.messages import (
    MAX_BUDGET_US,
    MAX_ERROR_MESSAGE_BYTES,
    MAX_PROTOCOL_VERSION,
    PROTOCOL_VERSION,
    ConnectionRole,
    ErrorReply,
    Heartbeat,
    Hello,
    Metadata,
    Reply,
    Request,
    Send,
    WireMessage,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotId

__all__ = ["MAX_HEADER_BYTES", "decode", "encode"]

MAX_HEADER_BYTES: Final = 64 * 1024
"""Largest frame 0 accepted. Every valid message's header is far smaller (WIRE-5)."""

HELLO, SEND, REQUEST, REPLY, ERROR_REPLY, HEARTBEAT = 1, 2, 3, 4, 5, 6
RELOCATION_KINDS: Final = range(16, 32)

_ERROR_KINDS: Final = tuple(ErrorKind)
_ROLES: Final = {role.value: role for role in ConnectionRole}
_TARGET_KINDS: Final[dict[type, int]] = {SpotId: TARGET_SPOT, ActorId: TARGET_ACTOR}
_HEARTBEAT: Final = Heartbeat()

_dumps = cbor2.dumps
_loads = cbor2.loads
_new = object.__new__


# --- encoding -------------------------------------------------------------------------------


def _flat(metadata: Metadata) -> list[str]:
    return [text for pair in metadata for text in pair] if metadata else []


def _encode_hello(m: Hello) -> list[bytes]:
    version = m.protocol_version
    header = [HELLO, version, m.mesh.value, m.node_rid.value, m.node_generation.value, m.role.value]
    return [_dumps(header)]


def _encode_send(m: Send) -> list[bytes]:
    instance = m.instance_spot_type
    header = [
        SEND,
        _TARGET_KINDS[type(m.target)],
        m.target.value,
        None if instance is None else instance.value,
        m.message_type.value,
        _flat(m.metadata),
    ]
    return [_dumps(header), m.payload]


def _encode_request(m: Request) -> list[bytes]:
    operation = m.operation_id
    instance = m.instance_spot_type
    header = [
        REQUEST,
        operation.high,
        operation.low,
        m.reply_route.value,
        _TARGET_KINDS[type(m.target)],
        m.target.value,
        None if instance is None else instance.value,
        m.message_type.value,
        m.budget_us,
        _flat(m.metadata),
    ]
    return [_dumps(header), m.payload]


def _encode_reply(m: Reply) -> list[bytes]:
    operation = m.operation_id
    header = [
        REPLY,
        m.reply_route.value,
        operation.high,
        operation.low,
        m.requester_generation.value,
        m.reply_type.value,
    ]
    return [_dumps(header), m.payload]


def _encode_error_reply(m: ErrorReply) -> list[bytes]:
    operation = m.operation_id
    header = [
        ERROR_REPLY,
        m.reply_route.value,
        operation.high,
        operation.low,
        m.requester_generation.value,
        m.kind.value,
        m.message,
    ]
    return [_dumps(header)]


def _encode_heartbeat(_m: Heartbeat) -> list[bytes]:
    return [b"\x81\x06"]  # the CBOR array [6]


_ENCODERS: Final[dict[type, Callable[[Any], list[bytes]]]] = {
    Hello: _encode_hello,
    Send: _encode_send,
    Request: _encode_request,
    Reply: _encode_reply,
    ErrorReply: _encode_error_reply,
    Heartbeat: _encode_heartbeat,
}


def encode(message: WireMessage) -> list[bytes]:
    """The frames of ``message``: the header frame, then the payload frame if it has one.

    A message is valid once made (WIRE-17), so encoding it cannot fail; anything that is not a wire
    message raises TypeError.
    """
    encoder = _ENCODERS.get(type(message))
    if encoder is None:
        raise TypeError(f"not a wire message: {type(message).__name__}")
    return encoder(message)


# --- decoding: one object per message (fields.py Rule 1) ---------------------------------------

_HELLO_SLOTS: Final = slot_setters(
    Hello, "protocol_version", "mesh", "node_rid", "node_generation", "role"
)
_SEND_SLOTS: Final = slot_setters(
    Send, "target", "message_type", "payload", "instance_spot_type", "metadata"
)
_REQUEST_SLOTS: Final = slot_setters(
    Request,
    "operation_id",
    "reply_route",
    "target",
    "message_type",
    "payload",
    "budget_us",
    "instance_spot_type",
    "metadata",
)
_REPLY_SLOTS: Final = slot_setters(
    Reply, "reply_route", "operation_id", "requester_generation", "reply_type", "payload"
)
_ERROR_REPLY_SLOTS: Final = slot_setters(
    ErrorReply, "reply_route", "operation_id", "requester_generation", "kind", "message"
)


# --- decoding: one function per kind --------------------------------------------------------


def _decode_hello(h: list[Any], _frames: Sequence[bytes]) -> Hello:
    version = h[1]
    if type(version) is not int or not 1 <= version <= MAX_PROTOCOL_VERSION:
        raise protocol_error(f"protocol version must be in 1..{MAX_PROTOCOL_VERSION}")
    if len(h) != 6 and version == PROTOCOL_VERSION:
        raise protocol_error(
            f"a version {PROTOCOL_VERSION} Hello has 6 header elements, got {len(h)}"
        )
    role = _ROLES.get(h[5]) if type(h[5]) is int else None
    if role is None:
        raise protocol_error("unknown connection role")
    version_slot, mesh_slot, rid_slot, generation_slot, role_slot = _HELLO_SLOTS
    hello: Hello = _new(Hello)
    version_slot(hello, version)
    mesh_slot(hello, as_mesh_name(h[2]))
    rid_slot(hello, as_node_rid(h[3]))
    generation_slot(hello, as_generation(h[4], "node generation"))
    role_slot(hello, role)
    return hello


def _decode_send(h: list[Any], frames: Sequence[bytes]) -> Send:
    _, target_kind, target, instance, message_type, metadata = h
    target_slot, type_slot, payload_slot, instance_slot, metadata_slot = _SEND_SLOTS
    send: Send = _new(Send)
    target_slot(send, as_target(target_kind, target))
    type_slot(send, as_type_name(message_type, "message type"))
    payload_slot(send, as_payload(frames[1]))
    instance_slot(send, as_optional_type_name(instance, "instance Spot type"))
    metadata_slot(send, () if metadata == [] else as_metadata(metadata))
    return send


def _decode_request(h: list[Any], frames: Sequence[bytes]) -> Request:
    _, high, low, route, target_kind, target, instance, message_type, budget, metadata = h
    if type(budget) is not int or not 0 <= budget <= MAX_BUDGET_US:
        raise protocol_error(f"budget must be 0..{MAX_BUDGET_US} microseconds")  # seed 002 §9
    (
        operation_slot,
        route_slot,
        target_slot,
        type_slot,
        payload_slot,
        budget_slot,
        instance_slot,
        metadata_slot,
    ) = _REQUEST_SLOTS
    request: Request = _new(Request)
    operation_slot(request, as_operation_id(high, low))
    route_slot(request, as_reply_route(route))
    target_slot(request, as_target(target_kind, target))
    type_slot(request, as_type_name(message_type, "message type"))
    payload_slot(request, as_payload(frames[1]))
    budget_slot(request, budget)
    instance_slot(request, as_optional_type_name(instance, "instance Spot type"))
    metadata_slot(request, () if metadata == [] else as_metadata(metadata))
    return request


def _decode_reply(h: list[Any], frames: Sequence[bytes]) -> Reply:
    _, route, high, low, generation, reply_type = h
    route_slot, operation_slot, generation_slot, type_slot, payload_slot = _REPLY_SLOTS
    reply: Reply = _new(Reply)
    route_slot(reply, as_reply_route(route))
    operation_slot(reply, as_operation_id(high, low))
    generation_slot(reply, as_generation(generation, "requester generation"))
    type_slot(reply, as_type_name(reply_type, "reply type"))
    payload_slot(reply, as_payload(frames[1]))
    return reply


def _decode_error_reply(h: list[Any], _frames: Sequence[bytes]) -> ErrorReply:
    _, route, high, low, generation, kind, message = h
    if type(kind) is not int or not 0 <= kind < len(_ERROR_KINDS):
        raise protocol_error("error kind must be one of the 13 ErrorKind numbers")  # seed 003 §2
    route_slot, operation_slot, generation_slot, kind_slot, message_slot = _ERROR_REPLY_SLOTS
    error: ErrorReply = _new(ErrorReply)
    route_slot(error, as_reply_route(route))
    operation_slot(error, as_operation_id(high, low))
    generation_slot(error, as_generation(generation, "requester generation"))
    kind_slot(error, _ERROR_KINDS[kind])
    message_slot(error, as_text(message, MAX_ERROR_MESSAGE_BYTES, "error message"))
    return error


def _decode_heartbeat(_h: list[Any], _frames: Sequence[bytes]) -> Heartbeat:
    return _HEARTBEAT


_Decoder = Callable[[list[Any], Sequence[bytes]], WireMessage]
# kind -> (name, frame count, header length, decoder)
_DECODERS: Final[dict[int, tuple[str, int, int, _Decoder]]] = {
    HELLO: ("Hello", 1, 6, _decode_hello),
    SEND: ("Send", 2, 6, _decode_send),
    REQUEST: ("Request", 2, 10, _decode_request),
    REPLY: ("Reply", 2, 6, _decode_reply),
    ERROR_REPLY: ("ErrorReply", 1, 7, _decode_error_reply),
    HEARTBEAT: ("Heartbeat", 1, 1, _decode_heartbeat),
}


def decode(frames: Sequence[bytes]) -> WireMessage:
    """The message that ``frames`` carry, or ``ZLinkError(PROTOCOL_ERROR)`` saying what is wrong.

    ``frames`` must be ``bytes`` objects (anything else is the caller's bug: TypeError). Any
    bytes at all give a message or PROTOCOL_ERROR, never another exception (WIRE-4).
    """
    if not frames:
        raise protocol_error("a message has at least one frame")
    head = frames[0]
    if type(head) is not bytes:
        raise TypeError(f"frames must be bytes, not {type(head).__name__}")
    if len(head) > MAX_HEADER_BYTES:
        raise protocol_error(f"header frame is larger than {MAX_HEADER_BYTES} bytes")
    try:
        header = _loads(head)
    except Exception as exc:  # any failure of the foreign parser is the input's fault (Rule 2)
        raise protocol_error(f"header frame is not one CBOR item ({type(exc).__name__})") from None
    if type(header) is not list or not header:
        raise protocol_error("header frame must be a non-empty CBOR array")
    kind = header[0]
    entry = _DECODERS.get(kind) if type(kind) is int else None
    if entry is None:
        if type(kind) is int and kind in RELOCATION_KINDS:
            raise protocol_error(f"frame kind {kind} (relocation) is not supported yet")
        raise protocol_error("unknown frame kind")
    name, frame_count, header_length, decoder = entry
    if len(frames) != frame_count:
        raise protocol_error(f"{name} has {frame_count} frame(s), got {len(frames)}")
    if len(header) != header_length and not (kind == HELLO and len(header) > header_length):
        # A Hello of another protocol version may append fields; its first six keep their meaning.
        raise protocol_error(f"{name} header has {header_length} elements, got {len(header)}")
    try:
        return decoder(header, frames)
    except ZLinkError as exc:
        raise protocol_error(f"{name}: {exc.message}") from None
