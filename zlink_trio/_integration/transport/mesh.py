"""RouteMesh: this node's connections to its peer nodes (specs/transport.md, TRN-7, TRN-10..18,
TRN-23, TRN-24).

What the runtime calls (no zmq type crosses this surface; callers pass and receive ``_wire``
messages, ids, bytes and ``ZLinkError``):

- ``async with open_route_mesh(config, on_message) as mesh``: binds, connects ``config.peers``,
  runs the readers and the liveness watch; leaving the block closes everything. ``add_peer`` and
  ``remove_peer`` change the peer list at runtime.
- ``send`` completes at admission into the local queue (TRN-10), ``request`` gives the ``Reply``
  or ``ZLinkError`` (TRN-14), ``reply`` answers on the completion connection; ``on_message`` is
  awaited for each message received; ``route_changes`` receives ``RouteUp`` / ``RouteLost``;
  ``end_requests``, ``end_sends`` and the idempotent ``close``; ``drops``, ``traffic`` count.

Theory of operation. Each node binds two ROUTERs, one per connection role, each with exactly one
reader task, and connects a DEALER pair towards each peer: an application link with a send HWM
and a completion link without one. Those sockets are ``links.py``'s (:class:`MeshSockets`); this
module decides what is sent where and when links change.
Rule 1: a send is admitted to a run that is up and to nothing else; it waits only on its own
peer's link, and that wait ends by capacity, by the link being closed for route loss
(UNAVAILABLE) or for shutdown (SHUTTING_DOWN). Route loss therefore always closes the run's links
(and opens fresh ones, with a fresh Hello, so nothing queued for a lost run reaches a later one).
Rule 2: a request's entry is registered before its frames are submitted; see ``pending.py``.
Rule 3: closing marks the mesh closed, closes every link (so nothing is sent afterwards), fails
pending requests and cancels the tasks; the ROUTERs close when the tasks have ended.
Rule 4: a route whose peer's links failed is not up for the layer above (``is_up``) while they
wait for their retry (TRN-29); when they are made, the route is reported up again.

Longer than 400 lines: the surface and the route bookkeeping share one table of routes and one
channel of route changes; the sockets, handshake, liveness and pending replies have their own.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Final, cast

import trio

from zlink_trio._integration.transport.config import MeshConfig, PeerAddress
from zlink_trio._integration.transport.heartbeats import Heartbeats
from zlink_trio._integration.transport.inbound import Deliver, InboundConnections
from zlink_trio._integration.transport.links import MeshSockets
from zlink_trio._integration.transport.liveness import Opening, Route, Verdict
from zlink_trio._integration.transport.pending import TIMED_OUT, PendingReplies
from zlink_trio._integration.transport.routes import PeerRun, RouteChange, RouteLost, RouteUp
from zlink_trio._integration.transport.socket import OutboundLink
from zlink_trio._integration.transport.traffic import Traffic
from zlink_trio._wire import (
    ConnectionRole,
    ErrorReply,
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

LATE_REPLY: Final = "late-reply"  # drop reason of a reply whose request had ended
SENDS_PER_CHECKPOINT: Final = 16
"""A send that never waits lets other tasks run once per this many sends."""
_UNAVAILABLE: Final = ErrorKind.UNAVAILABLE
_SHUTTING_DOWN: Final = ErrorKind.SHUTTING_DOWN


class RouteMesh:
    """This node's RouteMesh; made and owned by :func:`open_route_mesh`."""

    def __init__(self, config: MeshConfig, on_message: OnMessage) -> None:
        self.config = config
        self.drops: Counter[str] = Counter()
        """Messages dropped, by reason: a ``RefusalReason`` value, ``oversized``, ``late-reply``."""
        self.traffic = Traffic()  # what was sent to and received from each peer (traffic.py)
        self._routes: dict[NodeRid, Route] = {}
        self._pending = PendingReplies(config.max_in_flight_per_peer)
        self._closed = False
        self._scope = trio.CancelScope()
        self._until_checkpoint = SENDS_PER_CHECKPOINT
        self._send_changes, self.route_changes = trio.open_memory_channel[RouteChange](math.inf)
        self._sockets = MeshSockets(config, self.drops)  # binds the ROUTERs
        self._links = self._sockets.links  # read here; changed through self._sockets only
        self._heartbeats = Heartbeats(
            config, self._routes, self._links, self._pending, self.traffic
        )
        self.application_endpoint: str = self._sockets.application_endpoint
        """The endpoint peers connect to for this node's application connection."""
        self.completion_endpoint: str = self._sockets.completion_endpoint
        """The endpoint peers connect to for this node's completion connection."""
        inbound = {
            "mesh": config.mesh,
            "node_rid": config.node_rid,
            "generation": config.generation,
            "max_frame_bytes": config.max_frame_bytes,
            "drops": self.drops,
            "traffic": self.traffic,
            "routes": self._routes,
            "opened": self._opened,
            "answer": self._heartbeats.answer,
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
        config = self.config
        return PeerAddress(config.node_rid, self.application_endpoint, self.completion_endpoint)

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
        """The run of ``peer`` that is up now, if any; not while this node's links to it wait
        for their retry (Rule 4)."""
        route = self._routes.get(peer)
        if route is None or not route.up or self._sockets.waits(peer):
            return None
        return route.run

    def add_peer(self, address: PeerAddress) -> None:
        """Connect to ``address`` (idempotent for the same address; a new address replaces);
        links that cannot be made now are logged and tried again, never raised (TRN-29)."""
        if self._closed:
            raise ZLinkError(_SHUTTING_DOWN, "the RouteMesh is closed")
        if address.node_rid == self.config.node_rid:
            raise ValueError("a node is not its own peer")
        current = self._sockets.address(address.node_rid)
        if current != address:
            self.remove_peer(address.node_rid)  # nothing for a new peer; a new address replaces
            self._sockets.connect(address)

    def remove_peer(self, node_rid: NodeRid) -> None:
        """Disconnect from ``node_rid``: its waiting sends and pending requests end UNAVAILABLE."""
        message = f"{node_rid} was removed from the peers"
        if not self._sockets.disconnect(node_rid, message):
            return
        route = self._routes.get(node_rid)
        if route is not None and route.run is not None:
            self._pending.fail(ZLinkError(_UNAVAILABLE, message), route.run)

    async def send(self, peer: NodeRid, message: Send, *, until: float | None = None) -> None:
        """Submit ``message`` to ``peer``; returns when the local queue accepted it (TRN-10). At
        the high-water mark it waits for capacity, shielded and without a time limit (TRN-11);
        it ends otherwise only with ``UNAVAILABLE`` (no route, route lost) or ``SHUTTING_DOWN``.
        ``until`` (Trio's clock) bounds that wait for the framework's own one-way words, which
        end ``UNAVAILABLE`` then (a move's commit: the target settles it from the store).
        """
        link, _run = self._route_to(peer)
        frames = self._sockets.checked(encode(message))
        if link.try_send(frames):
            self.traffic.sent[peer] += 1
            self._until_checkpoint -= 1
            if not self._until_checkpoint:
                self._until_checkpoint = SENDS_PER_CHECKPOINT
                await trio.lowlevel.cancel_shielded_checkpoint()
            return
        with trio.CancelScope(shield=True):
            with trio.move_on_at(math.inf if until is None else until):
                while True:
                    await link.wait_capacity()
                    if link.try_send(frames):
                        self.traffic.sent[peer] += 1
                        return
        raise ZLinkError(_UNAVAILABLE, f"{peer} took no more messages before the word's deadline")

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
        on_submitted: Callable[[], object] | None = None,
        budget: Callable[[], float] | None = None,
    ) -> Reply:
        """Send a Request to ``peer`` and return its Reply (TRN-14).

        ``timeout`` (seconds) covers admission and the reply wait; the Request carries what is left
        of it when submitted, or ``budget()`` (a caller timing itself out on a clock of its own).
        ``on_submitted`` is called once the Request is in the peer's queue, before the reply wait,
        so a caller can order what it submits next behind it (TRN-26). Ends with ``ZLinkError``:
        the ErrorReply's kind, DEADLINE_EXCEEDED, UNAVAILABLE (no route, route lost) or
        SHUTTING_DOWN; caller cancellation raises ``trio.Cancelled``; a late reply is dropped.
        """
        # The reply wait has no cancel scope: the pending table ends the entry at its deadline
        # (pending.py); only a wait for capacity is inside one, which ends with the entry too.
        current_time = trio.current_time
        deadline = current_time() + timeout
        link, run = self._route_to(peer)
        # Registered before submitting (seed 002 §10).
        route, entry = self._pending.register(run, deadline)
        reply_route = ReplyRouteId(route)
        try:
            submitted = False
            while not submitted:
                budget_us = int((deadline - current_time() if budget is None else budget()) * 1e6)
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
                submitted = link.try_send(self._sockets.checked(frames))
                if not submitted:
                    with trio.move_on_at(deadline) as entry.admission:
                        await link.wait_capacity()
                    entry.admission = None
            if submitted:
                self.traffic.sent[peer] += 1
                if on_submitted is not None:
                    on_submitted()
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
        """Send ``message`` to ``origin`` on the completion connection, which never waits;
        ``UNAVAILABLE`` when ``origin`` is not a peer, not up, or replaced by a new run,
        ``SHUTTING_DOWN`` after close."""
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
        if not links.completion.try_send(self._sockets.checked(encode(message))):
            raise ZLinkError(_UNAVAILABLE, "the completion connection did not take the reply")
        self.traffic.sent[origin.node_rid] += 1

    def end_requests(self, error: ZLinkError) -> int:
        """End every pending request with ``error`` (its host shuts down and settles what it
        sent); sends, replies and new requests go on until :meth:`close`. Returns how many."""
        return self._pending.fail(error)

    def end_sends(self, error: ZLinkError) -> None:
        """End every send waiting at a peer's high-water mark with ``error``, and every later
        one that would wait (its host shuts down and sends nothing new, TRN-25); sends that find
        room, replies and the serving of peers go on until :meth:`close`."""
        self._sockets.end_application_waits(error.kind, error.message)

    def close(self) -> None:
        """Stop sending and serving (idempotent); everything waiting ends SHUTTING_DOWN (TRN-23)."""
        if self._closed:
            return
        self._closed = True
        message = "the RouteMesh is closed"
        self._sockets.close_links(_SHUTTING_DOWN, message)
        self._pending.fail(ZLinkError(_SHUTTING_DOWN, message))
        self._send_changes.close()
        self._scope.cancel()

    # --- tasks ---------------------------------------------------------------------------------

    async def _run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        batch = self.config.receive_batch
        with self._scope:
            async with trio.open_nursery() as nursery:
                self._sockets.start(
                    nursery,
                    self._application_inbound.receive,
                    self._completion_inbound.receive_now,
                    batch,
                    self._connected,
                )
                nursery.start_soon(self._keep_alive)
                nursery.start_soon(self._pending.expire_forever)
                for address in self.config.peers:
                    self.add_peer(address)
                task_status.started()

    async def _keep_alive(self) -> None:
        # Heartbeats go only where work is outstanding (heartbeats.py): an idle mesh wakes here
        # once per interval and sends nothing.
        interval = self.config.heartbeat_interval
        while True:
            await trio.sleep(interval)
            for route, verdict in self._heartbeats.tick(trio.current_time()):
                if verdict is Verdict.LOST:
                    self._lose(route, "silent for longer than the liveness window")
                elif verdict is Verdict.UP and route.run is not None and not self._closed:
                    self._send_changes.send_nowait(RouteUp(route.run))

    # --- helpers -------------------------------------------------------------------------------

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
        self._sockets.renew(run.node_rid, message)  # nothing queued for a lost run may leave
        self._pending.fail(ZLinkError(_UNAVAILABLE, message), run)
        self._send_changes.send_nowait(RouteLost(run, reason))

    def _connected(self, node_rid: NodeRid) -> None:
        # A route its peer opened before this node's links were made is up only now (Rule 4).
        if (run := self.is_up(node_rid)) is not None and not self._closed:
            self._send_changes.send_nowait(RouteUp(run))

    def _complete(self, message: Reply | ErrorReply) -> None:
        if not self._pending.complete(message):
            self.drops[LATE_REPLY] += 1


@asynccontextmanager
async def open_route_mesh(config: MeshConfig, on_message: OnMessage) -> AsyncIterator[RouteMesh]:
    """Run this node's RouteMesh for the body of the ``async with`` block (TRN-23, TRN-24).

    The sockets are bound before the body runs (read the endpoints from the mesh). Leaving the
    block closes the mesh (:meth:`RouteMesh.close`), then its sockets and context; messages
    admitted before the close may still leave for ``config.linger`` seconds (links.py).
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
        mesh._sockets.close_routers()
        await mesh._sockets.end()
