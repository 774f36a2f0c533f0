"""Who a peer is on the wire, and what the layer above is told about routes (TRN-5, TRN-15).

- :func:`routing_identity`: the one form of a node run's ZeroMQ routing id.
- :class:`PeerRun`: one run of a peer node (node RID and generation); a restart is a new run.
- :class:`RouteUp` / :class:`RouteLost`: the route changes a RouteMesh reports.
"""

from __future__ import annotations

import hashlib

import attrs

from zlink_trio.ids import NodeGeneration, NodeRid

__all__ = ["PeerRun", "RouteChange", "RouteLost", "RouteUp", "routing_identity"]

_IDENTITY_TAG = b"Z"  # non-zero first byte: libzmq reserves ids that start with 0x00


def routing_identity(node_rid: NodeRid, generation: NodeGeneration) -> bytes:
    """The routing id of run ``generation`` of node ``node_rid``: 25 bytes, never parsed.

    A node RID may be 255 bytes, more than the ZeroMQ routing id limit with the generation added,
    so the RID travels as a digest; the Hello names the RID in full, and a receiver checks that
    this function of the Hello's RID and generation gives the routing id it came from (TRN-5).
    """
    digest = hashlib.blake2b(node_rid.value.encode("utf-8"), digest_size=16).digest()
    return _IDENTITY_TAG + generation.value.to_bytes(8, "big") + digest


@attrs.frozen
class PeerRun:
    """One run of a peer node. Equal only for the same RID and the same generation."""

    node_rid: NodeRid
    generation: NodeGeneration


@attrs.frozen
class RouteUp:
    """``run`` opened its connections: it can be sent to and served."""

    run: PeerRun


@attrs.frozen
class RouteLost:
    """``run`` can no longer be sent to; what was waiting for it ended UNAVAILABLE."""

    run: PeerRun
    reason: str
    """For people: silence past the liveness window, a restart, or the peer was removed."""


RouteChange = RouteUp | RouteLost
