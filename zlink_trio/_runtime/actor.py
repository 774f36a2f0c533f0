"""What an application subclasses for an Actor, and the values of Actor creation and joins
(specs/actors.md ACT-1..ACT-40; specs/spots.md SPOT-51..SPOT-55, SPOT-59).

The runtime makes one new instance of the declared Actor class per Actor activation and gives it
its :class:`~zlink_trio._runtime.actor_context.ActorContext` before ``__init__`` runs, so
``self.context`` is usable in the constructor already. Two Actors never share an instance.
"""

from __future__ import annotations

import enum
from typing import TYPE_CHECKING

import attrs

from zlink_trio.errors import ZLinkError
from zlink_trio.ids import ActorRef

if TYPE_CHECKING:
    from zlink_trio._runtime.actor_context import ActorContext

__all__ = [
    "Actor",
    "ActorCreateResult",
    "ActorCreateStatus",
    "ActorJoinCompletion",
    "ActorJoinOutcome",
]


class Actor:
    """Base class of an Actor type declared with ``@app.actor(name)``.

    Declare handlers with ``@zl.packet_handler`` and ``@zl.request_handler``; join a User Spot
    from a handler with ``self.context.join_spot(spot_id).defer()`` and go back to the Entry
    Spot with ``self.context.join_entry_spot().defer()``. Override ``on_join_completed`` to
    learn how a deferred join ended.
    """

    _zl_context: ActorContext

    @property
    def context(self) -> ActorContext:
        """This Actor activation's context: its id, ref, current Spot, route and joins."""
        return self._zl_context

    async def on_join_completed(self, completion: ActorJoinCompletion) -> None:
        """Runs as a turn of this Actor once a deferred join has ended, before any message that
        arrived after the join was deferred; the default does nothing."""


class ActorCreateStatus(enum.Enum):
    """How an Actor create or get-or-create call ended."""

    CREATED = "created"
    """This call created the Actor; it is Ready in its host's Entry Spot."""
    EXISTING = "existing"
    """A Ready Actor of the same type already held the id; nothing was created."""
    REJECTED = "rejected"
    """The Entry Spot's ``on_create_actor`` rejected it; it never became Ready."""


@attrs.frozen
class ActorCreateResult:
    """The typed result of an Actor create call: its status, the incarnation (``None`` when
    rejected) and the reply of ``on_create_actor`` (always ``None`` for ``EXISTING``)."""

    status: ActorCreateStatus
    actor_ref: ActorRef | None
    response: object | None = None


class ActorJoinOutcome(enum.Enum):
    """How a deferred join ended."""

    ACCEPTED = "accepted"
    """The Actor is now a member of the target Spot (or already was)."""
    REJECTED = "rejected"
    """The target User Spot's ``on_actor_join`` declined; the Actor stayed where it was."""
    FAILED = "failed"
    """The join could not be decided; ``error`` says why; the Actor stayed where it was."""


@attrs.frozen
class ActorJoinCompletion:
    """The end of one deferred join, given to ``Actor.on_join_completed``."""

    outcome: ActorJoinOutcome
    join_id: int
    """Non-zero 128-bit id of this join, for telling repeated deliveries apart. It is not the
    wire's OperationId: no public value carries call identity (ACT-16)."""
    spot_id: str
    """The Spot the join asked for (the Entry Spot's id for ``join_entry_spot``)."""
    actor_ref: ActorRef | None = None
    """The Actor's incarnation after an accepted join."""
    reply: object | None = None
    """The reply ``on_actor_join`` returned with its decision."""
    error: ZLinkError | None = None
    """Why a ``FAILED`` join failed."""
