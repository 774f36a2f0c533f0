"""Per-peer protocol state: what a connection may carry, when (specs/wire.md, WIRE-23..29).

A ``PeerProtocol`` judges the messages that arrive on one connection opened by one peer node. It
does no I/O and keeps no clock (heartbeat timing is the transport's business): frames or decoded
messages go in, and one typed verdict comes out per message. An accepted message comes out as
itself, so the hot path allocates nothing beyond the message; everything else is a
``PeerOpened``, ``PeerRestarted`` or ``Refused`` value. Refusals never change the state: the frame
is dropped, the caller counts it by ``RefusalReason`` (never by its text, seed 002 §14) and
decides whether the connection is worth keeping.

Rule 1: a connection is opened by a Hello of the same protocol version and mesh name, for the
role this connection serves; before that nothing else is accepted.
Rule 2: a connection carries one role. Sends and Requests travel on the application connection,
Replies and ErrorReplies on the completion connection (seed 002 §15); Heartbeats on both.
Rule 3: a node run is its generation, an opaque equality token (seed 004 §6). A Hello with a
generation this connection has never seen is a new run of the peer, a new route: the caller
fails what it sent to the old run. A Hello of a run already replaced is stale and refused, as is a
reply addressed to a run of this node other than the current one (seed 002 §9).
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Sequence

import attrs

from zlink_trio._wire.codec import decode
from zlink_trio._wire.messages import (
    PROTOCOL_VERSION,
    ConnectionRole,
    ErrorReply,
    Heartbeat,
    Hello,
    Reply,
    Request,
    Send,
    WireMessage,
)
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid

__all__ = [
    "Inbound",
    "PeerOpened",
    "PeerProtocol",
    "PeerRestarted",
    "RefusalReason",
    "Refused",
]

RETIRED_GENERATIONS_KEPT = 16
"""How many replaced runs of a peer a connection remembers in order to refuse them as stale."""


class RefusalReason(enum.Enum):
    """Why a message was refused; the caller counts and branches on this, never on the detail."""

    MALFORMED = "malformed"
    """The frames did not decode (PROTOCOL_ERROR); the detail says why."""
    NOT_OPENED = "not-opened"
    """Something other than a Hello arrived before the connection was opened."""
    VERSION_MISMATCH = "version-mismatch"
    """The Hello speaks another protocol version."""
    MESH_MISMATCH = "mesh-mismatch"
    """The Hello names another mesh."""
    PEER_MISMATCH = "peer-mismatch"
    """The Hello names another node RID than the peer this connection belongs to."""
    WRONG_CONNECTION = "wrong-connection"
    """The message or Hello role does not belong on a connection of this role."""
    STALE_GENERATION = "stale-generation"
    """From a replaced run of the peer, or a reply addressed to another run of this node."""


@attrs.frozen
class PeerOpened:
    """The connection is open: ``node_rid`` in run ``generation`` speaks on it.

    Reported again, unchanged, when the same run repeats its Hello (after a reconnect).
    """

    node_rid: NodeRid
    generation: NodeGeneration


@attrs.frozen
class PeerRestarted:
    """The peer is running again as ``generation``: a new route (Rule 3)."""

    node_rid: NodeRid
    generation: NodeGeneration
    previous: NodeGeneration


@attrs.frozen
class Refused:
    """The message was dropped; the connection state did not change."""

    reason: RefusalReason
    detail: str
    message: WireMessage | None = None
    """The refused message when it decoded (MALFORMED has none)."""


Accepted = Send | Request | Reply | ErrorReply | Heartbeat
Inbound = Accepted | PeerOpened | PeerRestarted | Refused
"""What :meth:`PeerProtocol.receive` returns for one message."""


class PeerProtocol:
    """The receiving side of one connection that a peer opened to this node in ``role``.

    ``peer_rid``, when known (for instance from the transport's routing id), is the only node RID
    whose Hello opens this connection.
    """

    def __init__(
        self,
        *,
        mesh: MeshName,
        node_rid: NodeRid,
        generation: NodeGeneration,
        role: ConnectionRole,
        peer_rid: NodeRid | None = None,
        protocol_version: int = PROTOCOL_VERSION,
    ) -> None:
        self.mesh = mesh
        self.node_rid = node_rid
        self.generation = generation
        self.role = role
        self.protocol_version = protocol_version
        self._peer_rid = peer_rid
        self._peer_generation: NodeGeneration | None = None
        self._retired: deque[NodeGeneration] = deque(maxlen=RETIRED_GENERATIONS_KEPT)

    @property
    def is_open(self) -> bool:
        """True once a valid Hello opened the connection."""
        return self._peer_generation is not None

    @property
    def peer_rid(self) -> NodeRid | None:
        """The peer's node RID: given at creation, or learned from the opening Hello."""
        return self._peer_rid

    @property
    def peer_generation(self) -> NodeGeneration | None:
        """The run of the peer that speaks on this connection now, once open."""
        return self._peer_generation

    def receive(self, frames: Sequence[bytes]) -> Inbound:
        """Decode ``frames`` and judge the message; undecodable frames are Refused (MALFORMED)."""
        try:
            message = decode(frames)
        except ZLinkError as exc:
            return Refused(RefusalReason.MALFORMED, exc.message)
        return self.judge(message)

    def judge(self, message: WireMessage) -> Inbound:
        """The verdict on one decoded message (Rules 1-3)."""
        if isinstance(message, Hello):
            return self._judge_hello(message)
        if self._peer_generation is None:
            return Refused(RefusalReason.NOT_OPENED, "no Hello yet on this connection", message)
        if isinstance(message, Reply | ErrorReply):
            if self.role is not ConnectionRole.COMPLETION:
                return self._wrong_connection(message)
            addressed = message.requester_generation
            if addressed.value != self.generation.value:
                detail = f"addressed to run {addressed!r}, this run is {self.generation!r}"
                return Refused(RefusalReason.STALE_GENERATION, detail, message)
        elif isinstance(message, Send | Request) and self.role is not ConnectionRole.APPLICATION:
            return self._wrong_connection(message)
        return message

    def _wrong_connection(self, message: WireMessage) -> Refused:
        detail = f"{type(message).__name__} does not travel on the {self.role.name} connection"
        return Refused(RefusalReason.WRONG_CONNECTION, detail, message)

    def _judge_hello(self, hello: Hello) -> Inbound:
        if hello.protocol_version != self.protocol_version:
            detail = f"peer speaks version {hello.protocol_version}, not {self.protocol_version}"
            return Refused(RefusalReason.VERSION_MISMATCH, detail, hello)
        if hello.mesh != self.mesh:
            detail = f"peer is in mesh {hello.mesh}, this node in {self.mesh}"
            return Refused(RefusalReason.MESH_MISMATCH, detail, hello)
        if hello.role is not self.role:
            detail = f"a {hello.role.name} Hello on the {self.role.name} connection"
            return Refused(RefusalReason.WRONG_CONNECTION, detail, hello)
        if self._peer_rid is not None and hello.node_rid != self._peer_rid:
            detail = f"Hello from {hello.node_rid} on the connection of {self._peer_rid}"
            return Refused(RefusalReason.PEER_MISMATCH, detail, hello)
        current = self._peer_generation
        if current is None or hello.node_generation == current:
            self._peer_rid = hello.node_rid
            self._peer_generation = hello.node_generation
            return PeerOpened(hello.node_rid, hello.node_generation)
        if hello.node_generation in self._retired:
            detail = f"run {hello.node_generation!r} of {hello.node_rid} was already replaced"
            return Refused(RefusalReason.STALE_GENERATION, detail, hello)
        self._retired.append(current)
        self._peer_generation = hello.node_generation
        return PeerRestarted(hello.node_rid, hello.node_generation, current)
