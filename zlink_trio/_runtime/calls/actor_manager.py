"""The Actor manager: create, get-or-create, find, destroy and disconnect notices; ``host.actors``
and ``context.actors`` (specs/actors.md ACT-1..ACT-9, ACT-22..ACT-28). What each does on the host
is ``actors/creation.py``."""

from __future__ import annotations

from zlink_trio._runtime.actors import creation
from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.calls.actor_calls import ActorCreateCall
from zlink_trio._runtime.calls.targets import actor_id_of
from zlink_trio.ids import ActorId, ActorRef, StableTypeName

__all__ = ["ActorManager"]


class ActorManager:
    """Actor creation and lookup; ``host.actors`` and ``context.actors``."""

    def __init__(self, actors: ActorCatalog[ActorActivation]) -> None:
        self._actors = actors

    def create(self, actor_id: ActorId | str, actor_type: str) -> ActorCreateCall:
        """A single-use call creating the Actor ``actor_id``; ``ALREADY_EXISTS`` if it exists."""
        return ActorCreateCall(
            self._actors, actor_id_of(actor_id), StableTypeName(actor_type), exclusive=True
        )

    def get_or_create(self, actor_id: ActorId | str, actor_type: str) -> ActorCreateCall:
        """A single-use call returning the Ready Actor ``actor_id``, creating it when free."""
        return ActorCreateCall(
            self._actors, actor_id_of(actor_id), StableTypeName(actor_type), exclusive=False
        )

    async def find(self, actor_id: ActorId | str) -> ActorRef | None:
        """The ``ActorRef`` of the Ready Actor ``actor_id``, or ``None``; creates nothing."""
        return await creation.find(self._actors, actor_id_of(actor_id))

    async def destroy(self, actor_ref: ActorRef) -> bool:
        """End exactly the incarnation ``actor_ref`` names: ``True`` once closed, ``False`` if it
        no longer exists; ``INVALID_OPERATION`` for another generation or an Actor still in a
        User Spot; ``UNAVAILABLE`` while a join is moving it or it is already closing."""
        if not isinstance(actor_ref, ActorRef):
            raise TypeError(f"destroy() takes an ActorRef, not {type(actor_ref).__name__}")
        return await creation.destroy(self._actors, actor_ref)

    async def notify_disconnected(self, actor_id: ActorId | str) -> bool:
        """Tell the Actor's current Spot that its client went away: runs that Spot's
        ``on_disconnect_actor`` once; ``False`` when no Ready Actor has the id here. Neither
        destroys the Actor nor changes its membership."""
        return await creation.notify_disconnected(self._actors, actor_id_of(actor_id))
