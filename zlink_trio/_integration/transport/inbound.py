"""The connections peers open to one of our ROUTERs: handshake, judging and bad input (TRN-4..7,
TRN-17..19).

Each bound ROUTER (application or completion) has one :class:`InboundConnections`. It turns the
multipart messages its reader receives into deliveries ``(PeerRun, message)`` and drops
everything else, counted by reason in the mesh's ``drops`` counter and logged with the peer.

Theory of operation. A connection is known by its ZeroMQ routing id. An unknown routing id is
listened to for one thing only, a Hello, and keeps no state until that Hello passes: the
``PeerProtocol`` of its node and role checks protocol version, mesh and role, and the routing id
must be a link routing id of the Hello's RID and generation (:func:`names_run`). Only then is the
connection remembered, bound to the run it opened; a peer node has one link per role, so a
connection it opens replaces the one it opened before (a link made anew), whose leftovers are then
unknown. Later messages go through the same ``PeerProtocol`` (role, stale replies) and are
delivered only while their run is the route's current run, so nothing of a replaced or refused run
is ever served. Nothing here raises on bad input: a reader that raised would stop serving every
other peer.

The application ROUTER delivers with :meth:`InboundConnections.receive`, awaiting the layer
above (its backpressure); the completion ROUTER settles replies with
:meth:`InboundConnections.receive_now`, which never waits.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

from zlink_trio._integration.transport.liveness import Route
from zlink_trio._integration.transport.routes import PeerRun, loggable, names_run
from zlink_trio._integration.transport.traffic import Traffic
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

__all__ = ["OVERSIZED", "Deliver", "InboundConnections", "Settle"]

logger = logging.getLogger("zlink_trio.transport")

OVERSIZED: Final = "oversized"
"""Drop reason of a message with a frame above the configured frame limit."""

Delivered = Send | Request | Reply | ErrorReply
Deliver = Callable[[PeerRun, Delivered], Awaitable[None]]
Settle = Callable[[Reply | ErrorReply], None]
Opened = Callable[[NodeRid, NodeGeneration], "PeerRun | None"]
"""The mesh's answer to a Hello that passed: the run now current, or None when it is stale."""
Answer = Callable[[PeerRun], None]
"""Answers a Heartbeat of a route's current run (heartbeats.py Rule 2)."""


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
        traffic: Traffic,
        routes: Mapping[NodeRid, Route],
        opened: Opened,
        answer: Answer,
        deliver: Deliver | None = None,
        settle: Settle | None = None,
    ) -> None:
        """``routes``: the mesh's routes by node RID, read to serve only a route's current run
        and marked heard for each message of it; ``answer`` is called for each Heartbeat of a
        current run. ``deliver`` (awaited, for :meth:`receive`) or
        ``settle`` (called, for :meth:`receive_now`) takes each accepted message."""
        self._role = role
        self._mesh = mesh
        self._node_rid = node_rid
        self._generation = generation
        self._max_frame = max_frame_bytes
        self._drops = drops
        self._received = traffic.received
        self._heartbeats = traffic.heartbeats_received
        self._answer = answer
        self._routes = routes
        self._opened = opened
        self._deliver = deliver
        self._settle = settle
        self._connections: dict[bytes, _Connection] = {}
        self._opened_by: dict[NodeRid, bytes] = {}
        """The routing id of the connection each peer node opened last: its one link here."""
        self._protocols: dict[NodeRid, PeerProtocol] = {}
        self._accepted: tuple[type, ...] = (
            (Send, Request) if role is ConnectionRole.APPLICATION else (Reply, ErrorReply)
        )

    def forget(self, run: PeerRun) -> None:
        """Drop the connection of ``run`` (it was replaced): its frames are unknown from now."""
        identity = self._opened_by.get(run.node_rid)
        if identity is not None and self._connections[identity].run == run:
            del self._connections[identity], self._opened_by[run.node_rid]

    async def receive(self, frames: list[bytes], user: str | None = None) -> None:
        """Judge one multipart message from the ROUTER (routing id first) and deliver or drop it.
        ``user``: the node RID its connection was authenticated as (security.py Rule 3).

        Takes the list: the routing id is removed from it."""
        judged = self._judge(frames, user)
        if judged is not None:
            assert self._deliver is not None  # the application role's reader calls this
            await self._deliver(*judged)

    def receive_now(self, frames: list[bytes], user: str | None = None) -> None:
        """Judge one multipart message and settle or drop it, without waiting (replies)."""
        judged = self._judge(frames, user)
        if judged is not None:
            assert self._settle is not None  # the completion role's reader calls this
            self._settle(judged[1])  # type: ignore[arg-type]  # the completion role's kinds

    def _judge(self, frames: list[bytes], user: str | None) -> tuple[PeerRun, Delivered] | None:
        """The run and message to deliver, or None when the frames were handled here."""
        limit = self._max_frame
        if max(map(len, frames)) > limit:
            self._drop(frames[0], OVERSIZED, f"a frame is larger than {limit} bytes")
            return None
        identity = frames[0]
        del frames[0]  # the body: no copy of the list per message
        connection = self._connections.get(identity)
        if connection is None:
            self._open(identity, frames, user)
            return None
        run = connection.run
        if user is not None and user != run.node_rid.value:
            # A member's connection that borrows another member's routing id (security.py).
            detail = f"a connection authenticated as {user} speaks as {run.node_rid}"
            self._drop(identity, RefusalReason.PEER_MISMATCH.value, detail)
            return None
        verdict = connection.protocol.receive(frames)
        kind = type(verdict)
        if kind in self._accepted:
            self._received[run.node_rid] += 1
            route = self._routes.get(run.node_rid)
            if route is None or route.run is not run:
                self._drop(identity, RefusalReason.STALE_GENERATION.value, "a replaced run")
                return None
            route.heard = True
            return run, verdict  # type: ignore[return-value]  # checked just above
        if kind is Heartbeat:
            self._heartbeats[run.node_rid] += 1
            route = self._routes.get(run.node_rid)
            if route is not None and route.run is run:
                route.heard = True
                self._answer(run)
        elif type(verdict) is Refused:
            self._drop(identity, verdict.reason.value, verdict.detail)
        else:  # PeerOpened / PeerRestarted: a Hello again on an open connection
            assert isinstance(verdict, PeerOpened | PeerRestarted)  # all other verdicts are above
            if not names_run(identity, verdict.node_rid, verdict.generation):
                detail = "a Hello of another run on an open connection"
                self._drop(identity, RefusalReason.PEER_MISMATCH.value, detail)
                return None
            current = self._opened(verdict.node_rid, verdict.generation)
            if current is None:
                self._drop(identity, RefusalReason.STALE_GENERATION.value, "a replaced run")
                return None
            connection.run = current
        return None

    def _open(self, identity: bytes, body: list[bytes], user: str | None) -> None:
        try:
            hello = decode(body)
        except ZLinkError as error:
            self._drop(identity, RefusalReason.MALFORMED.value, error.message)
            return
        if type(hello) is not Hello:
            self._drop(identity, RefusalReason.NOT_OPENED.value, "no Hello on this connection")
            return
        rid, generation = hello.node_rid, hello.node_generation
        if user is not None and user != rid.value:
            detail = f"a connection authenticated as {user} says it is {rid}"
            self._drop(identity, RefusalReason.PEER_MISMATCH.value, detail)
            return
        if not names_run(identity, rid, generation):
            detail = f"routing id is not one of {rid} run {generation!r}"
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
        replaced = self._opened_by.get(rid)
        if replaced is not None:  # its link made anew: what the old one left is not served
            self._connections.pop(replaced, None)
        self._opened_by[rid] = identity
        self._connections[identity] = _Connection(protocol, run)

    def _drop(self, identity: bytes, reason: str, detail: str) -> None:
        drops = self._drops
        drops[reason] += 1
        count = drops[reason]
        if count & (count - 1) == 0:  # log the 1st, 2nd, 4th, 8th...: bounded under a flood
            logger.warning(
                "dropped a message from peer %r on the %s connection (%s, %d so far): %s",
                loggable(identity),  # not a link's random part (SEC-7)
                self._role.name.lower(),
                reason,
                count,
                detail,
            )
