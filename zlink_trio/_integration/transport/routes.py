"""Who a peer is on the wire, and what the layer above is told about routes (TRN-5, TRN-15).

- :func:`routing_identity`: the one form of a node run's routing identity.
- :func:`link_identity` / :func:`names_run`: the ZeroMQ routing id of one link of a run (its
  routing identity and random bytes of the link's own), and the check a receiver makes of it.
- :class:`PeerRun`: one run of a peer node (node RID and generation); a restart is a new run.
- :class:`RouteUp` / :class:`RouteLost`: the route changes a RouteMesh reports.
"""

from __future__ import annotations

import hashlib
import secrets

import attrs

from zlink_trio.ids import NodeGeneration, NodeRid

__all__ = [
    "LINK_NONCE_BYTES",
    "PeerRun",
    "RouteChange",
    "RouteLost",
    "RouteUp",
    "link_identity",
    "loggable",
    "names_run",
    "routing_identity",
]

_IDENTITY_TAG = b"Z"  # non-zero first byte: libzmq reserves ids that start with 0x00
_RUN_IDENTITY_BYTES = len(_IDENTITY_TAG) + 8 + 16  # the tag, the generation, the RID's digest
LINK_NONCE_BYTES = 16
"""Random bytes that end every link's routing id: 2**128 values nobody outside the link guesses."""
_LINK_IDENTITY_BYTES = _RUN_IDENTITY_BYTES + LINK_NONCE_BYTES


def routing_identity(node_rid: NodeRid, generation: NodeGeneration) -> bytes:
    """The routing identity of run ``generation`` of node ``node_rid``: 25 bytes, never parsed;
    every routing id of the run's links starts with it (:func:`link_identity`).

    A node RID may be 255 bytes, more than the ZeroMQ routing id limit with the generation added,
    so the RID travels as a digest; the Hello names the RID in full, and a receiver checks that
    the routing id it came from starts with this function of the Hello's RID and generation
    (:func:`names_run`, TRN-2).
    """
    digest = hashlib.blake2b(node_rid.value.encode("utf-8"), digest_size=16).digest()
    return _IDENTITY_TAG + generation.value.to_bytes(8, "big") + digest


def link_identity(node_rid: NodeRid, generation: NodeGeneration) -> bytes:
    """A fresh ZeroMQ routing id for one link (one DEALER) of run ``generation`` of ``node_rid``:
    its :func:`routing_identity` and ``LINK_NONCE_BYTES`` random bytes drawn now (TRN-1).

    Every link made, also a link made anew for the same run, gets its own. The random part
    travels only inside the link's own handshake (encrypted under CURVE), so no one else can
    claim a live link's routing id and have the ROUTER hand it over (SEC-7); and a link made
    anew never meets its old connection at the ROUTER.
    """
    return routing_identity(node_rid, generation) + secrets.token_bytes(LINK_NONCE_BYTES)


def names_run(identity: bytes, node_rid: NodeRid, generation: NodeGeneration) -> bool:
    """True when ``identity`` is a link routing id of run ``generation`` of ``node_rid``."""
    return len(identity) == _LINK_IDENTITY_BYTES and identity.startswith(
        routing_identity(node_rid, generation)
    )


def loggable(identity: bytes) -> bytes:
    """What a log may show of the routing id ``identity``: without the random part of a link's
    routing id, which must stay known to the link's two ends only (SEC-7); any other whole."""
    if len(identity) == _LINK_IDENTITY_BYTES:
        return identity[:_RUN_IDENTITY_BYTES]
    return identity


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
