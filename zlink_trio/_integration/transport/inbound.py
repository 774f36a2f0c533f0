"""The connections peers open to one of our ROUTERs: handshake, judging and bad input (TRN-4..7,
TRN-17..19).

Each bound ROUTER (application or completion) has one :class:`InboundConnections`. It turns the
multipart messages its reader receives into deliveries ``(PeerRun, message)`` and drops
everything else, counted by reason in the mesh's ``drops`` counter and logged with the peer.

Theory of operation. A connection is known by its ZeroMQ routing id. An unknown routing id is
listened to for one thing only, a Hello, and keeps no state until that Hello passes: the
``PeerProtocol`` of its node and role checks protocol version, mesh and role, and the routing id
must be exactly :func:`routing_identity` of the Hello's RID and generation. Only then is the
connection remembered, bound to the run it opened. Later messages go through the same
``PeerProtocol`` (role, stale replies) and are delivered only while their run is the route's
current run, so nothing of a replaced or refused run is ever served. Nothing here raises on bad
input: a reader that raised would stop serving every other peer.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import Final

from zlink_trio._integration.transport.routes import PeerRun, routing_identity
from zlink_trio._wire import (
    ConnectionRole,
    ErrorReply,
    Heartbeat,
    Hello,
    PeerOpened,
    PeerProtocol,
    PeerRestarted,
    RefusalReason,
    Refused,
    Reply,
    Request,
    Send,
    decode,
)
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid

__all__ = ["OVERSIZED", "InboundConnections"]

logger = logging.getLogger("zlink_trio.transport")

OVERSIZED: Final = "oversized"
"""Drop reason of a message with a frame above the configured frame limit."""

Delivered = Send | Request | Reply | ErrorReply
Deliver = Callable[[PeerRun, Delivered], Awaitable[None]]
Opened = Callable[[NodeRid, NodeGeneration], "PeerRun | None"]
"""The mesh's answer to a Hello that passed: the run now current, or None when it is stale."""


class _Connection:
    __slots__ = ("protocol", "run")

    def __init__(self, protocol: PeerProtocol, run: PeerRun) -> None:
        self.protocol = protocol
        self.run = run


class InboundConnections:
    """The peer connections of one bound ROUTER in ``role``."""

    def __init__(
        self,
        *,
        role: ConnectionRole,
        mesh: MeshName,
        node_rid: NodeRid,
        generation: NodeGeneration,
        max_frame_bytes: int,
        drops: Counter[str],
        current_run: Callable[[NodeRid], PeerRun | None],
        mark_heard: Callable[[NodeRid], None],
        opened: Opened,
        deliver: Deliver,
    ) -> None:
        self._role = role
        self._mesh = mesh
        self._node_rid = node_rid
        self._generation = generation
        self._max_frame = max_frame_bytes
        self._drops = drops
        self._current_run = current_run
        self._mark_heard = mark_heard
        self._opened = opened
        self._deliver = deliver
        self._connections: dict[bytes, _Connection] = {}
        self._protocols: dict[NodeRid, PeerProtocol] = {}
        self._accepted: tuple[type, ...] = (
            (Send, Request) if role is ConnectionRole.APPLICATION else (Reply, ErrorReply)
        )

    def forget(self, run: PeerRun) -> None:
        """Drop the connections of ``run`` (it was replaced): its frames are unknown from now."""
        self._connections.pop(routing_identity(run.node_rid, run.generation), None)

    async def receive(self, frames: list[bytes]) -> None:
        """Judge one multipart message from the ROUTER (routing id first) and deliver or drop it."""
        limit = self._max_frame
        for frame in frames:
            if len(frame) > limit:
                self._drop(frames[0], OVERSIZED, f"a frame is larger than {limit} bytes")
                return
        identity = frames[0]
        connection = self._connections.get(identity)
        if connection is None:
            self._open(identity, frames[1:])
            return
        verdict = connection.protocol.receive(frames[1:])
        run = connection.run
        if type(verdict) in self._accepted:
            if self._current_run(run.node_rid) is not run:
                self._drop(identity, RefusalReason.STALE_GENERATION.value, "a replaced run")
                return
            self._mark_heard(run.node_rid)
            await self._deliver(run, verdict)  # type: ignore[arg-type]  # checked just above
        elif type(verdict) is Heartbeat:
            if self._current_run(run.node_rid) is run:
                self._mark_heard(run.node_rid)
        elif type(verdict) is Refused:
            self._drop(identity, verdict.reason.value, verdict.detail)
        else:  # PeerOpened / PeerRestarted: a Hello again, e.g. from a link made anew
            assert isinstance(verdict, PeerOpened | PeerRestarted)  # all other verdicts are above
            if identity != routing_identity(verdict.node_rid, verdict.generation):
                detail = "a Hello of another run on an open connection"
                self._drop(identity, RefusalReason.PEER_MISMATCH.value, detail)
                return
            current = self._opened(verdict.node_rid, verdict.generation)
            if current is None:
                self._drop(identity, RefusalReason.STALE_GENERATION.value, "a replaced run")
                return
            connection.run = current

    def _open(self, identity: bytes, body: list[bytes]) -> None:
        try:
            hello = decode(body)
        except ZLinkError as error:
            self._drop(identity, RefusalReason.MALFORMED.value, error.message)
            return
        if type(hello) is not Hello:
            self._drop(identity, RefusalReason.NOT_OPENED.value, "no Hello on this connection")
            return
        rid, generation = hello.node_rid, hello.node_generation
        if identity != routing_identity(rid, generation):
            detail = f"routing id is not the one of {rid} run {generation!r}"
            self._drop(identity, RefusalReason.PEER_MISMATCH.value, detail)
            return
        protocol = self._protocols.get(rid)
        fresh = protocol is None
        if protocol is None:
            protocol = PeerProtocol(
                mesh=self._mesh,
                node_rid=self._node_rid,
                generation=self._generation,
                role=self._role,
                peer_rid=rid,
            )
        verdict = protocol.judge(hello)
        if type(verdict) is Refused:
            self._drop(identity, verdict.reason.value, verdict.detail)
            return
        if fresh:
            self._protocols[rid] = protocol
        run = self._opened(rid, generation)
        if run is None:
            self._drop(identity, RefusalReason.STALE_GENERATION.value, "a replaced run")
            return
        self._connections[identity] = _Connection(protocol, run)

    def _drop(self, identity: bytes, reason: str, detail: str) -> None:
        drops = self._drops
        drops[reason] += 1
        count = drops[reason]
        if count & (count - 1) == 0:  # log the 1st, 2nd, 4th, 8th...: bounded under a flood
            logger.warning(
                "dropped a message from peer %r on the %s connection (%s, %d so far): %s",
                identity,
                self._role.name.lower(),
                reason,
                count,
                detail,
            )
