"""The RouteMesh transport on ZeroMQ, driven by Trio (specs/transport.md, TRN-*).

What the runtime calls: :func:`open_route_mesh` with a :class:`MeshConfig` and an ``on_message``
coroutine function gives a :class:`RouteMesh` (``send``, ``request``, ``reply``, ``add_peer``,
``remove_peer``, ``route_changes``, ``close``). Peers are :class:`PeerAddress` values; a peer's
run is a :class:`PeerRun`; route changes are :class:`RouteUp` and :class:`RouteLost`. No zmq type
appears in this surface.

- ``socket``: the Trio side of pyzmq (one owner task per socket, FD waits, EVENTS re-checks).
- ``mesh``: the RouteMesh: peers, admission, requests, route changes, shutdown.
- ``links``: the mesh's sockets: the bound ROUTERs and the DEALER pair of each peer.
- ``inbound``: handshake, judging and dropping of what arrives on a bound ROUTER.
- ``liveness`` / ``heartbeats``: routes to peer runs, heard / lost; which peers are watched, and
  the Heartbeats sent to them and answered.
- ``pending``: the pending-reply table.
- ``retries`` / ``capacity``: peers whose links failed, tried again; the socket limit from
  ``max_peers``, the sockets and files a mesh holds, the open-file check at start.
- ``routes`` / ``config``: routing identity and link routing ids, route events; configuration
  values.
"""

from zlink_trio._integration.transport.config import MeshConfig, PeerAddress
from zlink_trio._integration.transport.inbound import OVERSIZED
from zlink_trio._integration.transport.mesh import (
    LATE_REPLY,
    OnMessage,
    RouteMesh,
    open_route_mesh,
)
from zlink_trio._integration.transport.routes import (
    PeerRun,
    RouteChange,
    RouteLost,
    RouteUp,
    link_identity,
    routing_identity,
)
from zlink_trio._integration.transport.security import (
    UNAUTHENTICATED,
    curve_public,
    new_curve_secret,
)

__all__ = [
    "LATE_REPLY",
    "OVERSIZED",
    "MeshConfig",
    "OnMessage",
    "PeerAddress",
    "PeerRun",
    "RouteChange",
    "RouteLost",
    "RouteMesh",
    "RouteUp",
    "UNAUTHENTICATED",
    "curve_public",
    "link_identity",
    "new_curve_secret",
    "open_route_mesh",
    "routing_identity",
]
