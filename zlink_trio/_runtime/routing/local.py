"""Finding and admitting the target of a call on this host, and waiting for a request's one result
(specs/completion.md CMP-4.4, CMP-9.1..CMP-9.4, CMP-9.10, CMP-10.2, CMP-17.7; specs/spots.md
SPOT-19..SPOT-26; specs/errors.md ERR-4.1, ERR-4.2, ERR-5.1..ERR-5.9).

The local half of messaging: what ``messaging.py`` does once it knows the target is, or is to be,
on this host, and what inbound work from peers (``inbound.py``) does for every target. Nothing
here reaches another host.

Rule 1: resolving and admitting have no checkpoint between them. ``resolve_spot`` returns the
ready activation and its handler, or starts a cold activation and registers it before any
checkpoint, so the caller's message is the first one admitted to the new Spot (activation.py
Rule 2).
Rule 2: one atomic pop decides a request. Its entry is registered before the message is admitted
(completion.py Rule 1); reply, timeout, cancellation and shutdown all pop the entry, and only the
one that gets it completes the call (CMP-9.1, CMP-10.2). The deadline, on the host's application
clock (``node.clock``), gives ``DEADLINE_EXCEEDED``; a caller's Trio cancel scope gives
``trio.Cancelled`` (CMP-9.10).
Rule 3: a one-way send's waits are not its caller's (DEC-1, CMP-7.5). Its wait for a job permit
(``send_permit``) and for room in a full mailbox (``admit``) are shielded from the caller's
cancellation, as the transport's wait at a peer's high-water mark is (TRN-11); each ends only by
admission or by what ends it without any cancellation: ``JobPermits.close()`` and the seal of
every mailbox at shutdown (``SHUTTING_DOWN``, CMP-7.10), the target's closing (``UNAVAILABLE``,
CMP-7.9). A request's waits stay its caller's (``job_permit``, ERR-8.1).
Rule 4: a turn never waits for room in a queue that only its own end can empty (DEC-32). A
one-way send from a turn to its own Spot or Actor, or to any Spot or Actor whose turns need the
gate that turn holds (the Actors of a SPOT_WIDE Spot, and the Spot itself, share one), is
admitted at once when the queue is full, past ``mailbox_limit``: the queue is served only once
the sending turn ends, so the wait would last until the unit closes or the host shuts down. Its
job permit likewise, past ``app_job_queue_size`` when none is free: the permits it would wait
for may all be held by messages in that queue.
Rule 5: the job queue does not bound a seal's hold (ERR-5.16). A send or request to a Spot or
Actor of this host that is sealed for a move takes its job permit past ``app_job_queue_size``
when none is free, and goes into the hold at once: the hold has no bound of its own (ERR-5.13),
and what it holds keeps its permit, so the job queue's reservation applies to it again once it
runs here (a move given up) and the permit is given back when it is relayed away.
Rule 6: a call that finds its Instance Spot's incarnation closing, or a User Spot of this host
being created, waits for it (``outlive``): a request within its deadline; a one-way send,
shielded by its caller (messaging.py Rule 1), until the closing incarnation's release, or the
creation, is overdue: the closing deadline cut the incarnation's turns (the creation's
deadline cancelled it), and ``store_release_timeout`` after it the record should be settled.
One still under way then has a turn stuck in a shielded wait of its own, perhaps for the very
sender (room in its queue, its own creation): the send ends ``UNAVAILABLE`` (CMP-7.12) rather
than wait with it until the host shuts down.
A send from a turn of that closing incarnation itself (or one holding its gate) ends
``UNAVAILABLE`` at once: its close waits for that turn (as Rule 4 says of a queue); so does a
send from a User Spot's own start-up (``on_create``, ``on_initialize``) to the Spot it creates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.declarations.handlers import HandlerKind
from zlink_trio._runtime.declarations.registry import ActorType, Handler, SpotType
from zlink_trio._runtime.declarations.values import MessageContext
from zlink_trio._runtime.engines.completion import Outcome, PendingCall, shutting_down
from zlink_trio._runtime.engines.gate import current_turn
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotId, SpotKind, StableTypeName

__all__ = [
    "InstanceChoice",
    "actor_context",
    "admit",
    "deadline_error",
    "job_permit",
    "outlive",
    "permit_for_hold",
    "permit_now",
    "reply_of",
    "resolve_actor",
    "resolve_spot",
    "send_permit",
    "served_by_caller",
]


class InstanceChoice:
    """``instance_spot()`` (``type_name`` ``None``) or ``instance_spot(type_name)``."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: StableTypeName | None) -> None:
        self.type_name = type_name


