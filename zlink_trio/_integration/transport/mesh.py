"""RouteMesh: this node's connections to its peer nodes (specs/transport.md, TRN-1..24).

What the runtime calls (no zmq type crosses this surface; callers pass and receive ``_wire``
messages, ids, bytes and ``ZLinkError``):

- ``async with open_route_mesh(config, on_message) as mesh``: binds both ROUTERs, connects to
  ``config.peers`` and runs the readers and the heartbeat; leaving the block closes everything.
- ``mesh.add_peer(PeerAddress)`` / ``mesh.remove_peer(node_rid)``: the peer list at runtime.
- ``await mesh.send(node_rid, Send)``: completes at admission into the local queue (TRN-8).
- ``await mesh.request(node_rid, ..., timeout=)``: the ``Reply``, or ``ZLinkError`` (TRN-12).
- ``mesh.reply(origin, Reply | ErrorReply)``: answers a request on the completion connection.
- ``on_message(origin, Send | Request)``: awaited by the application reader for each message.
- ``mesh.route_changes``: a receive channel of ``RouteUp`` / ``RouteLost``.
- ``mesh.end_requests(error)``: ends every pending request with ``error``; the mesh stays open.
- ``mesh.close()``: idempotent; ``mesh.drops``: bad input counted by reason.

Theory of operation. Each node binds two ROUTERs, one per connection role (seed 002 §15), and
each has exactly one reader task. Towards each peer it connects two DEALERs, an application link
(send HWM ``config.send_hwm``) and a completion link (no HWM: replies never wait behind
application data), each an :class:`OutboundLink` with its own owner task. A DEALER per peer and
role, not one connecting ROUTER, because a ROUTER's POLLOUT says nothing about one peer's queue:
with ROUTER_MANDATORY a full peer gives EAGAIN while POLLOUT stays true as long as any other
peer has room, so a sender waiting for *its* peer could only spin or guess (TRN-10).

Rule 1: a send is admitted to a run that is up and to nothing else; it waits only on its own
peer's link, and that wait ends by capacity, by the link being closed for route loss
(UNAVAILABLE) or for shutdown (SHUTTING_DOWN). Route loss therefore always closes the run's links
(and opens fresh ones, with a fresh Hello, so nothing queued for a lost run reaches a later one).
Rule 2: a request's entry is registered before its frames are submitted; see ``pending.py``.
Rule 3: closing marks the mesh closed, closes every link (so nothing is sent afterwards), fails
pending requests and cancels the tasks; the ROUTERs close when the tasks have ended.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final, cast

import trio
import zmq

from zlink_trio._integration.transport.config import MeshConfig, PeerAddress
from zlink_trio._integration.transport.inbound import Deliver, InboundConnections
from zlink_trio._integration.transport.liveness import Opening, Route, Verdict
from zlink_trio._integration.transport.pending import TIMED_OUT, PendingReplies
from zlink_trio._integration.transport.routes import (
    PeerRun,
    RouteChange,
    RouteLost,
    RouteUp,
    routing_identity,
)
from zlink_trio._integration.transport.socket import OutboundLink, read_messages, read_replies
from zlink_trio._wire import (
    PROTOCOL_VERSION,
    ConnectionRole,
    ErrorReply,
    Heartbeat,
    Hello,
    Metadata,
    Reply,
    ReplyRouteId,
    Request,
    Send,
    Target,
    encode,
)
from zlink_trio._wire import OperationId as OperationId
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeGeneration, NodeRid, StableTypeName

__all__ = ["LATE_REPLY", "OnMessage", "RouteMesh", "open_route_mesh"]

OnMessage = Callable[[PeerRun, Send | Request], Awaitable[None]]
"""Receives each application message; while it waits, that ROUTER is not read (backpressure)."""

LATE_REPLY: Final = "late-reply"
"""Drop reason of a reply whose request already ended (timeout, cancellation, loss)."""
SENDS_PER_CHECKPOINT: Final = 16
"""A send that never waits lets other tasks run once per this many sends."""
_HEARTBEAT: Final = encode(Heartbeat())
_UNAVAILABLE: Final = ErrorKind.UNAVAILABLE
_SHUTTING_DOWN: Final = ErrorKind.SHUTTING_DOWN


class _PeerLinks:
    __slots__ = ("address", "application", "completion")

    def __init__(
        self, address: PeerAddress, application: OutboundLink, completion: OutboundLink
    ) -> None:
        self.address = address
        self.application = application
        self.completion = completion

    def close(self, kind: ErrorKind, message: str, linger: float) -> None:
        self.application.close(kind, message, linger)
        self.completion.close(kind, message, linger)


class RouteMesh:
    """This node's RouteMesh; made and owned by :func:`open_route_mesh`."""

    def __init__(self, config: MeshConfig, on_message: OnMessage) -> None:
        self.config = config
        self.drops: Counter[str] = Counter()
        """Messages dropped, by reason: a ``RefusalReason`` value, ``oversized``, ``late-reply``."""
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context.instance()  # one per process
        self._routes: dict[NodeRid, Route] = {}
        self._links: dict[NodeRid, _PeerLinks] = {}
        self._pending = PendingReplies()
        self._closed = False
        self._scope = trio.CancelScope()
        self._nursery: trio.Nursery | None = None
        self._until_checkpoint = SENDS_PER_CHECKPOINT
        self._send_changes, self.route_changes = trio.open_memory_channel[RouteChange](math.inf)
        self._identity = routing_identity(config.node_rid, config.generation)
        self._application = self._bind(config.application_bind, config.receive_hwm)
        try:
            self._completion = self._bind(config.completion_bind, 0)
        except BaseException:
            self._application.close(linger=0)
            raise
        self.application_endpoint: str = self._application.getsockopt_string(zmq.LAST_ENDPOINT)
        """The endpoint peers connect to for this node's application connection."""
        self.completion_endpoint: str = self._completion.getsockopt_string(zmq.LAST_ENDPOINT)
        """The endpoint peers connect to for this node's completion connection."""
        inbound = {
            "mesh": config.mesh,
            "node_rid": config.node_rid,
            "generation": config.generation,
            "max_frame_bytes": config.max_frame_bytes,
            "drops": self.drops,
            "routes": self._routes,
            "opened": self._opened,
        }
        self._application_inbound = InboundConnections(
            role=ConnectionRole.APPLICATION,
            # The application role delivers only Send and Request (inbound.py checks the kind).
            deliver=cast(Deliver, on_message),
            **inbound,  # type: ignore[arg-type]  # the shared keywords above
        )
        self._completion_inbound = InboundConnections(
            role=ConnectionRole.COMPLETION,
            settle=self._complete,
            **inbound,  # type: ignore[arg-type]  # the shared keywords above
        )

    # --- the surface the runtime calls ----------------------------------------------------------

    @property
    def address(self) -> PeerAddress:
        """This node as a peer of others: what the Location Store will publish."""
        return PeerAddress(
            self.config.node_rid, self.application_endpoint, self.completion_endpoint
        )

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran; every send, request and reply then ends SHUTTING_DOWN."""
        return self._closed

    @property
    def pending_requests(self) -> int:
        """Requests of this node waiting for their reply now."""
        return len(self._pending)

    def waiting_sends(self, peer: NodeRid) -> int:
        """How many sends to ``peer`` wait for capacity now (0 for an unknown peer)."""
        links = self._links.get(peer)
        return 0 if links is None else links.application.waiting

    def is_up(self, peer: NodeRid) -> PeerRun | None:
        """The run of ``peer`` that is up now, if any."""
        route = self._routes.get(peer)
        return route.run if route is not None and route.up else None

    def add_peer(self, address: PeerAddress) -> None:
        """Connect to ``address`` (idempotent for the same address; a new address replaces)."""
        if self._closed:
            raise ZLinkError(_SHUTTING_DOWN, "the RouteMesh is closed")
        if address.node_rid == self.config.node_rid:
            raise ValueError("a node is not its own peer")
        current = self._links.get(address.node_rid)
        if current is not None:
            if current.address == address:
                return
            self.remove_peer(address.node_rid)
        self._links[address.node_rid] = self._connect(address)

    def remove_peer(self, node_rid: NodeRid) -> None:
        """Disconnect from ``node_rid``: its waiting sends and pending requests end UNAVAILABLE."""
        links = self._links.pop(node_rid, None)
        if links is None:
            return
        message = f"{node_rid} was removed from the peers"
        links.close(_UNAVAILABLE, message, self.config.linger)
        route = self._routes.get(node_rid)
        if route is not None and route.run is not None:
            self._pending.fail(ZLinkError(_UNAVAILABLE, message), route.run)

    async def send(self, peer: NodeRid, message: Send) -> None:
        """Submit ``message`` to ``peer``; returns when the local queue accepted it (TRN-8).

        At the high-water mark it waits until capacity returns, with no time limit and no
        cancellation (the wait is shielded, TRN-9); it ends otherwise only with
        ``ZLinkError(UNAVAILABLE)`` (no route, or the route is lost) or ``SHUTTING_DOWN``.
        """
        link, _run = self._route_to(peer)
        frames = encode(message)
        if link.try_send(frames):
            self._until_checkpoint -= 1
            if not self._until_checkpoint:
                self._until_checkpoint = SENDS_PER_CHECKPOINT
                await trio.lowlevel.cancel_shielded_checkpoint()
            return
        with trio.CancelScope(shield=True):
            while True:
                await link.wait_capacity()
                if link.try_send(frames):
                    return

    async def request(
        self,
        peer: NodeRid,
        *,
        operation_id: OperationId,
        target: Target,
        message_type: StableTypeName,
        payload: bytes,
        timeout: float,  # noqa: ASYNC109  # the budget travels in the Request; not a cancel scope
        instance_spot_type: StableTypeName | None = None,
        metadata: Metadata = (),
    ) -> Reply:
        """Send a Request to ``peer`` and return its Reply (TRN-12).

        ``timeout`` (seconds) covers admission and the reply wait; the Request carries what is
        left of it when it is submitted. Ends with ``ZLinkError``: the ErrorReply's kind,
        DEADLINE_EXCEEDED, UNAVAILABLE (no route, route lost) or SHUTTING_DOWN; caller
        cancellation raises ``trio.Cancelled``. A reply after the end is discarded.
        """
        # The reply wait has no cancel scope: the pending table ends the entry at its deadline
        # (pending.py). Only a request that must wait for capacity waits inside a scope, which
        # also ends when the entry does.
        current_time = trio.current_time
        deadline = current_time() + timeout
        link, run = self._route_to(peer)
        # Registered before submitting (seed 002 §10).
        route, entry = self._pending.register(run, deadline)
        reply_route = ReplyRouteId(route)
        try:
            submitted = False
            while not submitted:
                budget_us = int((deadline - current_time()) * 1_000_000)
                if budget_us <= 0 or entry.outcome is not None:  # out of time, or ended
                    break
                frames = encode(
                    Request(
                        operation_id,
                        reply_route,
                        target,
                        message_type,
                        payload,
                        budget_us,
                        instance_spot_type,
                        metadata,
                    )
                )
                submitted = link.try_send(frames)
                if not submitted:
                    with trio.move_on_at(deadline) as entry.admission:
                        await link.wait_capacity()
                    entry.admission = None
            if submitted:
                await entry.wait()
        finally:
            claimed = self._pending.claim(route, entry)
        outcome = entry.outcome
        if type(outcome) is Reply:
            return outcome
        if claimed or outcome is TIMED_OUT:
            raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"no reply from {peer} in {timeout} s")
        assert isinstance(outcome, ZLinkError)  # settled: a Reply or a ZLinkError
        raise outcome

    def reply(self, origin: PeerRun, message: Reply | ErrorReply) -> None:
        """Send ``message`` to ``origin`` on the completion connection, which never waits.

        Raises ``ZLinkError(UNAVAILABLE)`` when ``origin`` is not a peer, is not up, or was
        replaced by a new run; ``SHUTTING_DOWN`` after close.
        """
        if self._closed:
            raise ZLinkError(_SHUTTING_DOWN, "the RouteMesh is closed")
        route = self._routes.get(origin.node_rid)
        links = self._links.get(origin.node_rid)
        if (
            links is None
            or route is None
            or not route.up
            or (route.run is not origin and route.run != origin)
        ):
            raise ZLinkError(_UNAVAILABLE, f"no route to {origin.node_rid} for a reply")
        if not links.completion.try_send(encode(message)):
            raise ZLinkError(_UNAVAILABLE, "the completion connection did not take the reply")

    def end_requests(self, error: ZLinkError) -> int:
        """End every pending request with ``error`` (its host shuts down and settles what it
        sent); sends, replies and new requests go on until :meth:`close`. Returns how many."""
        return self._pending.fail(error)

    def close(self) -> None:
        """Stop sending and serving (idempotent); everything waiting ends SHUTTING_DOWN (TRN-21)."""
        if self._closed:
            return
        self._closed = True
        message = "the RouteMesh is closed"
        for links in self._links.values():
            links.close(_SHUTTING_DOWN, message, self.config.linger)
        self._links.clear()
        self._pending.fail(ZLinkError(_SHUTTING_DOWN, message))
        self._send_changes.close()
        self._scope.cancel()

    # --- tasks ---------------------------------------------------------------------------------

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        batch = self.config.receive_batch
        with self._scope:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                nursery.start_soon(
                    read_messages, self._application, self._application_inbound.receive, batch
                )
                # Replies come singly and each wakes a waiting caller: read them one by one.
                nursery.start_soon(
                    read_replies, self._completion, self._completion_inbound.receive_now, batch
                )
                nursery.start_soon(self._keep_alive)
                nursery.start_soon(self._pending.expire_forever)
                for address in self.config.peers:
                    self.add_peer(address)
                task_status.started()

    async def _keep_alive(self) -> None:
        interval = self.config.heartbeat_interval
        window = self.config.liveness_window
        while True:
            await trio.sleep(interval)
            for links in list(self._links.values()):
                links.application.try_send(_HEARTBEAT)  # skipped at the HWM: the other one goes
                links.completion.try_send(_HEARTBEAT)
            now = trio.current_time()
            for route in list(self._routes.values()):
                verdict = route.tick(now, window)
                if verdict is Verdict.LOST:
                    self._lose(route, "silent for longer than the liveness window")
                elif verdict is Verdict.UP and route.run is not None and not self._closed:
                    self._send_changes.send_nowait(RouteUp(route.run))

    def _close_sockets(self) -> None:
        for socket in (self._application, self._completion):
            trio.lowlevel.notify_closing(socket.fileno())
            socket.close(linger=0)  # the ROUTERs only receive: nothing of ours is queued there

    # --- helpers -------------------------------------------------------------------------------

    def _bind(self, endpoint: str, receive_hwm: int) -> zmq.Socket[bytes]:
        socket = self._context.socket(zmq.ROUTER)
        try:
            socket.setsockopt(zmq.ROUTER_HANDOVER, 1)  # a link made anew keeps its routing id
            socket.setsockopt(zmq.RCVHWM, receive_hwm)
            # libzmq drops the connection of a peer whose frame exceeds this hard guard; a frame
            # between the configured limit and the guard is counted and dropped (inbound.py).
            socket.setsockopt(zmq.MAXMSGSIZE, 2 * self.config.max_frame_bytes)
            socket.setsockopt(zmq.LINGER, 0)
            socket.bind(endpoint)
        except BaseException as error:
            socket.close(linger=0)
            if isinstance(error, zmq.ZMQError):  # no binding error crosses the surface (TRN-9)
                raise ZLinkError(_UNAVAILABLE, f"cannot bind {endpoint}: {error}") from None
            raise
        return socket

    def _connect(self, address: PeerAddress) -> _PeerLinks:
        assert self._nursery is not None  # links are made once the mesh runs
        config = self.config
        links = []
        for endpoint, hwm, role in (
            (address.application_endpoint, config.send_hwm, ConnectionRole.APPLICATION),
            (address.completion_endpoint, 0, ConnectionRole.COMPLETION),
        ):
            socket = self._context.socket(zmq.DEALER)
            socket.setsockopt(zmq.ROUTING_ID, self._identity)
            socket.setsockopt(zmq.SNDHWM, hwm)
            socket.setsockopt(zmq.LINGER, int(config.linger * 1000))
            try:
                socket.connect(endpoint)
            except zmq.ZMQError as error:  # no binding error crosses the surface (TRN-9)
                socket.close(linger=0)
                raise ValueError(f"cannot connect to {endpoint}: {error}") from None
            link = OutboundLink(socket)
            hello = Hello(PROTOCOL_VERSION, config.mesh, config.node_rid, config.generation, role)
            # Without ZMQ_IMMEDIATE the DEALER's queue exists from connect on, so the Hello is
            # queued first, whenever the connection comes up (TRN-4).
            if not link.try_send(encode(hello)):
                link.close(_UNAVAILABLE, "the Hello was not queued", 0)
                raise ZLinkError(ErrorKind.INTERNAL_FAILURE, f"could not greet {address.node_rid}")
            self._nursery.start_soon(link.run_owner)
            links.append(link)
        return _PeerLinks(address, links[0], links[1])

    def _route_to(self, peer: NodeRid) -> tuple[OutboundLink, PeerRun]:
        if self._closed:
            raise ZLinkError(_SHUTTING_DOWN, "the RouteMesh is closed")
        links = self._links.get(peer)
        if links is None:
            raise ZLinkError(_UNAVAILABLE, f"{peer} is not a peer of this node")
        route = self._routes.get(peer)
        if route is None or not route.up or route.run is None:
            raise ZLinkError(_UNAVAILABLE, f"no route to {peer}: not connected")
        return links.application, route.run

    def _opened(self, node_rid: NodeRid, generation: NodeGeneration) -> PeerRun | None:
        route = self._routes.get(node_rid)
        if route is None:
            route = self._routes[node_rid] = Route(node_rid)
        opening = route.judge_opening(generation)
        if opening is Opening.STALE:
            return None
        if opening is Opening.SAME and route.up:
            route.heard = True
            return route.run
        if opening is Opening.RESTARTED and route.run is not None:
            old = route.run
            self._lose(route, f"restarted as run {generation!r}")
            self._application_inbound.forget(old)
            self._completion_inbound.forget(old)
        run = route.open(generation, trio.current_time())
        if not self._closed:
            self._send_changes.send_nowait(RouteUp(run))
        return run

    def _lose(self, route: Route, reason: str) -> None:
        run = route.run
        if not route.up or run is None or self._closed:
            return  # after close, close() has ended everything already
        route.up = False
        message = f"route to {run.node_rid} lost: {reason}"
        links = self._links.get(run.node_rid)
        if links is not None:
            links.close(_UNAVAILABLE, message, 0)  # nothing queued for a lost run may leave
            self._links[run.node_rid] = self._connect(links.address)
        self._pending.fail(ZLinkError(_UNAVAILABLE, message), run)
        self._send_changes.send_nowait(RouteLost(run, reason))

    def _complete(self, message: Reply | ErrorReply) -> None:
        if not self._pending.complete(message):
            self.drops[LATE_REPLY] += 1


@asynccontextmanager
async def open_route_mesh(config: MeshConfig, on_message: OnMessage) -> AsyncIterator[RouteMesh]:
    """Run this node's RouteMesh for the body of the ``async with`` block (TRN-21, TRN-22).

    The sockets are bound before the body runs (read the endpoints from the mesh). Leaving the
    block closes the mesh (:meth:`RouteMesh.close`) and then its sockets; messages admitted
    before the close may still leave for ``config.linger`` seconds, handled by libzmq's own
    I/O thread, so closing never blocks Trio.
    """
    mesh = RouteMesh(config, on_message)
    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(mesh._run)
            try:
                yield mesh
            finally:
                mesh.close()
    finally:
        mesh.close()
        mesh._close_sockets()
