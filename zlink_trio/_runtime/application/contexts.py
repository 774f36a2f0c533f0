"""The context of one Spot or Actor activation: ``self.context`` (specs/api.md API-8, API-9,
API-17; specs/spots.md SPOT-38; specs/shutdown.md SHUT-4.3; specs/actors.md ACT-10..ACT-16;
specs/timers.md; specs/completion.md CMP-3.1).

A context belongs to one activation: once that activation has closed, using it raises
``INVALID_OPERATION`` before anything is submitted, so a stale reference can never act for a
newer incarnation (SHUT-4.3).

The Spot and Actor subsystems do not import this module: the host binds ``SpotContext`` and
``ActorContext`` into their catalogs (``make_context``), because a context hands out the route
client and the managers, which sit above them (architecture.md, "Inverted dependencies").

An Actor's ``join_spot`` and ``join_entry_spot`` return a single-use call whose only terminal is
the synchronous ``defer()``: it records the join on the running turn of this Actor and the lane
runs it when the turn has ended normally (actors/activation.py Rule 3).
"""

from __future__ import annotations

import trio

from zlink_trio._runtime.actors.activation import ActorActivation, DeferredJoin
from zlink_trio._runtime.calls.actor_manager import ActorManager
from zlink_trio._runtime.calls.route import Route
from zlink_trio._runtime.calls.spot_manager import SpotManager
from zlink_trio._runtime.calls.targets import spot_id_of
from zlink_trio._runtime.calls.worker_calls import Workers
from zlink_trio._runtime.declarations.config import check_timeout
from zlink_trio._runtime.engines.gate import current_turn
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.boundary import RelocationReady
from zlink_trio._runtime.spots.timers import SpotTimers
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, ActorRef, SpotCloseReason, SpotId, SpotKind, SpotRef

__all__ = [
    "MAX_JOINS_PER_TURN",
    "ActorContext",
    "ActorJoinCall",
    "HostReach",
    "SpotContext",
]

MAX_JOINS_PER_TURN = 64
"""Most joins one turn may defer (ACT-12)."""
DEFAULT_JOIN_TIMEOUT = 5.0
"""A join's time limit when ``timeout()`` is not set, counted from ``defer()`` (ACT-13)."""


def _invalid(message: str) -> ZLinkError:
    return ZLinkError(ErrorKind.INVALID_OPERATION, message)


class HostReach:
    """What the context of a Spot and of an Actor share: the host's clients, handed out only
    while the activation is live (SHUT-4.3)."""

    _messaging: Messaging

    def _live(self) -> object:
        raise NotImplementedError

    @property
    def route(self) -> Route:
        """The route client, for sends and requests from this activation."""
        self._live()
        return Route(self._messaging)

    @property
    def spots(self) -> SpotManager:
        """The Spot manager."""
        self._live()
        return SpotManager(self._messaging)

    @property
    def actors(self) -> ActorManager:
        """The Actor manager."""
        self._live()
        return ActorManager(self._messaging.actors)

    @property
    def workers(self) -> Workers:
        """CPU and I/O worker calls on the host's worker scheduler."""
        self._live()
        return Workers(self._messaging.node)


class SpotContext(HostReach):
    """What a Spot knows about itself and how it reaches others: ``spot_id``, ``ref``,
    ``route``, ``spots``, ``timers``, ``workers``, ``close()`` for an Instance Spot and
    ``relocation_ready()`` for an ``APPLICATION_SIGNALED`` User Spot."""

    def __init__(self, messaging: Messaging, activation: Activation) -> None:
        self._messaging = messaging
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

    def relocation_ready(self) -> RelocationReady:
        """``relocation_ready().defer()`` in a message or timer turn of an
        ``APPLICATION_SIGNALED`` User Spot: the Spot may move once this turn ends, and
        ``on_relocation_ready_completed`` says what became of it (SPOT-81, SPOT-82).
        ``INVALID_OPERATION`` anywhere else and a second time in one turn (SPOT-84)."""
        return RelocationReady(self._activation)

    async def close(self) -> None:
        """Close this Instance Spot with reason ``EXPLICIT_CLOSE``. Messages already admitted
        still run; the close completes after the current turn ends (SPOT-38)."""
        activation = self._live()
        if activation.kind is not SpotKind.INSTANCE:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                "context.close() closes Instance Spots; close a User Spot with spots.close(ref)",
            )
        node = self._messaging.node
        node.check_admitting()
        deadline = node.clock.now() + node.config.closing_timeout
        activation.begin_close(SpotCloseReason.EXPLICIT_CLOSE, deadline, drain=True)
        await trio.lowlevel.checkpoint()


