"""The typed wire messages and their limits (specs/wire.md, WIRE-8..18).

Each message is a frozen attrs value that checks itself when made, so a message the runtime builds
always encodes to frames that the peer's decoder accepts (WIRE-17). The codec (``codec.py``) owns
the bytes; this module owns what a message means and which values it may hold.

Rule 1: identities travel as their own types. OperationId and ReplyRouteId are separate fields and
neither stands in for the other (seed 002 §10); node, mesh, Spot and Actor names are the identifier
types of ``zlink_trio.ids`` (seed 004 §6).
Rule 2: a request carries the *remaining* budget in whole microseconds, never an absolute deadline:
the clocks of two hosts are not compared (seed 002 §9).
Rule 3: a reply names the run of the requester it answers (its node generation), so a reply to an
earlier run of the node is recognisable and never completes a call of the current run
(seed 002 §9, seed 004 §6).
"""

from __future__ import annotations

import enum

import attrs

from zlink_trio._wire.ids import OperationId, ReplyRouteId
from zlink_trio.errors import ErrorKind
from zlink_trio.ids import ActorId, MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

__all__ = [
    "MAX_BUDGET_US",
    "MAX_ERROR_MESSAGE_BYTES",
    "MAX_METADATA_KEY_BYTES",
    "MAX_METADATA_PAIRS",
    "MAX_METADATA_VALUE_BYTES",
    "PROTOCOL_VERSION",
    "ConnectionRole",
    "ErrorReply",
    "Heartbeat",
    "Hello",
    "Metadata",
    "Reply",
    "Request",
    "Send",
    "Target",
    "WireMessage",
]

PROTOCOL_VERSION = 1
"""The wire protocol version this package speaks; a Hello carries it (WIRE-18, WIRE-24)."""
MAX_PROTOCOL_VERSION = 0xFFFF
MAX_BUDGET_US = 2**63 - 1
"""Largest remaining request budget, in microseconds: the signed 64-bit maximum (WIRE-12)."""
MAX_METADATA_PAIRS = 32
MAX_METADATA_KEY_BYTES = 255
MAX_METADATA_VALUE_BYTES = 1024
MAX_ERROR_MESSAGE_BYTES = 4096

Target = SpotId | ActorId
"""Where a Send or Request goes. Node and channel targets are reserved on the wire (WIRE-14)."""
Metadata = tuple[tuple[str, str], ...]
"""Ordered (key, value) pairs; a key may repeat (WIRE-15)."""
_TARGET_TYPES = (SpotId, ActorId)


class ConnectionRole(enum.IntEnum):
    """Which of the two connections between a pair of nodes a Hello opens (seed 002 §15)."""

    APPLICATION = 1
    """Sends and requests: subject to the peer's high-water mark, may pause."""
    COMPLETION = 2
    """Replies and error replies only, so a reply is never stuck behind paused application work."""


def _utf8_size(text: str) -> int:
    """The UTF-8 size of ``text`` in bytes (raises UnicodeEncodeError on a lone surrogate)."""
    return len(text) if text.isascii() else len(text.encode("utf-8"))


def _check_type(owner: str, field: str, value: object, kind: type | tuple[type, ...]) -> None:
    if not isinstance(value, kind):
        names = " or ".join(k.__name__ for k in kind) if isinstance(kind, tuple) else kind.__name__
        raise TypeError(f"{owner}.{field} takes {names}, not {type(value).__name__}")


def _check_text(owner: str, field: str, value: object, low: int, high: int) -> None:
    if type(value) is not str:
        raise TypeError(f"{owner}.{field} takes a str, not {type(value).__name__}")
    try:
        size = _utf8_size(value)
    except UnicodeEncodeError:
        raise ValueError(
            f"{owner}.{field} must be valid UTF-8 (it holds a lone surrogate)"
        ) from None
    if not low <= size <= high:
        raise ValueError(f"{owner}.{field} must be {low}..{high} bytes of UTF-8, got {size}")


def _check_metadata(owner: str, metadata: object) -> None:
    """Raise TypeError/ValueError unless ``metadata`` is a valid Metadata tuple (WIRE-15)."""
    if type(metadata) is not tuple:
        raise TypeError(f"{owner}.metadata takes a tuple of (str, str) pairs")
    if len(metadata) > MAX_METADATA_PAIRS:
        raise ValueError(f"{owner}.metadata holds at most {MAX_METADATA_PAIRS} pairs")
    for pair in metadata:
        if type(pair) is not tuple or len(pair) != 2:
            raise TypeError(f"{owner}.metadata takes (str, str) pairs, got {pair!r}")
        _check_text(owner, "metadata key", pair[0], 1, MAX_METADATA_KEY_BYTES)
        _check_text(owner, "metadata value", pair[1], 0, MAX_METADATA_VALUE_BYTES)


def _plain_metadata(metadata: object) -> bool:
    # The common case, cheaply: ASCII text (so size is length, and no lone surrogate) in range.
    if type(metadata) is not tuple or len(metadata) > MAX_METADATA_PAIRS:
        return False
    for pair in metadata:
        if type(pair) is not tuple or len(pair) != 2:
            return False
        key, value = pair
        if not (type(key) is str and key.isascii() and 0 < len(key) <= MAX_METADATA_KEY_BYTES):
            return False
        if not (type(value) is str and value.isascii() and len(value) <= MAX_METADATA_VALUE_BYTES):
            return False
    return True