def resolve_spot(
    spots: SpotCatalog[Activation],
    spot_id: SpotId,
    message_type: type,
    kind: HandlerKind,
    instance: InstanceChoice | None,
    create: bool,
) -> tuple[Activation, Handler] | Activation | trio.Event | None:
    """The local target and its handler; or the closing incarnation to wait for; or the event
    of a User Spot creation of this host still running for the id, to wait for before looking
    again (SPOT-90); or ``None`` when nothing here holds the id and ``create`` is false (the
    caller looks at the store).
    With ``create`` a missing id is activated cold here when ``instance_spot()`` asks for it,
    else ``NOT_FOUND`` (Rule 1)."""
    node = spots.node
    node.check_admitting()
    current = spots.activations.get(spot_id)
    if current is not None:
        if instance is not None and (
            current.kind is not SpotKind.INSTANCE
            or (instance.type_name is not None and current.spot_type.name != instance.type_name)
        ):
            raise ZLinkError(
                ErrorKind.TYPE_MISMATCH,
                f"{spot_id} is a {current.kind.name} Spot of type {current.spot_type.name}",
            )
        if current.accepting or current.hold is not None:
            # A Spot that moved away and is closing here still forwards what it is offered, in
            # order, until it leaves the table (spots/sealing.py Rule 4).
            return current, handler_of(current.spot_type, message_type, kind)
        if instance is None:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"Spot {spot_id} is closing")
        # A closing incarnation still holds the id: activate the next one after it.
        return current
    creating = spots.creating.get(spot_id)
    if creating is not None:
        # Claimed here, not Ready yet: the call waits for the creation's outcome (SPOT-90).
        return creating
    if not create:
        return None
    if instance is None:
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {spot_id}")
    spot_type = _instance_type(node, instance)
    handler = handler_of(spot_type, message_type, kind)
    node.check_placing()
    activation = Activation(spots, spot_type, spot_id, None)
    # Registered before any checkpoint, so the caller's message is the first admitted.
    spots.activations[spot_id] = activation
    node.activation_nursery.start_soon(activation.run_cold)
    return activation, handler


def resolve_actor(
    actors: ActorCatalog[ActorActivation], actor_id: ActorId, message_type: type, kind: HandlerKind
) -> tuple[ActorActivation, Handler]:
    """The Ready local Actor ``actor_id`` and its handler; ``NOT_FOUND`` otherwise."""
    actor = actors.actors.get(actor_id)
    # An Actor that moved away and is closing here still forwards what it is offered.
    if actor is None or not (actor.accepting or actor.hold is not None):
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Actor {actor_id}")
    return actor, handler_of(actor.actor_type, message_type, kind)


def actor_context(
    actor: ActorActivation,
    actor_id: ActorId,
    metadata: Mapping[str, str],
    deadline: float | None = None,
) -> MessageContext:
    """What the Actor's handler sees: the Spot it is a member of now, and the Actor."""
    return MessageContext(actor.spot.spot_id, metadata, actor_id, deadline)


def permit_now(
    node: LocalNode, units: Mapping[Any, Activation | ActorActivation], unit: object
) -> bool:
    """Take a job permit without a checkpoint: a free one, or one past the host's size when
    ``unit`` is here and sealed (Rule 5); ``False`` when the caller has to wait for one."""
    return node.jobs.try_acquire() or permit_for_hold(node, units, unit)