class ActorContext(HostReach):
    """What an Actor knows about itself and how it reaches others: ``actor_id``, ``ref``,
    ``spot_id`` (its current Spot), ``route``, ``spots``, ``actors``, ``workers``, and the
    deferred joins ``join_spot`` / ``join_entry_spot``."""

    def __init__(self, messaging: Messaging, activation: ActorActivation) -> None:
        self._messaging = messaging
        self._activation = activation

    def _live(self) -> ActorActivation:
        if self._activation.closed.is_set():
            raise _invalid(f"the activation of Actor {self.actor_id} has closed")
        return self._activation

    @property
    def actor_id(self) -> ActorId:
        """This Actor's id."""
        return self._activation.actor_id

    @property
    def ref(self) -> ActorRef:
        """The snapshot naming this incarnation."""
        return self._live().ref

    @property
    def spot_id(self) -> SpotId:
        """The Spot this Actor is a member of now (the Entry Spot's id when in none)."""
        return self._live().spot.spot_id

    def join_spot(self, spot_id: SpotId | str, request: object | None = None) -> ActorJoinCall:
        """A single-use join of this Actor to the User Spot ``spot_id``; ``request`` reaches
        its ``on_actor_join``. Nothing happens until ``defer()``."""
        return ActorJoinCall(self._messaging.node, self._live(), spot_id_of(spot_id), request)

    def join_entry_spot(self, request: object | None = None) -> ActorJoinCall:
        """A single-use return of this Actor to its host's Entry Spot (leaving its User Spot)."""
        return ActorJoinCall(self._messaging.node, self._live(), None, request)


class ActorJoinCall:
    """A deferred join (single-use): ``timeout(seconds)`` at most once, then ``defer()``."""

    def __init__(
        self,
        node: LocalNode,
        activation: ActorActivation,
        target: SpotId | None,
        request: object | None,
    ) -> None:
        if request is not None and not node.registry.is_message(type(request)):
            raise TypeError(
                f"{type(request).__qualname__} is not declared with @app.message, so it cannot "
                "be a join request"
            )
        self._node = node
        self._activation = activation
        self._target = target
        self._request = request
        self._timeout = DEFAULT_JOIN_TIMEOUT
        self._timeout_set = False
        self._deferred = False

    def timeout(self, seconds: float) -> ActorJoinCall:
        """The join's whole time limit, counted from ``defer()``; the default is 5 s."""
        checked = check_timeout(seconds, "timeout")
        if self._deferred:
            raise _invalid("timeout() after defer(): a join call is single-use")
        if self._timeout_set:
            raise _invalid("timeout() was already set on this join")
        self._timeout_set = True
        self._timeout = checked
        return self

    def defer(self) -> None:
        """Record the join on this Actor's running turn; it runs once the turn has ended
        normally, before the Actor's next message. Its result reaches
        ``Actor.on_join_completed``."""
        if self._deferred:
            raise _invalid("defer() was already called: a join call is single-use")
        turn = current_turn()
        if turn is None or turn.actor is not self._activation:
            raise _invalid("defer() is allowed only inside a turn of the Actor that joins")
        self._node.check_admitting()
        if len(turn.joins) >= MAX_JOINS_PER_TURN:
            raise _invalid(f"one turn may defer at most {MAX_JOINS_PER_TURN} joins")
        self._deferred = True
        deadline = self._node.clock.now() + self._timeout
        turn.joins.append(DeferredJoin(self._target, self._request, deadline))
