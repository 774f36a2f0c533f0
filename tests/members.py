"""The tests' base for a User Spot that takes no member Actors.

Every User Spot class defines ``on_actor_join``, ``on_joined_actor`` and ``on_leave_actor``
(REG-5.9); most Spots of the tests never take an Actor, so they inherit this base's: every join
is rejected, so no Actor ever joins or leaves.
"""

from __future__ import annotations

import zlink_trio as zl


class NoMembers(zl.Spot):
    """A User Spot that rejects every join."""

    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        raise AssertionError(f"{actor!r} joined a Spot that rejects every join")

    async def on_leave_actor(self, actor: object) -> None:
        raise AssertionError(f"{actor!r} left a Spot that rejects every join")
