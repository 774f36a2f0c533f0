"""The context of one Spot activation (specs/api.md API-17; specs/spots.md SPOT-38; specs/
shutdown.md SHUT-4.3; specs/timers.md; specs/completion.md CMP-3.1).

A context belongs to one activation: once that activation has closed, using it raises
``INVALID_OPERATION`` before anything is submitted, so a stale reference can never act for a
newer incarnation (SHUT-4.3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from zlink_trio._runtime.node import LocalNode
from zlink_trio._runtime.route import Route
from zlink_trio._runtime.spot_timers import SpotTimers
from zlink_trio._runtime.spots import SpotManager
from zlink_trio._runtime.worker_calls import Workers
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotCloseReason, SpotId, SpotKind, SpotRef

if TYPE_CHECKING:
    from zlink_trio._runtime.activation import Activation
    from zlink_trio._runtime.actors import ActorManager

__all__ = ["HostReach", "SpotContext"]


class HostReach:
    """What the context of a Spot and of an Actor share: the host's clients, handed out only
    while the activation is live (SHUT-4.3)."""

    _node: LocalNode

    def _live(self) -> object:
        raise NotImplementedError

    @property
    def route(self) -> Route:
        """The route client, for sends and requests from this activation."""
        self._live()
        return Route(self._node)

    @property
    def spots(self) -> SpotManager:
        """The Spot manager."""
        self._live()
        return SpotManager(self._node)

    @property
    def actors(self) -> ActorManager:
        """The Actor manager."""
        from zlink_trio._runtime.actors import ActorManager

        self._live()
        return ActorManager(self._node)

    @property
    def workers(self) -> Workers:
        """CPU and I/O worker calls on the host's worker scheduler."""
        self._live()
        return Workers(self._node)


class SpotContext(HostReach):
    """What a Spot knows about itself and how it reaches others: ``spot_id``, ``ref``,
    ``route``, ``spots``, ``timers``, ``workers``, and ``close()`` for an Instance Spot."""

    def __init__(self, node: LocalNode, activation: Activation) -> None:
        self._node = node
        self._activation = activation

    def _live(self) -> Activation:
        if self._activation.closed.is_set():
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION, f"the activation of {self.spot_id} has closed"
            )
        return self._activation

    @property
    def spot_id(self) -> SpotId:
        """This Spot's id."""
        return self._activation.spot_id

    @property
    def kind(self) -> SpotKind:
        """This Spot's kind."""
        return self._activation.kind

    @property
    def ref(self) -> SpotRef:
        """The snapshot naming this incarnation (id, generation, mesh, node)."""
        return self._live().ref

    @property
    def members(self) -> frozenset[ActorId]:
        """The ids of this Spot's member Actors now (User and Entry Spots)."""
        return frozenset(actor.actor_id for actor in self._activation.members)

    @property
    def timers(self) -> SpotTimers:
        """This activation's logical timers: ``start(name, interval, options=None)``,
        ``stop(name)``."""
        return self._live().timers

    async def close(self) -> None:
        """Close this Instance Spot with reason ``EXPLICIT_CLOSE``. Messages already admitted
        still run; the close completes after the current turn ends (SPOT-38)."""
        activation = self._live()
        if activation.kind is not SpotKind.INSTANCE:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                "context.close() closes Instance Spots; close a User Spot with spots.close(ref)",
            )
        self._node.check_admitting()
        deadline = trio.current_time() + self._node.config.closing_timeout
        activation.begin_close(SpotCloseReason.EXPLICIT_CLOSE, deadline, drain=True)
        await trio.lowlevel.checkpoint()
