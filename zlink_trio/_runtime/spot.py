"""What an application subclasses and the values its lifecycle callbacks see (specs/spots.md,
SPOT-12, SPOT-13, SPOT-40, SPOT-41, SPOT-44, SPOT-45, SPOT-64).

The runtime makes one new instance of the declared class per activation (SPOT-59) and gives it
its :class:`~zlink_trio._runtime.context.SpotContext` before ``__init__`` runs, so ``self.context``
is usable in the constructor already.
"""

from __future__ import annotations

import enum
import types
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import attrs

from zlink_trio.ids import ActorId, SpotCloseReason, SpotId, SpotRef

if TYPE_CHECKING:
    from zlink_trio._runtime.context import SpotContext

__all__ = [
    "ActorCreateResponse",
    "EntrySpot",
    "InstanceSpot",
    "MessageContext",
    "Spot",
    "SpotClosingContext",
    "SpotCreateResponse",
    "SpotCreateResult",
    "SpotActorJoinResult",
    "SpotCreateStatus",
]


class _SpotBase:
    """What every Spot kind shares: its context and the two lifecycle callbacks with defaults."""

    _zl_context: SpotContext

    @property
    def context(self) -> SpotContext:
        """This activation's context: its id, ref, route client and Spot manager."""
        return self._zl_context

    async def on_initialize(self) -> None:
        """Runs once before the first message; the default does nothing."""

    async def on_closing(self, closing: SpotClosingContext) -> None:
        """Runs once when the activation closes; the default does nothing."""


class Spot(_SpotBase):
    """Base class of a User Spot: created through ``spots.create``/``get_or_create``.

    Override ``on_create`` to accept or reject creation (the default accepts with no reply),
    ``on_initialize`` and ``on_closing``; declare handlers with ``@zl.packet_handler`` and
    ``@zl.request_handler``. A User Spot takes member Actors only when ``on_actor_join`` accepts
    them; the default rejects every join (SPOT-53).
    """

    async def on_create(self, request: object | None) -> SpotCreateResponse:
        """Decide whether this Spot is created; ``request`` is the create call's request."""
        del request
        return SpotCreateResponse.accept()

    async def on_actor_join(self, actor_id: ActorId, request: object | None) -> SpotActorJoinResult:
        """Decide whether the Actor ``actor_id`` may join; ``request`` is what its
        ``join_spot`` carried. The default rejects: a Spot takes members only by choice."""
        del actor_id, request
        return SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: Any) -> None:
        """An accepted Actor has become a member; ``actor`` is its handler instance."""

    async def on_leave_actor(self, actor: Any) -> None:
        """A member Actor has left for the Entry Spot."""

    async def on_disconnect_actor(self, actor: Any) -> None:
        """A member Actor was reported disconnected; the default does nothing (SPOT-56)."""


class EntrySpot(_SpotBase):
    """Base class of the Entry Spot: one per host, made by the framework at start, where Actors
    are created and live while they belong to no User Spot.

    Declare a subclass with ``@app.entry_spot`` to decide Actor creation in ``on_create_actor``
    (the default accepts) and to observe Actors returning with ``on_joined_actor``.
    """

    async def on_create_actor(self, actor: Any, request: object | None) -> ActorCreateResponse:
        """Accept or reject a new Actor; ``actor`` is its (not yet Ready) handler instance."""
        del actor, request
        return ActorCreateResponse.accept()

    async def on_joined_actor(self, actor: Any) -> None:
        """An Actor has come back from a User Spot (not called when an Actor is created)."""

    async def on_leave_actor(self, actor: Any) -> None:
        """An Actor has left the Entry Spot for a User Spot."""

    async def on_disconnect_actor(self, actor: Any) -> None:
        """An Actor of the Entry Spot was reported disconnected; the default does nothing."""


class InstanceSpot(_SpotBase):
    """Base class of an Instance Spot: activated cold by the first message that names its type
    with ``instance_spot(...)``; it closes itself with ``self.context.close()``."""


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
    """For a request: when the caller stops waiting, on this host's Trio clock (comparable with
    ``trio.current_time()``, usable with ``trio.move_on_at``); ``None`` for a one-way message."""


@attrs.frozen
class SpotClosingContext:
    """Why and until when an activation closes; given to ``on_closing`` (SPOT-44, SPOT-45)."""

    reason: SpotCloseReason
    deadline: float
    """Absolute time on the Trio clock; ``on_closing`` is cancelled when it passes (SPOT-47)."""


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
