"""The route client: sends and requests addressed by SpotId (specs/spots.md SPOT-16..SPOT-18).

Arguments are checked here, at the call site, before anything is submitted (ERR-3.1): a ``str``
id is converted once to a ``SpotId`` (ID-6.4), and a ``SpotRef`` is refused because it only ever
names an incarnation to close (SPOT-18).
"""

from __future__ import annotations

from typing import TypeVar

from zlink_trio._runtime.calls import (
    ActorRequestCall,
    ActorSendCall,
    SpotRequestCall,
    SpotSendCall,
)
from zlink_trio._runtime.node import LocalNode
from zlink_trio.ids import ActorId, SpotId

__all__ = ["Route", "actor_id_of", "spot_id_of"]

R = TypeVar("R")


def spot_id_of(value: object) -> SpotId:
    """``value`` as a SpotId: a ``SpotId`` or a ``str``; anything else is a ``TypeError``."""
    if isinstance(value, SpotId):
        return value
    if isinstance(value, str):
        return SpotId(value)
    raise TypeError(f"a Spot is addressed by a SpotId or str, not {type(value).__name__}")


def actor_id_of(value: object) -> ActorId:
    """``value`` as an ActorId: an ``ActorId`` or a ``str``; anything else is a ``TypeError``."""
    if isinstance(value, ActorId):
        return value
    if isinstance(value, str):
        return ActorId(value)
    raise TypeError(f"an Actor is addressed by an ActorId or str, not {type(value).__name__}")


class Route:
    """Sends and requests to Spots and Actors; ``host.route`` and ``context.route``."""

    def __init__(self, node: LocalNode) -> None:
        self._node = node

    def send_to_spot(self, spot_id: SpotId | str, message: object) -> SpotSendCall:
        """A single-use one-way call to the Spot ``spot_id``; ``await .submit()`` sends it."""
        return SpotSendCall(self._node, spot_id_of(spot_id), message)

    def request_to_spot(
        self, spot_id: SpotId | str, request: object, *, reply_type: type[R]
    ) -> SpotRequestCall[R]:
        """A single-use request to the Spot ``spot_id`` whose reply is a ``reply_type``."""
        return SpotRequestCall(self._node, spot_id_of(spot_id), request, reply_type)

    def send_to_actor(self, actor_id: ActorId | str, message: object) -> ActorSendCall:
        """A single-use one-way call to the Actor ``actor_id``."""
        return ActorSendCall(self._node, actor_id_of(actor_id), message)

    def request_to_actor(
        self, actor_id: ActorId | str, request: object, *, reply_type: type[R]
    ) -> ActorRequestCall[R]:
        """A single-use request to the Actor ``actor_id`` whose reply is a ``reply_type``."""
        return ActorRequestCall(self._node, actor_id_of(actor_id), request, reply_type)
