"""The route client: sends and requests addressed by SpotId (specs/spots.md SPOT-16..SPOT-18).

Arguments are checked here, at the call site, before anything is submitted (ERR-3.1): a ``str``
id is converted once to a ``SpotId`` (ID-6.4), and a ``SpotRef`` is refused because it only ever
names an incarnation to close (SPOT-18).
"""

from __future__ import annotations

from typing import TypeVar

from zlink_trio._runtime.calls.actor_calls import ActorRequestCall, ActorSendCall
from zlink_trio._runtime.calls.spot_calls import SpotRequestCall, SpotSendCall
from zlink_trio._runtime.calls.targets import actor_id_of, spot_id_of
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio.ids import ActorId, SpotId

__all__ = ["Route"]

R = TypeVar("R")


class Route:
    """Sends and requests to Spots and Actors; ``host.route`` and ``context.route``."""

    def __init__(self, messaging: Messaging) -> None:
        self._messaging = messaging

    def send_to_spot(self, spot_id: SpotId | str, message: object) -> SpotSendCall:
        """A single-use one-way call to the Spot ``spot_id``; ``await .submit()`` sends it."""
        return SpotSendCall(self._messaging, spot_id_of(spot_id), message)

    def request_to_spot(
        self, spot_id: SpotId | str, request: object, *, reply_type: type[R]
    ) -> SpotRequestCall[R]:
        """A single-use request to the Spot ``spot_id`` whose reply is a ``reply_type``."""
        return SpotRequestCall(self._messaging, spot_id_of(spot_id), request, reply_type)

    def send_to_actor(self, actor_id: ActorId | str, message: object) -> ActorSendCall:
        """A single-use one-way call to the Actor ``actor_id``."""
        return ActorSendCall(self._messaging, actor_id_of(actor_id), message)

    def request_to_actor(
        self, actor_id: ActorId | str, request: object, *, reply_type: type[R]
    ) -> ActorRequestCall[R]:
        """A single-use request to the Actor ``actor_id`` whose reply is a ``reply_type``."""
        return ActorRequestCall(self._messaging, actor_id_of(actor_id), request, reply_type)
