"""The RouteMesh's ZeroMQ sockets: its two bound ROUTERs and a DEALER pair per peer (TRN-1,
TRN-2, TRN-5..7, TRN-9, TRN-18, TRN-24, TRN-28, SEC-7).

:class:`MeshSockets` makes, configures, starts and closes every socket of one RouteMesh; no other
module of the mesh creates a socket or sets a socket option. The mesh (``mesh.py``) decides when
a peer is connected, renewed or dropped and what a send, request or reply may do; this module
carries it out on the sockets.

- Two ROUTERs, one per connection role (seed 002 §15), bound when :class:`MeshSockets` is made,
  each read by exactly one reader task (``socket.py``), started by :meth:`MeshSockets.start`.
  They only receive. A frame above twice the frame limit makes libzmq drop that connection
  (MAXMSGSIZE); one between the limit and that guard is counted and dropped by ``inbound.py``.
- Towards each peer a :class:`PeerLinks`: an application link (send HWM ``config.send_hwm``) and
  a completion link (no HWM: replies never wait behind application data, TRN-6), each an
  :class:`OutboundLink` with its own owner task, and each with a Hello queued before anything
  else, whenever the connection comes up (TRN-2).

A DEALER per peer and role, not one connecting ROUTER (TRN-5), because a ROUTER's POLLOUT says
nothing about one peer's queue: with ROUTER_MANDATORY a full peer gives EAGAIN while POLLOUT stays
true as long as any other peer has room, so a sender waiting for *its* peer could only spin or
guess. A lost run's links are closed without linger and replaced by fresh ones with a fresh Hello
(:meth:`MeshSockets.renew`), so nothing queued for a lost run reaches a later one (TRN-18).

Routing ids and handover (TRN-1, TRN-28, SEC-7). Each DEALER gets a routing id of its own,
:func:`link_identity`: the run's routing identity and 16 random bytes, drawn whenever a link is
made (also by ``renew``). The ROUTERs keep ``ROUTER_HANDOVER``: when libzmq reconnects a DEALER
after its connection dropped, it comes back with the same routing id, possibly while our ROUTER
still holds the old connection (a connection's end waits until the reader has read what it left,
so a reader held by backpressure keeps it), and only handover lets the new connection in; without
it libzmq parks the new connection, unread, for good, and neither side is told. Handover would let
anyone who names a live link's routing id take it over, so no one but the link's two ends can
name it: the random part travels only in the link's own handshake, encrypted under CURVE.

Capacity and failures (TRN-29..31, ``capacity.py``, ``retries.py``). The context may hold the
sockets of ``config.max_peers`` peers (its ``MAX_SOCKETS`` is set from it), and no more than that
many peers have links at once. Making a peer's links can still fail (the peer limit, libzmq out
of sockets or the process out of files): the error is translated here, the half-made links are
closed, and the peer waits in :class:`ConnectRetries` to be tried again while it is wanted; the
mesh is told when links are made (``on_connected``), since a route may be up without them.

The mesh reads the peers' links through :attr:`MeshSockets.links`, a live read-only view of the
one table (its send path costs a single dict lookup), and changes the table only through the
methods here. Nothing here calls into the mesh: the readers' handlers are passed to
:meth:`MeshSockets.start`, so the imports go one way, from ``mesh.py`` to this module.
"""

from __future__ import annotations

import errno
from collections import Counter
from collections.abc import Awaitable, Callable, Mapping
from typing import Final

import trio
import zmq

from zlink_trio._integration.transport.capacity import (
    check_open_files,
    open_files_limit,
    socket_limit,
)
from zlink_trio._integration.transport.config import MeshConfig, PeerAddress
from zlink_trio._integration.transport.retries import ConnectRetries
from zlink_trio._integration.transport.routes import link_identity
from zlink_trio._integration.transport.security import ZapHandler, curve_public
from zlink_trio._integration.transport.socket import OutboundLink, read_messages, read_replies
from zlink_trio._wire import PROTOCOL_VERSION, ConnectionRole, Hello, encode
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid

__all__ = ["MeshSockets", "PeerLinks"]

_UNAVAILABLE: Final = ErrorKind.UNAVAILABLE
_BAD_ENDPOINT: Final = frozenset({errno.EINVAL, zmq.EPROTONOSUPPORT, zmq.ENOCOMPATPROTO})
"""What libzmq says of an endpoint it will never connect (not worth a retry)."""


class PeerLinks:
    """The DEALER pair towards one peer: where it was connected to, and one link per role."""

    __slots__ = ("address", "application", "completion")

    def __init__(
        self, address: PeerAddress, application: OutboundLink, completion: OutboundLink
    ) -> None:
        self.address = address
        self.application = application
        self.completion = completion

    def close(self, kind: ErrorKind, message: str, linger: float) -> None:
        """Close both links: their waiting senders raise ``ZLinkError(kind, message)``."""
        self.application.close(kind, message, linger)
        self.completion.close(kind, message, linger)