def _addressing_is_plain(message: Send | Request) -> bool:
    instance = message.instance_spot_type
    return (
        type(message.target) in _TARGET_TYPES
        and type(message.message_type) is StableTypeName
        and type(message.payload) is bytes
        and (instance is None or type(instance) is StableTypeName)
        and (message.metadata == () or _plain_metadata(message.metadata))
    )


def _check_addressing(owner: str, message: Send | Request) -> None:
    if type(message.target) not in _TARGET_TYPES:  # exactly: the codec keys on the type
        raise TypeError(f"{owner}.target takes a SpotId or ActorId, not {message.target!r}")
    _check_type(owner, "message_type", message.message_type, StableTypeName)
    _check_type(owner, "payload", message.payload, bytes)
    if message.instance_spot_type is not None:
        _check_type(owner, "instance_spot_type", message.instance_spot_type, StableTypeName)
    _check_metadata(owner, message.metadata)


def _check_correlation(owner: str, message: Reply | ErrorReply) -> None:
    _check_type(owner, "reply_route", message.reply_route, ReplyRouteId)
    _check_type(owner, "operation_id", message.operation_id, OperationId)
    _check_type(owner, "requester_generation", message.requester_generation, NodeGeneration)


@attrs.frozen
class Hello:
    """The first message on a connection: who opens it, in which mesh, for which role."""

    protocol_version: int
    mesh: MeshName
    node_rid: NodeRid
    node_generation: NodeGeneration
    role: ConnectionRole

    def __attrs_post_init__(self) -> None:
        if type(self.protocol_version) is not int:
            raise TypeError("Hello.protocol_version takes an int")
        if not 1 <= self.protocol_version <= MAX_PROTOCOL_VERSION:
            raise ValueError(f"Hello.protocol_version must be in 1..{MAX_PROTOCOL_VERSION}")
        _check_type("Hello", "mesh", self.mesh, MeshName)
        _check_type("Hello", "node_rid", self.node_rid, NodeRid)
        _check_type("Hello", "node_generation", self.node_generation, NodeGeneration)
        _check_type("Hello", "role", self.role, ConnectionRole)


@attrs.frozen
class Send:
    """A one-way message to a Spot or an Actor; it has no reply and no deadline."""

    target: Target
    message_type: StableTypeName
    payload: bytes
    instance_spot_type: StableTypeName | None = None
    """The Instance Spot type to activate cold when ``target`` is not active (seed 000)."""
    metadata: Metadata = ()

    def __attrs_post_init__(self) -> None:
        # The plain case is checked inline; anything else gets the checks that explain it.
        if not _addressing_is_plain(self):
            _check_addressing("Send", self)


@attrs.frozen
class Request:
    """A request that expects exactly one Reply or ErrorReply on the completion connection."""

    operation_id: OperationId
    reply_route: ReplyRouteId
    target: Target
    message_type: StableTypeName
    payload: bytes
    budget_us: int
    """What is left of the caller's request timeout when the request was sent (Rule 2)."""
    instance_spot_type: StableTypeName | None = None
    metadata: Metadata = ()

    def __attrs_post_init__(self) -> None:
        budget = self.budget_us
        if (
            type(self.operation_id) is OperationId
            and type(self.reply_route) is ReplyRouteId
            and type(budget) is int
            and 0 <= budget <= MAX_BUDGET_US
            and _addressing_is_plain(self)
        ):
            return  # the plain case, checked inline; anything else gets the explaining checks
        _check_type("Request", "operation_id", self.operation_id, OperationId)
        _check_type("Request", "reply_route", self.reply_route, ReplyRouteId)
        if type(budget) is not int:
            raise TypeError("Request.budget_us takes an int (microseconds)")
        if not 0 <= budget <= MAX_BUDGET_US:
            raise ValueError(f"Request.budget_us must be in 0..{MAX_BUDGET_US}")
        _check_addressing("Request", self)


@attrs.frozen
class Reply:
    """The application reply to one Request, addressed to the run of the requester (Rule 3)."""

    reply_route: ReplyRouteId
    operation_id: OperationId
    requester_generation: NodeGeneration
    reply_type: StableTypeName
    payload: bytes

    def __attrs_post_init__(self) -> None:
        if (
            type(self.reply_route) is ReplyRouteId
            and type(self.operation_id) is OperationId
            and type(self.requester_generation) is NodeGeneration
            and type(self.reply_type) is StableTypeName
            and type(self.payload) is bytes
        ):
            return  # the plain case, checked inline; anything else gets the explaining checks
        _check_correlation("Reply", self)
        _check_type("Reply", "reply_type", self.reply_type, StableTypeName)
        _check_type("Reply", "payload", self.payload, bytes)


@attrs.frozen
class ErrorReply:
    """A request's terminal failure: one of the thirteen ErrorKinds and a text for people."""

    reply_route: ReplyRouteId
    operation_id: OperationId
    requester_generation: NodeGeneration
    kind: ErrorKind
    message: str

    def __attrs_post_init__(self) -> None:
        _check_correlation("ErrorReply", self)
        _check_type("ErrorReply", "kind", self.kind, ErrorKind)
        _check_text("ErrorReply", "message", self.message, 0, MAX_ERROR_MESSAGE_BYTES)


@attrs.frozen
class Heartbeat:
    """A liveness signal with no content; when to send one is the transport's business."""


WireMessage = Hello | Send | Request | Reply | ErrorReply | Heartbeat
