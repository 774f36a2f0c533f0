"""Closing a User Spot incarnation by its ``SpotRef``, here or at the host the ref names
(specs/spots.md SPOT-92; messaging.py Rule 7).

On this host it closes directly; on another, through a ``zlink.CloseSpot`` request that the
owner's inbound side answers with what its own ``close`` returned.
"""

from __future__ import annotations

from zlink_trio._runtime.declarations.system import CloseSpot, SpotClosed
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.spots import creation
from zlink_trio.ids import SpotRef

__all__ = ["close"]


async def close(messaging: Messaging, ref: SpotRef) -> bool:
    """Close the User Spot incarnation ``ref`` names, here or at the host ``ref`` names."""
    node = messaging.node
    node.check_admitting()
    remote = messaging.remote
    if ref.node_rid == node.node_rid or ref.mesh_name != node.mesh or remote is None:
        return await creation.close(messaging.spots, ref)
    config = node.config
    # The owner waits for on_closing and the record's release: the call gets as long, plus
    # one request timeout for the way there and back.
    wait = config.closing_timeout + config.store_release_timeout + config.request_timeout
    answer = await remote.request(
        Owner(ref.node_rid),
        ref.spot_id,
        CloseSpot(ref.object_generation.value),
        SpotClosed,
        {},
        None,
        node.clock.now() + wait,
    )
    assert isinstance(answer, SpotClosed)  # remote.request checked the reply's class
    return answer.closed