class MeshSockets:
    """Every ZeroMQ socket of one RouteMesh: its two bound ROUTERs and each peer's links."""

    def __init__(self, config: MeshConfig, drops: Counter[str]) -> None:
        """Bind both ROUTERs (after the ZAP handler, with security); a bind that fails raises
        ``ZLinkError(UNAVAILABLE)`` (TRN-9). ``drops`` counts refused connections."""
        self._config = config
        secret = config.curve_secret_key
        check_open_files(config.max_peers, secret is not None)  # a warning only (TRN-32)
        # A context per mesh: its ZAP handler is the context's, and it must be this mesh's
        # (security.py Rule 1). Its I/O thread lets what close admitted leave (TRN-22).
        self._context: zmq.Context[zmq.Socket[bytes]] = zmq.Context()
        self.socket_limit = socket_limit(config.max_peers, secret is not None)
        """The context's ``MAX_SOCKETS``, from ``config.max_peers`` (TRN-30)."""
        self._context.set(zmq.MAX_SOCKETS, self.socket_limit)
        self._curve = None if secret is None else (curve_public(secret), secret)
        self.zap: ZapHandler | None = None
        if secret is not None:
            self.zap = ZapHandler(self._context, drops)
        self._links: dict[NodeRid, PeerLinks] = {}
        self._retries = ConnectRetries(self._attach)
        self._on_connected: Callable[[NodeRid], None] = lambda node_rid: None
        self._nursery: trio.Nursery | None = None
        self._waits_ended: tuple[ErrorKind, str] | None = None
        try:
            self._application = self._bind(config.application_bind, config.receive_hwm)
            try:
                self._completion = self._bind(config.completion_bind, 0)
            except BaseException:
                self._application.close(linger=0)
                raise
        except BaseException:
            self._context.destroy(linger=0)  # the ZAP handler's socket with it
            raise
        self.application_endpoint: str = self._application.getsockopt_string(zmq.LAST_ENDPOINT)
        """Where the application ROUTER is bound (a ``*`` port resolved)."""
        self.completion_endpoint: str = self._completion.getsockopt_string(zmq.LAST_ENDPOINT)
        """Where the completion ROUTER is bound (a ``*`` port resolved)."""

    @property
    def links(self) -> Mapping[NodeRid, PeerLinks]:
        """The links of every peer by node RID: live, changed only by the methods below."""
        return self._links

    @property
    def waiting(self) -> frozenset[NodeRid]:
        """The peers whose links could not be made and wait to be tried again (TRN-29)."""
        return self._retries.waiting

    def waits(self, node_rid: NodeRid) -> bool:
        """Whether ``node_rid``'s links could not be made and wait to be tried again."""
        return self._retries.address(node_rid) is not None

    def address(self, node_rid: NodeRid) -> PeerAddress | None:
        """Where ``node_rid`` is connected, or waits to be connected again; None: not a peer."""
        links = self._links.get(node_rid)
        return self._retries.address(node_rid) if links is None else links.address

    def start(
        self,
        nursery: trio.Nursery,
        receive: Callable[[list[bytes], str | None], Awaitable[None]],
        receive_now: Callable[[list[bytes], str | None], None],
        batch: int,
        on_connected: Callable[[NodeRid], None],
    ) -> None:
        """Start the two ROUTER readers in ``nursery``; the links' owner tasks and the retries
        of peers whose links failed run there too.

        ``receive`` is awaited for each message of the application ROUTER (while it waits, that
        ROUTER is not read); ``receive_now`` is called for each one of the completion ROUTER;
        ``on_connected`` is called for a peer whose links were made by :meth:`connect` or a retry.
        """
        self._nursery = nursery
        self._on_connected = on_connected
        nursery.start_soon(self._retries.run)
        if self.zap is not None:
            nursery.start_soon(self.zap.serve)
        users = self._curve is not None  # each message says who sent it (security.py Rule 3)
        nursery.start_soon(read_messages, self._application, receive, batch, users)
        # Replies come singly and each wakes a waiting caller: read them one by one.
        nursery.start_soon(read_replies, self._completion, receive_now, batch, users)

    def connect(self, address: PeerAddress) -> None:
        """Connect a DEALER pair to ``address``, replacing any table entry for its node; when
        the links cannot be made now, log it and try again later (TRN-29).

        Raises ``ValueError`` for an address that can never be connected (TRN-9).
        """
        curve = self._curve
        if curve is not None and address.curve_key is None:
            raise ValueError(f"{address.node_rid} publishes no CURVE key: it runs without security")
        if curve is None and address.curve_key is not None:
            raise ValueError(f"{address.node_rid} requires CURVE security and this node has none")
        self._retries.discard(address.node_rid)
        # A member may connect here before this node's links to it are made (security.py).
        if self.zap is not None and address.curve_key is not None:
            self.zap.allow(address.node_rid.value, address.curve_key)
        try:
            self._attach(address)
        except ZLinkError as error:
            self._retries.failed(address, error)

    def renew(self, node_rid: NodeRid, message: str) -> None:
        """Replace the links of ``node_rid``, if any, by fresh ones to the same address (or,
        when they cannot be made now, retry them, TRN-29).

        The old links close at once: their waiting senders raise ``ZLinkError(UNAVAILABLE,
        message)`` and nothing they hold leaves (a lost run, TRN-18).
        """
        links = self._links.pop(node_rid, None)
        if links is not None:
            links.close(_UNAVAILABLE, message, 0)  # nothing queued for a lost run may leave
            try:
                self._links[node_rid] = self._connect(links.address)
            except ZLinkError as error:
                self._retries.failed(links.address, error)

    def disconnect(self, node_rid: NodeRid, message: str) -> bool:
        """Close and forget the links of ``node_rid`` and stop retrying them; their waiting
        senders raise ``ZLinkError(UNAVAILABLE, message)`` (TRN-7). False when it had none."""
        self._retries.discard(node_rid)
        if self.zap is not None:
            self.zap.forget(node_rid.value)
        links = self._links.pop(node_rid, None)
        if links is None:
            return False
        links.close(_UNAVAILABLE, message, self._config.linger)
        return True

    def end_application_waits(self, kind: ErrorKind, message: str) -> None:
        """End every wait for capacity on an application link, now and on links made later
        (TRN-25); the links stay open, so replies and what still finds room go on."""
        self._waits_ended = (kind, message)
        for links in self._links.values():
            links.application.end_waits(kind, message)

    def close_links(self, kind: ErrorKind, message: str) -> None:
        """Close every peer's links and forget them; what was admitted may leave for
        ``config.linger`` seconds (TRN-24)."""
        for links in self._links.values():
            links.close(kind, message, self._config.linger)
        self._links.clear()
        for node_rid in self._retries.waiting:
            self._retries.discard(node_rid)

    def checked(self, frames: list[bytes]) -> list[bytes]:
        """``frames``; ``PROTOCOL_ERROR`` for a frame over the frame limit, which the receiver
        would drop (TRN-27)."""
        limit = self._config.max_frame_bytes
        largest = max(map(len, frames))  # one C-level pass: this is on every send
        if largest > limit:
            raise ZLinkError(
                ErrorKind.PROTOCOL_ERROR,
                f"a frame of {largest} bytes is over the frame limit of {limit} bytes",
            )
        return frames

    def close_routers(self) -> None:
        """Close both ROUTERs and the ZAP handler; their readers return (call once the links
        are closed, then :meth:`end`)."""
        for socket in (self._application, self._completion):
            trio.lowlevel.notify_closing(socket.fileno())
            socket.close(linger=0)  # the ROUTERs only receive: nothing of ours is queued there
        if self.zap is not None:
            self.zap.close()

    async def end(self) -> None:
        """End the context once every socket is closed: what the links admitted leaves within
        their linger (TRN-22). libzmq's ``term`` blocks for that, so it runs in a thread, bounded
        by the linger; past it the context is left to end on its own."""
        with trio.CancelScope(shield=True), trio.move_on_after(self._config.linger + 1.0):
            await trio.to_thread.run_sync(self._context.term, abandon_on_cancel=True)

    def _bind(self, endpoint: str, receive_hwm: int) -> zmq.Socket[bytes]:
        socket = self._context.socket(zmq.ROUTER)
        try:
            # A DEALER that libzmq reconnects keeps its routing id (see the module's docstring).
            socket.setsockopt(zmq.ROUTER_HANDOVER, 1)
            socket.setsockopt(zmq.RCVHWM, receive_hwm)
            # libzmq drops the connection of a peer whose frame exceeds this hard guard; a frame
            # between the configured limit and the guard is counted and dropped (inbound.py).
            socket.setsockopt(zmq.MAXMSGSIZE, 2 * self._config.max_frame_bytes)
            socket.setsockopt(zmq.LINGER, 0)
            if self._curve is not None:
                socket.setsockopt(zmq.CURVE_SERVER, 1)
                socket.setsockopt(zmq.CURVE_SECRETKEY, self._curve[1])
                socket.setsockopt(zmq.ZAP_DOMAIN, self._config.mesh.value.encode())
            socket.bind(endpoint)
        except BaseException as error:
            socket.close(linger=0)
            if isinstance(error, zmq.ZMQError):  # no binding error crosses the surface (TRN-9)
                raise ZLinkError(_UNAVAILABLE, f"cannot bind {endpoint}: {error}") from None
            raise
        return socket

    def _attach(self, address: PeerAddress) -> None:
        """Make and keep the links of ``address`` within ``max_peers`` (TRN-30), or raise
        ``ZLinkError`` (try again later) or ``ValueError`` (never)."""
        limit = self._config.max_peers
        if address.node_rid not in self._links and len(self._links) >= limit:
            raise ZLinkError(
                _UNAVAILABLE,
                f"this node has links to {limit} peers, its max_peers: raise max_peers"
                " (HostConfig.max_peers) for a larger mesh",
            )
        self._links[address.node_rid] = self._connect(address)
        self._on_connected(address.node_rid)

    def _connect(self, address: PeerAddress) -> PeerLinks:
        """Both links of ``address``, their owners started; ``ZLinkError(UNAVAILABLE)`` when
        libzmq cannot make them now, ``ValueError`` for an endpoint it never connects."""
        assert self._nursery is not None  # links are made once the mesh runs
        config = self._config
        links: list[OutboundLink] = []
        try:
            for endpoint, hwm, role in (
                (address.application_endpoint, config.send_hwm, ConnectionRole.APPLICATION),
                (address.completion_endpoint, 0, ConnectionRole.COMPLETION),
            ):
                link = self._open_link(endpoint, hwm, address.curve_key)
                links.append(link)
                hello = Hello(
                    PROTOCOL_VERSION, config.mesh, config.node_rid, config.generation, role
                )
                # Without ZMQ_IMMEDIATE the DEALER's queue exists from connect on, so the Hello
                # is queued first, whenever the connection comes up (TRN-2).
                if not link.try_send(encode(hello)):
                    raise ZLinkError(
                        ErrorKind.INTERNAL_FAILURE, f"could not greet {address.node_rid}"
                    )
        except BaseException as error:
            for link in links:
                link.close(_UNAVAILABLE, "the links were not made", 0)
            if isinstance(error, zmq.ZMQError):  # no binding error crosses the surface (TRN-9)
                raise self._link_error(address, error) from None
            raise
        for link in links:
            self._nursery.start_soon(link.run_owner)
        if self._waits_ended is not None:
            links[0].end_waits(*self._waits_ended)
        return PeerLinks(address, links[0], links[1])

    def _open_link(self, endpoint: str, hwm: int, curve_key: bytes | None) -> OutboundLink:
        """One DEALER connected to ``endpoint``; the one place a link meets libzmq, so any
        ``zmq.ZMQError`` it raises is :meth:`_connect`'s to translate."""
        config = self._config
        socket = self._context.socket(zmq.DEALER)
        try:
            # A routing id of this link's own, unknown to anyone but its peer (SEC-7).
            socket.setsockopt(zmq.ROUTING_ID, link_identity(config.node_rid, config.generation))
            socket.setsockopt(zmq.SNDHWM, hwm)
            socket.setsockopt(zmq.LINGER, int(config.linger * 1000))
            if self._curve is not None:
                assert curve_key is not None  # connect() refused a peer without
                socket.setsockopt(zmq.CURVE_SERVERKEY, curve_key)
                socket.setsockopt(zmq.CURVE_PUBLICKEY, self._curve[0])
                socket.setsockopt(zmq.CURVE_SECRETKEY, self._curve[1])
            socket.connect(endpoint)
        except BaseException:
            socket.close(linger=0)
            raise
        return OutboundLink(socket)

    def _link_error(self, address: PeerAddress, error: zmq.ZMQError) -> Exception:
        """What a caller is told of ``error`` while making links to ``address`` (TRN-9, TRN-30):
        ``ValueError`` for an endpoint libzmq never connects, else ``ZLinkError(UNAVAILABLE)``
        that says, for EMFILE, which limits were met and which settings raise them."""
        if error.errno in _BAD_ENDPOINT:
            return ValueError(f"cannot connect to {address.node_rid}: {error}")
        text = f"cannot make the links to {address.node_rid}: {error}"
        if error.errno == errno.EMFILE:
            files = open_files_limit()
            text += (
                f" (this node's ZeroMQ context may hold {self.socket_limit} sockets, set from"
                f" max_peers={self._config.max_peers}: raise HostConfig.max_peers; the process"
                f" may open {'any number of' if files is None else files} files"
                " (RLIMIT_NOFILE): raise it with ulimit -n)"
            )
        return ZLinkError(_UNAVAILABLE, text)
