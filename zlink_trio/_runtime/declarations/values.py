"""The values handlers and lifecycle callbacks see and return, and the typed results of create
and join calls (specs/spots.md SPOT-12, SPOT-13, SPOT-40, SPOT-41, SPOT-44, SPOT-45, SPOT-64;
specs/actors.md ACT-16; specs/errors.md ERR-6.1).

Frozen values only: a rejection is a value, not an error (ERR-6.1). The base classes that
applications subclass are ``application/bases.py``.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping

import attrs

from zlink_trio.errors import ZLinkError
from zlink_trio.ids import ActorId, ActorRef, SpotCloseReason, SpotId, SpotRef

__all__ = [
    "ActorCreateResponse",
    "ActorCreateResult",
    "ActorCreateStatus",
    "ActorJoinCompletion",
    "ActorJoinOutcome",
    "MessageContext",
    "SpotActorJoinResult",
    "SpotClosingContext",
    "SpotCreateResponse",
    "SpotCreateResult",
    "SpotCreateStatus",
]


_NO_METADATA: Mapping[str, str] = types.MappingProxyType({})


def _frozen_metadata(value: Mapping[str, str]) -> Mapping[str, str]:
    # A read-only copy, so the sender's mapping may change afterwards; most messages carry no
    # metadata, and they all share one empty view instead of a copy each.
    return types.MappingProxyType(dict(value)) if value else _NO_METADATA


@attrs.frozen
class MessageContext:
    """What a handler knows about the message it handles besides the message itself."""

    spot_id: SpotId
    """The Spot that handles the message (for an Actor message: the Actor's Spot)."""
    metadata: Mapping[str, str] = attrs.field(
        factory=dict, converter=_frozen_metadata, hash=False, eq=False
    )
    """The ``metadata(key, value)`` pairs the sender set."""
    actor_id: ActorId | None = None
    """The Actor that handles the message, or ``None`` for a message to a Spot."""
    deadline: float | None = None
    """For a request: when the caller stops waiting, on this host's application clock; ``None``
    for a one-way message. That clock is Trio's (comparable with ``trio.current_time()``, usable
    with ``trio.move_on_at``) unless the host was opened on a test's clock, such as a
    ``zlink_trio.testing.VirtualClock``, whose ``now()`` it is then compared with."""


@attrs.frozen
class SpotClosingContext:
    """Why and until when an activation closes; given to ``on_closing`` (SPOT-44, SPOT-45)."""

    reason: SpotCloseReason
    deadline: float
    """Absolute time on the host's application clock (Trio's, unless the host runs on a test's
    clock); ``on_closing`` is cancelled when it passes (SPOT-47)."""


@attrs.frozen
class SpotCreateResponse:
    """The decision of ``on_create``: accept or reject, each with an optional reply message."""

    accepted: bool
    reply: object | None = None

    @classmethod
    def accept(cls, reply: object | None = None) -> SpotCreateResponse:
        """Create the Spot; ``reply`` reaches the create call's result."""
        return cls(True, reply)

    @classmethod
    def reject(cls, reply: object | None = None) -> SpotCreateResponse:
        """Do not create the Spot; the create call returns a ``REJECTED`` result (ERR-6.1)."""
        return cls(False, reply)


@attrs.frozen
class SpotActorJoinResult:
    """The typed decision of ``on_actor_join``: a rejection is a value, not an error (ERR-6.1)."""

    accepted: bool
    reply: object | None = None

    @classmethod
    def accept(cls, reply: object | None = None) -> SpotActorJoinResult:
        """Let the Actor join; ``reply`` reaches the Actor's join completion."""
        return cls(True, reply)

    @classmethod
    def reject(cls, reply: object | None = None) -> SpotActorJoinResult:
        """Refuse the join; the Actor stays where it is and gets a ``REJECTED`` completion."""
        return cls(False, reply)


@attrs.frozen
class ActorCreateResponse:
    """The decision of ``on_create_actor``: accept or reject, each with an optional reply."""

    accepted: bool
    reply: object | None = None

    @classmethod
    def accept(cls, reply: object | None = None) -> ActorCreateResponse:
        """Create the Actor in the Entry Spot; ``reply`` reaches the create call's result."""
        return cls(True, reply)

    @classmethod
    def reject(cls, reply: object | None = None) -> ActorCreateResponse:
        """Do not create the Actor: it never becomes Ready (SPOT-52)."""
        return cls(False, reply)


class SpotCreateStatus(enum.Enum):
    """How a create or get-or-create call ended (SPOT-12)."""

    CREATED = "created"
    """This call created the Spot."""
    EXISTING = "existing"
    """A Ready Spot of the same type already held the id; nothing was created."""
    REJECTED = "rejected"
    """``on_create`` rejected the Spot; it never became Ready."""


@attrs.frozen
class SpotCreateResult:
    """The typed result of a create call: its status, the incarnation concerned and the reply of
    ``on_create`` (always ``None`` for ``EXISTING``)."""

    status: SpotCreateStatus
    spot_ref: SpotRef
    response: object | None = None


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
