"""Heartbeats on demand: which peers are watched, and the Heartbeats sent to them and answered
(specs/transport.md TRN-17; specs/decisions.md DEC-31).

A peer is *watched* while this node has outstanding work with it: a request of this node that
waits for its reply from the peer (``pending.py``), or a send that waits at the high-water mark
of the peer's application link. Once per heartbeat interval :meth:`Heartbeats.tick` judges every
route (``liveness.py``: only a watched one can be lost) and sends a Heartbeat to each watched
peer. A peer with nothing outstanding is sent nothing and not judged, so an idle mesh exchanges
nothing at all; hearing from a peer needs no Heartbeat of its own, since any accepted message of
its run counts.

Rule 1: Heartbeats travel on the completion link, never the application link. The completion
connection has no high-water mark and its reader at the peer never waits (TRN-6), so a Heartbeat
is queued and read even while the application connection is full and the peer's application
reader is held by its own backpressure: exactly when a send waits at that peer and is watched.
Rule 2: a Heartbeat from a peer's current run is answered with one Heartbeat to that peer,
unless this node sent the peer one within the last half interval. An answer to a Heartbeat that
was itself an answer is therefore skipped: two nodes never play ping-pong, and a peer that
watches this node is sent at most about one answer per interval.
Rule 3: a lost route whose links are open is sent a Heartbeat each interval too: the answer of
its run, which would otherwise have no reason to send anything, makes the route heard and so up
again (TRN-17).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Final

import trio

from zlink_trio._integration.transport.config import MeshConfig
from zlink_trio._integration.transport.links import PeerLinks
from zlink_trio._integration.transport.liveness import Route, Verdict
from zlink_trio._integration.transport.pending import PendingReplies
from zlink_trio._integration.transport.routes import PeerRun
from zlink_trio._integration.transport.traffic import Traffic
from zlink_trio._wire import Heartbeat, encode
from zlink_trio.ids import NodeRid

__all__ = ["Heartbeats"]

_HEARTBEAT: Final = encode(Heartbeat())
_UNCHANGED: Final = Verdict.UNCHANGED


class Heartbeats:
    """The liveness watch of one RouteMesh over its routes, links and pending requests."""

    __slots__ = ("_half", "_last_sent", "_links", "_pending", "_routes", "_sent", "_window")

    def __init__(
        self,
        config: MeshConfig,
        routes: Mapping[NodeRid, Route],
        links: Mapping[NodeRid, PeerLinks],
        pending: PendingReplies,
        traffic: Traffic,
    ) -> None:
        """``routes``, ``links`` and ``pending`` are the mesh's own, read live."""
        self._window = config.liveness_window
        self._half = config.heartbeat_interval / 2
        self._routes = routes
        self._links = links
        self._pending = pending
        self._sent = traffic.heartbeats_sent
        self._last_sent: dict[NodeRid, float] = {}

    def tick(self, now: float) -> list[tuple[Route, Verdict]]:
        """Judge every route and send this interval's Heartbeats (Rules 1 and 3); returns the
        routes the tick found lost or up again, for the mesh to act on."""
        busy = self._pending.peers()
        changed: list[tuple[Route, Verdict]] = []
        for route in list(self._routes.values()):
            peer = route.node_rid
            links = self._links.get(peer)
            watched = links is not None and (peer in busy or links.application.waiting > 0)
            verdict = route.tick(now, self._window, watched)
            if verdict is not _UNCHANGED:
                changed.append((route, verdict))
            elif links is not None and (watched if route.up else route.run is not None):
                self._send(peer, links, now)
        return changed

    def answer(self, run: PeerRun) -> None:
        """Answer a Heartbeat received from ``run``, its peer's current run (Rule 2)."""
        peer = run.node_rid
        links = self._links.get(peer)
        if links is None:
            return  # not a peer of this node (any more): nothing to answer on
        now = trio.current_time()
        if now - self._last_sent.get(peer, -math.inf) >= self._half:
            self._send(peer, links, now)

    def _send(self, peer: NodeRid, links: PeerLinks, now: float) -> None:
        if links.completion.try_send(_HEARTBEAT):  # no HWM: taken at once
            self._last_sent[peer] = now
            self._sent[peer] += 1