def permit_for_hold(
    node: LocalNode, units: Mapping[Any, Activation | ActorActivation], unit: object
) -> bool:
    """For a caller that found no free permit: one past the host's size when ``unit`` is here
    and sealed (Rule 5); ``False``, nothing taken, otherwise."""
    if (target := units.get(unit)) is not None and target.hold is not None:
        node.jobs.acquire_over()
        return True
    return False


async def job_permit(
    node: LocalNode,
    deadline: float,
    units: Mapping[Any, Activation | ActorActivation],
    unit: SpotId | ActorId,
) -> None:
    """Take a job permit for a request to ``unit``, within its deadline (mailbox.py Rule 1),
    or past the host's size when ``unit`` is here and sealed (Rule 5)."""
    if permit_now(node, units, unit):
        return  # no cancel scope, no checkpoint
    with node.clock.scope_until(deadline):
        if await node.jobs.acquire():
            return
        raise shutting_down()  # shutdown ended the wait (mailbox.py Rule 3)
    raise deadline_error(unit if isinstance(unit, SpotId) else None)


async def send_permit(
    node: LocalNode, units: Mapping[Any, Activation | ActorActivation], unit: object
) -> None:
    """Take a job permit for a one-way send, shielded from its caller (Rule 3), or past the
    host's size when its target (``units[unit]``, if here) is sealed (Rule 5) or the send is
    from a turn that the target waits for (Rule 4); ``SHUTTING_DOWN`` when shutdown ends the
    wait (mailbox.py Rule 3)."""
    if permit_now(node, units, unit):
        return  # no cancel scope, no checkpoint
    if (target := units.get(unit)) is not None and served_by_caller(target):
        node.jobs.acquire_over()
        return
    with trio.CancelScope(shield=True):
        if await node.jobs.acquire():
            return
    raise shutting_down()


async def admit(target: Activation | ActorActivation, envelope: Envelope) -> None:
    """Put a one-way send's ``envelope`` in ``target``'s queue, waiting for room shielded from
    its caller (Rule 3), or past its limit when the caller's own turn is what the queue waits
    for (Rule 4); the queue's own ``put`` names how a wait ended without admission."""
    if target.try_put(envelope):
        return  # room at once: no scope, no turn to look up
    with trio.CancelScope(shield=True):
        await target.put(envelope, over=served_by_caller(target))


def served_by_caller(target: Activation | ActorActivation) -> bool:
    """Whether the calling task runs a turn that ``target``'s next turn must wait for: a
    message turn of the Spot itself, a turn of the Actor itself, or any turn holding the gate
    that ``target``'s turns take (Rule 4)."""
    turn = current_turn()
    if turn is None:
        return False
    if isinstance(target, ActorActivation):
        gate = target.spot.shared_gate
        return turn.actor is target or (gate is not None and turn.gate is gate)
    return turn.spot is target or (turn.gate is not None and turn.gate is target.gate)


async def reply_of(
    node: LocalNode, entry: PendingCall, deadline: float, reply_type: type, *, copy: bool
) -> object:
    """The request's settled reply, checked to be a ``reply_type`` (Rule 2). With ``copy`` (a
    caller of this host) the reply is what a caller on another host would get: a copy of its
    own, within the message limit, ``INTERNAL_FAILURE`` when it cannot travel (messaging.py
    Rule 8; inbound.py answers a remote caller the same)."""
    reply = await _settle(node, entry, deadline)
    if copy:
        try:
            reply = node.registry.messages.copy(reply, node.config.max_message_bytes)
        except (TypeError, ValueError, ZLinkError) as error:
            raise reply_failure(error) from None
    if not isinstance(reply, reply_type):
        raise ZLinkError(
            ErrorKind.PROTOCOL_ERROR,
            f"the reply is a {type(reply).__qualname__}, not a {reply_type.__qualname__}",
        )
    return reply


