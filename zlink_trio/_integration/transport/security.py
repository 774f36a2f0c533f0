"""Peers authenticate: libzmq's CURVE security and a ZAP handler (specs/security.md SEC-1..SEC-7).

With a CURVE secret key in the mesh's configuration, every connection of the mesh is encrypted
and authenticated:

Rule 1: each RouteMesh has a ZeroMQ context of its own, and in it a ZAP handler (a REP socket at
``inproc://zeromq.zap.01``, read by one Trio task like every socket here). It is bound before the
ROUTERs, so no connection is ever accepted unchecked (libzmq accepts everyone when a context has
no handler).
Rule 2: the handler accepts a client only when its public key is the key of a peer the mesh was
given (``add_peer``): the live members of the mesh as the store shows them. It answers with that
peer's node RID as the connection's User-Id. An unknown key waits up to ``HOLD`` seconds for its
node's record to arrive (a peer may see this node before this node sees it), then is refused (ZAP
status 400), counted and logged (the first refusal of each key).
Rule 3: an accepted connection speaks only for its own node: the readers compare each message's
User-Id with the node the connection said it was in its Hello (``inbound.py``), so a member that
borrows another member's routing id is dropped and logged, not heard as the other. Nor can it take
the other's connection over at the ROUTER: a link's routing id ends in random bytes that only the
link's two ends know (``links.py``, SEC-7).
Rule 4: every DEALER is a CURVE client of the peer's published public key, so this node also knows
it talks to the node the store names, and nothing travels in clear.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections import Counter
from typing import Final, cast

import trio
import zmq
from zmq.utils import z85

__all__ = ["ZAP_ENDPOINT", "ZapHandler", "curve_public", "new_curve_secret"]

logger = logging.getLogger("zlink_trio.transport")

ZAP_ENDPOINT: Final = "inproc://zeromq.zap.01"
"""Where libzmq asks its context's ZAP handler (RFC 27)."""
UNAUTHENTICATED: Final = "unauthenticated"
"""Drop reason of a connection whose key belongs to no peer of the mesh."""


def new_curve_secret() -> bytes:
    """A fresh CURVE secret key, Z85-encoded (40 bytes)."""
    _public, secret = zmq.curve_keypair()
    return secret


def curve_public(secret: bytes) -> bytes:
    """The Z85 public key of the Z85 secret key ``secret``; ``ValueError`` for a bad key."""
    try:
        return zmq.curve_public(secret)
    except (zmq.ZMQError, ValueError, TypeError) as error:
        raise ValueError(f"not a Z85 CURVE secret key: {error}") from None


