"""What an application subclasses: ``Spot``, ``EntrySpot``, ``InstanceSpot`` and ``Actor``
(specs/spots.md SPOT-40, SPOT-41, SPOT-44, SPOT-51..SPOT-55, SPOT-59; specs/actors.md).

The runtime makes one new instance of the declared class per activation (SPOT-59) and gives it
its context (``SpotContext`` or ``ActorContext``, ``contexts.py``) before ``__init__`` runs, so
``self.context`` is usable in the constructor already. Two activations never share an instance.
The values callbacks take and return are ``declarations/values.py``.
"""

from __future__ import annotations

import abc
from typing import Any

from zlink_trio._runtime.application.contexts import ActorContext, SpotContext
from zlink_trio._runtime.declarations.handlers import does_nothing
from zlink_trio._runtime.declarations.values import (
    ActorCreateResponse,
    ActorJoinCompletion,
    SpotActorJoinResult,
    SpotClosingContext,
    SpotCreateResponse,
)
from zlink_trio.ids import ActorId
from zlink_trio.options import RelocationReadyCompletion

__all__ = ["Actor", "DefaultEntrySpot", "EntrySpot", "InstanceSpot", "Spot"]


class _SpotBase:
    """What every Spot kind shares: its context and the two lifecycle callbacks with defaults."""

    _zl_context: SpotContext

    @property
    def context(self) -> SpotContext:
        """This activation's context: its id, ref, route client and Spot manager."""
        return self._zl_context

    async def on_initialize(self) -> None:
        """Runs once before the first message; the default does nothing."""

    @does_nothing
    async def on_closing(self, closing: SpotClosingContext) -> None:
        """Runs once when the activation closes; the default does nothing."""


class Spot(_SpotBase):
    """Base class of a User Spot: created through ``spots.create``/``get_or_create``.

    Override ``on_create`` to accept or reject creation (the default accepts with no reply),
    ``on_initialize`` and ``on_closing``; declare handlers with ``@zl.packet_handler`` and
    ``@zl.request_handler``. Every User Spot class defines ``on_actor_join``,
    ``on_joined_actor`` and ``on_leave_actor`` itself (REG-5.9: they are abstract, and a host
    refuses a User Spot type without them); a Spot that takes no member Actors rejects every
    join in ``on_actor_join``.
    """

    async def on_create(self, request: object | None) -> SpotCreateResponse:
        """Decide whether this Spot is created; ``request`` is the create call's request."""
        del request
        return SpotCreateResponse.accept()

    @abc.abstractmethod
    async def on_actor_join(self, actor_id: ActorId, request: object | None) -> SpotActorJoinResult:
        """Decide whether the Actor ``actor_id`` may join; ``request`` is what its
        ``join_spot`` carried. Required: return ``SpotActorJoinResult.reject()`` to take no
        members."""
        raise NotImplementedError

    @abc.abstractmethod
    async def on_joined_actor(self, actor: Any) -> None:
        """An accepted Actor has become a member; ``actor`` is its handler instance. Required."""
        raise NotImplementedError

    @abc.abstractmethod
    async def on_leave_actor(self, actor: Any) -> None:
        """A member Actor has left for the Entry Spot. Required."""
        raise NotImplementedError

    async def on_disconnect_actor(self, actor: Any) -> None:
        """A member Actor was reported disconnected; the default does nothing (SPOT-56)."""

    async def on_relocation_ready_completed(self, completion: RelocationReadyCompletion) -> None:
        """An ``APPLICATION_SIGNALED`` Spot's ``relocation_ready().defer()`` boundary has been
        decided: ``CONTINUED`` here, or ``RELOCATED`` on the new instance after a move. Runs as
        a turn before any held message or tick; the default does nothing. Write it so that a
        second call for the same boundary does no harm (SPOT-82, SPOT-85)."""


class EntrySpot(_SpotBase):
    """Base class of the Entry Spot: one per host, made by the framework at start, where Actors
    are created and live while they belong to no User Spot.

    Declare a subclass with ``@app.entry_spot`` to decide Actor creation in ``on_create_actor``
    (the default accepts); such a class defines ``on_joined_actor`` and ``on_leave_actor``
    itself (REG-5.9: they are abstract). Without a declared one, a host runs the framework's
    own, which accepts every Actor and does nothing when one joins or leaves.
    """

    async def on_create_actor(self, actor: Any, request: object | None) -> ActorCreateResponse:
        """Accept or reject a new Actor; ``actor`` is its (not yet Ready) handler instance."""
        del actor, request
        return ActorCreateResponse.accept()

    @abc.abstractmethod
    async def on_joined_actor(self, actor: Any) -> None:
        """An Actor has come back from a User Spot (not called when an Actor is created).
        Required."""
        raise NotImplementedError

    @abc.abstractmethod
    async def on_leave_actor(self, actor: Any) -> None:
        """An Actor has left the Entry Spot for a User Spot. Required."""
        raise NotImplementedError

    async def on_disconnect_actor(self, actor: Any) -> None:
        """An Actor of the Entry Spot was reported disconnected; the default does nothing."""


class DefaultEntrySpot(EntrySpot):
    """The Entry Spot of an application that declares none: it accepts every Actor and does
    nothing when one comes back or leaves."""

    async def on_joined_actor(self, actor: Any) -> None:
        del actor

    async def on_leave_actor(self, actor: Any) -> None:
        del actor


class InstanceSpot(_SpotBase):
    """Base class of an Instance Spot: activated cold by the first message that names its type
    with ``instance_spot(...)``; it closes itself with ``self.context.close()``."""


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