async def _settle(node: LocalNode, entry: PendingCall, deadline: float) -> object:
    dispatcher = node.dispatcher

    def claim() -> bool:
        # The caller's cancellation or its deadline claims the slot unless another path
        # already did; then that path's result stands (completion.py Rule 6; CMP-9.1).
        return dispatcher.pop(entry.route) is entry

    with node.clock.scope_until(deadline) as scope:
        outcome = await entry.wait(claim)
        return outcome.unwrap()
    # Only the deadline gets here: a cancellation from outside propagated as trio.Cancelled.
    assert scope.cancelled_caught
    # The timeout took the slot in claim(): its result goes through the lane like any other.
    dispatcher.deliver(entry, Outcome(error=deadline_error(None)))
    with trio.CancelScope(shield=True):
        outcome = await entry.wait()
    return outcome.unwrap()


async def outlive(
    spots: SpotCatalog[Activation],
    spot_id: SpotId,
    found: Activation | trio.Event,
    deadline: float,
) -> None:
    """Rule 6: wait until the closing incarnation ``found`` has closed, or the creation it
    names has ended; ``deadline`` is a request's, ``math.inf`` for a send."""
    node = spots.node
    doing = "closing" if isinstance(found, Activation) else "being created"
    until = deadline
    if deadline == math.inf:  # a send: never for its own turn's end, nor past an overdue one
        if isinstance(found, Activation):
            own = served_by_caller(found)
            until = found.closing_deadline
        else:
            turn = current_turn()
            own = turn is not None and getattr(turn.spot, "spot_id", None) == spot_id
            until = spots.creating_until.get(spot_id, math.inf)
        if own:
            raise ZLinkError(
                ErrorKind.UNAVAILABLE, f"Spot {spot_id} is {doing}: that waits for this turn"
            )
        until += node.config.store_release_timeout
    with node.clock.scope_until(until):
        await (found.closed if isinstance(found, Activation) else found).wait()
        return
    if deadline == math.inf:
        raise ZLinkError(ErrorKind.UNAVAILABLE, f"Spot {spot_id} is still {doing} (overdue)")
    raise deadline_error(spot_id)


def deadline_error(spot_id: SpotId | None) -> ZLinkError:
    """``DEADLINE_EXCEEDED`` for a request (to ``spot_id``, when known)."""
    target = "" if spot_id is None else f" to {spot_id}"
    return ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"the request{target} timed out")


def handler_of(declared: SpotType | ActorType, message_type: type, kind: HandlerKind) -> Handler:
    """The ``kind`` handler of the Spot or Actor type ``declared`` for ``message_type``;
    ``NOT_FOUND`` when it has none (the same answer for a target here or elsewhere, MSG-7)."""
    handler = declared.handlers.get(message_type)
    if handler is None or handler.kind is not kind:
        raise ZLinkError(
            ErrorKind.NOT_FOUND,
            f"{declared.name} has no {kind.value} handler for {message_type.__qualname__}",
        )
    return handler


def reply_failure(error: Exception) -> ZLinkError:
    """What the caller gets for a reply that cannot travel, on this host or another (MSG-2,
    MSG-5): the limit's own ``PROTOCOL_ERROR``, else ``INTERNAL_FAILURE``."""
    if isinstance(error, ZLinkError):
        return error
    return ZLinkError(ErrorKind.INTERNAL_FAILURE, f"the reply cannot be encoded: {error}")


def _instance_type(node: LocalNode, choice: InstanceChoice) -> SpotType:
    if choice.type_name is not None:
        chosen = node.registry.spot_types.get(choice.type_name)
        if chosen is None or chosen.kind is not SpotKind.INSTANCE:
            raise ZLinkError(
                ErrorKind.NOT_FOUND, f"no Instance Spot type {choice.type_name} is served here"
            )
        return chosen
    candidates = node.registry.instance_types()
    if not candidates:
        raise ZLinkError(ErrorKind.NOT_FOUND, "no Instance Spot type is served here")
    if len(candidates) > 1:
        raise ZLinkError(
            ErrorKind.INVALID_OPERATION,
            "instance_spot() without a type needs exactly one Instance Spot type; "
            f"{len(candidates)} are declared",
        )
    return candidates[0]