class ZapHandler:
    """The ZAP handler of one mesh's context (Rules 1, 2).

    A ROUTER, not the REP of RFC 27's examples, so a request for a key that is not known yet can
    wait: a peer that sees this node's record before this node sees its own connects at once,
    and libzmq does not retry a connection that ZAP refused. Such a request is answered when the
    key becomes a member's (``allow``) or refused after ``HOLD`` seconds."""

    HOLD: Final = 10.0

    def __init__(self, context: zmq.Context[zmq.Socket[bytes]], drops: Counter[str]) -> None:
        self._drops = drops
        self._members: dict[bytes, str] = {}
        """Binary public key -> the node RID it authenticates."""
        self._waiting: dict[bytes, list[tuple[float, list[bytes]]]] = {}
        """Binary key -> (refuse-at, request) of requests held for it."""
        self._logged: set[bytes] = set()
        self._accepted: list[tuple[list[bytes], str]] = []
        """Held requests whose key became a member's, for ``serve`` to answer."""
        self._wake = trio.CancelScope()
        self._socket = context.socket(zmq.ROUTER)
        self._socket.setsockopt(zmq.LINGER, 0)
        self._socket.bind(ZAP_ENDPOINT)

    def allow(self, node_rid: str, public_key: bytes) -> None:
        """Accept connections with the Z85 ``public_key`` as ``node_rid`` (a peer's run); held
        requests for it are answered now."""
        self.forget(node_rid)  # a new run of the peer replaces its old key
        key = z85.decode(public_key)
        self._members[key] = node_rid
        held = self._waiting.pop(key, ())
        if held:
            # Answered by ``serve``, the socket's one owner (socket.py Rule 2): a send from
            # this task could take the edge its wait needs and leave it asleep for good.
            self._accepted.extend((request, node_rid) for _, request in held)
            self._wake.cancel()

    def held(self) -> int:
        """How many requests wait for their key to become a member's (diagnostics, tests)."""
        return sum(len(requests) for requests in self._waiting.values())

    def forget(self, node_rid: str) -> None:
        """Accept no new connection as ``node_rid`` (it left the mesh)."""
        for key, rid in list(self._members.items()):
            if rid == node_rid:
                del self._members[key]

    async def serve(self) -> None:
        """Answer ZAP requests until the socket is closed (Rule 2)."""
        socket = self._socket
        fd = socket.fileno()
        try:
            while True:
                accepted, self._accepted = self._accepted, []
                for request, rid in accepted:
                    self._reply(request, rid)
                try:
                    request = socket.recv_multipart(zmq.NOBLOCK)
                except zmq.Again:
                    self._refuse_overdue()
                    if self._accepted:
                        continue
                    if not cast(int, socket.get(zmq.EVENTS)) & zmq.POLLIN:  # socket.py Rule 1
                        with trio.CancelScope(deadline=self._next_overdue()) as self._wake:
                            await trio.lowlevel.wait_readable(fd)
                    continue
                self._judge(request)
        except trio.ClosedResourceError:
            return

    def _judge(self, request: list[bytes]) -> None:
        # [client, b"", version, request id, domain, address, (server's) routing id, mechanism,
        # credentials]
        if len(request) < 9 or request[2] != b"1.0":
            self._refuse(request, b"500", b"bad request")
            return
        key = request[8]
        rid = self._members.get(key) if request[7] == b"CURVE" else None
        if rid is not None:
            self._reply(request, rid)
        elif request[7] == b"CURVE" and len(key) == 32:
            refuse_at = trio.current_time() + self.HOLD
            self._waiting.setdefault(key, []).append((refuse_at, request))
        else:
            self._refuse(request, b"400", b"not a member of this mesh")

    def _next_overdue(self) -> float:
        times = [held[0][0] for held in self._waiting.values() if held]
        return min(times, default=math.inf)

    def _refuse_overdue(self) -> None:
        now = trio.current_time()
        for key, held in list(self._waiting.items()):
            while held and held[0][0] <= now:
                self._refuse(held.pop(0)[1], b"400", b"not a member of this mesh")
            if not held:
                del self._waiting[key]

    def _reply(self, request: list[bytes], rid: str) -> None:
        self._send(request, b"200", b"OK", rid.encode())

    def _refuse(self, request: list[bytes], status: bytes, text: bytes) -> None:
        self._drops[UNAUTHENTICATED] += 1
        key = request[8] if len(request) > 8 else b""
        if key not in self._logged and len(self._logged) < 1024:
            self._logged.add(key)
            logger.warning(
                "refused a connection from %s: %s",
                request[5].decode(errors="replace") if len(request) > 5 else "?",
                text.decode(),
            )
        self._send(request, status, text, b"")

    def _send(self, request: list[bytes], status: bytes, text: bytes, user: bytes) -> None:
        request_id = request[3] if len(request) > 3 else b""
        with contextlib.suppress(zmq.ZMQError):  # the connection asking is gone: no answer
            self._socket.send_multipart(
                [request[0], b"", b"1.0", request_id, status, text, user, b""], zmq.NOBLOCK
            )

    def close(self) -> None:
        trio.lowlevel.notify_closing(self._socket.fileno())
        self._socket.close(linger=0)
