"""The benchmarks' base for a User Spot that takes no member Actors.

Every User Spot class defines ``on_actor_join``, ``on_joined_actor`` and ``on_leave_actor``
(specs/registration.md REG-5.9); the benchmarks' Spots never take an Actor, so they inherit
these: every join is rejected, so none ever joins or leaves.
"""

from __future__ import annotations

import zlink_trio as zl


class NoMembers(zl.Spot):
    """A User Spot that rejects every join."""

    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor
