"""What ``Remote.owner_of`` answers about a target (remote.py Rules 1 and 2): a live remote
``Owner``, or ``STALE`` for a record whose owner is not live. Kept apart from ``remote.py`` so
that callers and tests name the answers without the transport's side of routing."""

from __future__ import annotations

from zlink_trio.ids import ActorId, NodeRid, SpotId, StableTypeName

__all__ = ["STALE", "Owner", "Target"]

Target = SpotId | ActorId


class _Stale:
    __slots__ = ()

    def __repr__(self) -> str:
        return "STALE"


STALE = _Stale()
"""``owner_of``'s answer for a record whose owner is not live (remote.py Rule 2)."""


class Owner:
    """A live remote owner of a target: the node to send to, and the target's stable type when
    its record said it (a sender checks its handler, messaging.py Rule 9)."""

    __slots__ = ("node_rid", "type_name")

    def __init__(self, node_rid: NodeRid, type_name: StableTypeName | None = None) -> None:
        self.node_rid = node_rid
        self.type_name = type_name
