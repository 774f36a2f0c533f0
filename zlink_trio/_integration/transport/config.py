"""What a RouteMesh is told: its own identity, where it binds, its peers and its limits (TRN-1..3).

Peers are plain :class:`PeerAddress` values. Today they come from the host configuration; later the
Location Store publishes them. Either way the mesh takes an iterable at start and single peers at
runtime (``add_peer`` / ``remove_peer``), so the source of the list is not the transport's concern.
"""

from __future__ import annotations

import attrs

from zlink_trio._integration.transport.capacity import DEFAULT_MAX_PEERS, MAX_PEERS
from zlink_trio._integration.transport.pending import DEFAULT_MAX_IN_FLIGHT
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid

__all__ = ["MeshConfig", "PeerAddress"]


def _endpoint(_instance: object, attribute: attrs.Attribute[str], value: object) -> None:
    if type(value) is not str or "://" not in value:
        raise ValueError(f"{attribute.name} must be a ZeroMQ endpoint such as 'tcp://host:port'")


def _positive(_instance: object, attribute: attrs.Attribute[float], value: object) -> None:
    if type(value) not in (int, float) or not value > 0:  # type: ignore[operator]  # checked type
        raise ValueError(f"{attribute.name} must be a positive number, got {value!r}")


def _count(_instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or value < 1:
        raise ValueError(f"{attribute.name} must be a positive int, got {value!r}")


def _peer_count(_instance: object, attribute: attrs.Attribute[int], value: object) -> None:
    if type(value) is not int or not 1 <= value <= MAX_PEERS:
        raise ValueError(f"{attribute.name} must be an int from 1 to {MAX_PEERS}, got {value!r}")


def _optional_key(_instance: object, attribute: attrs.Attribute[bytes], value: object) -> None:
    if value is not None and (type(value) is not bytes or len(value) != 40):
        raise ValueError(f"{attribute.name} must be a 40-byte Z85 CURVE key or None")


@attrs.frozen
class PeerAddress:
    """Where the node ``node_rid`` listens: its application and its completion endpoint."""

    node_rid: NodeRid = attrs.field(validator=attrs.validators.instance_of(NodeRid))
    application_endpoint: str = attrs.field(validator=_endpoint)
    completion_endpoint: str = attrs.field(validator=_endpoint)
    curve_key: bytes | None = attrs.field(default=None, validator=_optional_key)
    """The node's Z85 CURVE public key (40 bytes); ``None`` for a node without security."""


@attrs.frozen(kw_only=True)
class MeshConfig:
    """One node's RouteMesh settings; every value is checked when the config is made."""

    mesh: MeshName = attrs.field(validator=attrs.validators.instance_of(MeshName))
    node_rid: NodeRid = attrs.field(validator=attrs.validators.instance_of(NodeRid))
    generation: NodeGeneration = attrs.field(validator=attrs.validators.instance_of(NodeGeneration))
    application_bind: str = attrs.field(default="tcp://127.0.0.1:*", validator=_endpoint)
    """Where the application ROUTER binds; a ``*`` port is chosen by the OS (read it back from
    ``RouteMesh.application_endpoint``)."""
    completion_bind: str = attrs.field(default="tcp://127.0.0.1:*", validator=_endpoint)
    peers: tuple[PeerAddress, ...] = attrs.field(default=(), converter=tuple)
    send_hwm: int = attrs.field(default=1000, validator=_count)
    """Messages queued towards one peer on the application connection before a send waits."""
    receive_hwm: int = attrs.field(default=1000, validator=_count)
    """Messages the application ROUTER queues per peer before that peer's sends wait."""
    heartbeat_interval: float = attrs.field(default=1.0, validator=_positive)
    """How often liveness is judged, and Heartbeats sent to the peers this node has outstanding
    work with (TRN-17); an idle peer is sent none."""
    liveness_window: float = attrs.field(default=3.0, validator=_positive)
    """Seconds of silence after which a peer with outstanding work is lost (TRN-17)."""
    max_frame_bytes: int = attrs.field(default=4 * 1024 * 1024, validator=_count)
    """Largest frame accepted; a larger one is counted and dropped (TRN-18)."""
    linger: float = attrs.field(default=0.5, validator=_positive)
    """Seconds that messages admitted before close may still take to leave (TRN-22)."""
    receive_batch: int = attrs.field(default=64, validator=_count)
    """Messages a reader takes before it lets other tasks run."""
    max_in_flight_per_peer: int = attrs.field(default=DEFAULT_MAX_IN_FLIGHT, validator=_count)
    """Requests to one peer run that may wait for replies at once; one more ends at once with
    ``UNAVAILABLE`` (pending.py, TRN-34)."""
    max_peers: int = attrs.field(default=DEFAULT_MAX_PEERS, validator=_peer_count)
    """Most peers this node has links to at once; its ZeroMQ context may hold their sockets
    (capacity.py, TRN-30). A peer beyond it is logged and tried again until one leaves."""
    curve_secret_key: bytes | None = attrs.field(default=None, validator=_optional_key)
    """This node's Z85 CURVE secret key: every connection is encrypted and only peers given
    with their public keys are accepted (security.py). ``None``: no security (a trusted
    network only)."""

    def __attrs_post_init__(self) -> None:
        if self.liveness_window <= self.heartbeat_interval:
            raise ValueError("liveness_window must be longer than heartbeat_interval")
        for peer in self.peers:
            if not isinstance(peer, PeerAddress):
                raise TypeError(f"peers takes PeerAddress values, not {type(peer).__name__}")
