"""The context of one Actor activation and its deferred join calls (specs/actors.md ACT-10..ACT-16;
specs/api.md API-8, API-9).

A context belongs to one Actor activation: once that activation has closed, using it raises
``INVALID_OPERATION`` before anything is submitted (SHUT-4.3). ``join_spot`` and
``join_entry_spot`` return a single-use call whose only terminal is the synchronous ``defer()``:
it records the join on the running turn of this Actor and the lane runs it when the turn has
ended normally (actor_activation.py Rule 3).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from zlink_trio._runtime.config import check_timeout
from zlink_trio._runtime.context import HostReach
from zlink_trio._runtime.gate import current_turn
from zlink_trio._runtime.node import LocalNode
from zlink_trio._runtime.route import spot_id_of
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, ActorRef, SpotId

if TYPE_CHECKING:
    from zlink_trio._runtime.actor_activation import ActorActivation

__all__ = ["MAX_JOINS_PER_TURN", "ActorContext", "ActorJoinCall"]

MAX_JOINS_PER_TURN = 64
"""Most joins one turn may defer (ACT-12)."""
DEFAULT_JOIN_TIMEOUT = 5.0
"""A join's time limit when ``timeout()`` is not set, counted from ``defer()`` (ACT-13)."""


def _invalid(message: str) -> ZLinkError:
    return ZLinkError(ErrorKind.INVALID_OPERATION, message)


class ActorContext(HostReach):
    """What an Actor knows about itself and how it reaches others: ``actor_id``, ``ref``,
    ``spot_id`` (its current Spot), ``route``, ``spots``, ``actors``, ``workers``, and the
    deferred joins ``join_spot`` / ``join_entry_spot``."""

    def __init__(self, node: LocalNode, activation: ActorActivation) -> None:
        self._node = node
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
        return ActorJoinCall(self._node, self._live(), spot_id_of(spot_id), request)

    def join_entry_spot(self, request: object | None = None) -> ActorJoinCall:
        """A single-use return of this Actor to its host's Entry Spot (leaving its User Spot)."""
        return ActorJoinCall(self._node, self._live(), None, request)


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
        # Imported here: actor_activation imports this module's neighbours at start-up.
        from zlink_trio._runtime.actor_activation import DeferredJoin

        if self._deferred:
            raise _invalid("defer() was already called: a join call is single-use")
        turn = current_turn()
        if turn is None or turn.actor is not self._activation:
            raise _invalid("defer() is allowed only inside a turn of the Actor that joins")
        self._node.check_admitting()
        if len(turn.joins) >= MAX_JOINS_PER_TURN:
            raise _invalid(f"one turn may defer at most {MAX_JOINS_PER_TURN} joins")
        self._deferred = True
        deadline = trio.current_time() + self._timeout
        turn.joins.append(DeferredJoin(self._target, self._request, deadline))
