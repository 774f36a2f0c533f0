"""The Spot manager: create, get-or-create and close User Spots (specs/spots.md SPOT-3..SPOT-6,
SPOT-32..SPOT-36)."""

from __future__ import annotations

from zlink_trio._runtime.calls.spot_calls import SpotCreateCall
from zlink_trio._runtime.calls.targets import spot_id_of
from zlink_trio._runtime.routing.closing import close
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio.ids import SpotRef, StableTypeName

__all__ = ["SpotManager"]


class SpotManager:
    """User Spot creation and closing; ``host.spots`` and ``context.spots``."""

    def __init__(self, messaging: Messaging) -> None:
        self._messaging = messaging
        self._spots = messaging.spots

    def create(self, spot_type: str) -> SpotCreateCall:
        """A single-use call creating a User Spot of ``spot_type`` under a generated id (a
        lowercase UUID4)."""
        return SpotCreateCall(self._spots, None, StableTypeName(spot_type))

    def get_or_create(self, spot_id: str, spot_type: str) -> SpotCreateCall:
        """A single-use call returning the Ready User Spot ``spot_id`` of ``spot_type``, creating
        it when the id is free."""
        return SpotCreateCall(self._spots, spot_id_of(spot_id), StableTypeName(spot_type))

    async def close(self, spot_ref: SpotRef) -> bool:
        """Close exactly the incarnation ``spot_ref`` names, on whichever host owns it: ``True``
        once closed, ``False`` if it no longer exists; ``INVALID_OPERATION`` for another
        generation or a non-User Spot, ``UNAVAILABLE`` while it is already closing or when its
        host cannot be reached."""
        if not isinstance(spot_ref, SpotRef):
            raise TypeError(f"close() takes a SpotRef, not {type(spot_ref).__name__}")
        return await close(self._messaging, spot_ref)
