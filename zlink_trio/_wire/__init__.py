"""The sans-IO ZLink wire protocol (specs/wire.md): bytes in, typed messages out.

No I/O, no trio, no zmq: the runtime and any client library share this package unchanged.
"""

from zlink_trio._wire.codec import MAX_HEADER_BYTES, decode, encode
from zlink_trio._wire.ids import CallId, OperationId, ReplyRouteId
from zlink_trio._wire.messages import (
    PROTOCOL_VERSION,
    ConnectionRole,
    ErrorReply,
    Heartbeat,
    Hello,
    Metadata,
    Reply,
    Request,
    Send,
    Target,
    WireMessage,
)
from zlink_trio._wire.payload import MessageTypes
from zlink_trio._wire.protocol import (
    Inbound,
    PeerOpened,
    PeerProtocol,
    PeerRestarted,
    RefusalReason,
    Refused,
)

__all__ = [
    "MAX_HEADER_BYTES",
    "PROTOCOL_VERSION",
    "CallId",
    "ConnectionRole",
    "ErrorReply",
    "Heartbeat",
    "Hello",
    "Inbound",
    "MessageTypes",
    "Metadata",
    "OperationId",
    "PeerOpened",
    "PeerProtocol",
    "PeerRestarted",
    "RefusalReason",
    "Refused",
    "Reply",
    "ReplyRouteId",
    "Request",
    "Send",
    "Target",
    "WireMessage",
    "decode",
    "encode",
]
