"""Following a Spot or Actor that moved away (routing/messaging.py Rule 10; specs/relocation.md
RELOC-49).

After a Spot's move (host/moving.py) the source remembers where it went for
``HostConfig.relocation_follow_window`` seconds. Work from a peer that has not learned the move
yet (its routing cache still names this host) is relayed there instead of being refused as a
stale route or, for a one-way message, dropped; a Spot live here again (it moved back) is
served here.
"""

from __future__ import annotations

import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.ids import ActorId, NodeRid, SpotId

__all__ = ["Moved"]


class Moved:
    """The Spots and Actors that moved away from this host, each to its new owner until a
    deadline."""

    def __init__(
        self, spots: SpotCatalog[Activation], actors: ActorCatalog[ActorActivation]
    ) -> None:
        self._spots = spots
        self._actors = actors
        self._window = spots.node.config.relocation_follow_window
        self._moved: dict[SpotId | ActorId, tuple[NodeRid, float]] = {}

    def follow(self, unit: SpotId | ActorId, owner: NodeRid) -> None:
        """``unit`` moved to ``owner``: follow it from now on, for the window."""
        self._moved[unit] = (owner, trio.current_time() + self._window)

    def followed(
        self, unit: SpotId | ActorId, remote: Remote | None
    ) -> tuple[Remote, Owner] | None:
        """Where work for ``unit`` goes instead of here, or ``None``."""
        if not self._moved:
            return None
        moved = self._moved.get(unit)
        if moved is None or remote is None:
            return None
        here = self._spots.activations if type(unit) is SpotId else self._actors.actors
        if unit in here:
            return None
        owner, until = moved
        if trio.current_time() >= until:
            del self._moved[unit]
            return None
        return remote, Owner(owner)
