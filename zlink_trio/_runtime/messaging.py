"""Sends and requests to Spots on this host (specs/completion.md CMP-2.2, CMP-4.2, CMP-4.4,
CMP-9.1..CMP-9.4, CMP-9.10, CMP-14.2, CMP-17.7; specs/spots.md SPOT-19..SPOT-26; specs/errors.md
ERR-4.1, ERR-4.2, ERR-5.1..ERR-5.9).

Rule 1: a one-way send completes at local admission: the message is in the target Spot's
mailbox; it waits for no handler (CMP-4.2). It has no time bound and no deadline (DEC-1).
Rule 2: a request fixes one deadline when its terminal starts; resolution, cold activation,
admission and the reply wait all spend from it (CMP-9.4). Its entry is registered before the
message is admitted (completion.py Rule 1), and whichever of reply, timeout, cancellation or
shutdown pops the entry first decides the result (CMP-9.1). Timeout is the call's own deadline
and gives ``DEADLINE_EXCEEDED``; a caller's Trio cancel scope gives ``trio.Cancelled`` (CMP-9.10).
Rule 3: a send or request without ``instance_spot()`` never creates anything (SPOT-19); with it, a
missing id is activated cold on this host and the activating message is the first one in the new
Spot's mailbox (activation.py Rule 2).
Rule 4: a message takes its job permit before its target is resolved (mailbox.py Rule 1), so
resolving and admitting have no checkpoint between them and a cold-activating message stays the
first in its new mailbox. A request spends its deadline on the permit wait too.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import trio

from zlink_trio._runtime.activation import Activation
from zlink_trio._runtime.application import ActorType, Handler, SpotType
from zlink_trio._runtime.completion import Outcome, PendingCall
from zlink_trio._runtime.gate import current_turn
from zlink_trio._runtime.handlers import HandlerKind
from zlink_trio._runtime.mailbox import Envelope
from zlink_trio._runtime.node import LocalNode
from zlink_trio._runtime.spot import MessageContext
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, SpotId, SpotKind, StableTypeName

__all__ = ["InstanceChoice", "request", "request_actor", "send", "send_actor"]


class InstanceChoice:
    """``instance_spot()`` (``type_name`` ``None``) or ``instance_spot(type_name)``."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: StableTypeName | None) -> None:
        self.type_name = type_name


async def send(
    node: LocalNode,
    spot_id: SpotId,
    message: object,
    metadata: Mapping[str, str],
    instance: InstanceChoice | None,
    mesh: MeshName | None,
) -> None:
    """Admit a one-way message into the target Spot's mailbox (Rule 1)."""
    node.check_admitting()
    node.check_mesh(mesh)
    jobs = node.jobs
    # The hot path takes a free permit and a free mailbox slot without a coroutine or a
    # checkpoint; only a shortage waits.
    if not jobs.try_acquire():
        await jobs.acquire()
    try:
        found = _resolve_now(node, spot_id, type(message), HandlerKind.PACKET, instance)
        if isinstance(found, Activation):
            found = await _resolve(node, spot_id, type(message), HandlerKind.PACKET, instance)
        activation, handler = found
        envelope = Envelope(message, handler, MessageContext(spot_id, metadata), None)
        if not activation.try_put(envelope):
            await activation.put(envelope)
    except BaseException:
        jobs.release()
        raise


async def request(
    node: LocalNode,
    spot_id: SpotId,
    message: object,
    reply_type: type,
    metadata: Mapping[str, str],
    instance: InstanceChoice | None,
    mesh: MeshName | None,
    time_limit: float,
) -> object:
    """Send a request and wait for the one result that settles first (Rule 2)."""
    node.check_admitting()
    node.check_mesh(mesh)
    deadline = trio.current_time() + time_limit
    await _job_permit(node, deadline, spot_id)
    try:
        found = _resolve_now(node, spot_id, type(message), HandlerKind.REQUEST, instance)
        if isinstance(found, Activation):
            # Only waiting for a closing incarnation takes time before admission, so only that
            # wait needs a scope of its own to spend from the deadline.
            resolved: tuple[Activation, Handler] | None = None
            with trio.move_on_at(deadline):
                resolved = await _resolve(
                    node, spot_id, type(message), HandlerKind.REQUEST, instance
                )
            if resolved is None:
                raise _deadline(spot_id)
            found = resolved
        activation, handler = found
        entry = node.dispatcher.register()
        try:
            activation.offer(
                Envelope(message, handler, MessageContext(spot_id, metadata), entry.route)
            )
        except BaseException:
            node.dispatcher.pop(entry.route)
            raise
    except BaseException:
        node.jobs.release()
        raise
    # Outside the scope above: only _settle's own scope may turn the deadline into a result,
    # after the pop race, so a reply that won the slot is never reported as a timeout.
    reply = await _settle(node, entry, deadline)
    if not isinstance(reply, reply_type):
        raise ZLinkError(
            ErrorKind.PROTOCOL_ERROR,
            f"the reply is a {type(reply).__qualname__}, not a {reply_type.__qualname__}",
        )
    return reply


async def send_actor(
    node: LocalNode, actor_id: ActorId, message: object, metadata: Mapping[str, str]
) -> None:
    """Admit a one-way message into the Actor's queue (Rule 1; CMP-5.8)."""
    node.check_admitting()
    await node.jobs.acquire()
    try:
        actor, handler = _resolve_actor(node, actor_id, type(message), HandlerKind.PACKET)
        await actor.put(Envelope(message, handler, _actor_context(actor, actor_id, metadata), None))
    except BaseException:
        node.jobs.release()
        raise


async def request_actor(
    node: LocalNode,
    actor_id: ActorId,
    message: object,
    reply_type: type,
    metadata: Mapping[str, str],
    time_limit: float,
) -> object:
    """A request to an Actor: one deadline, the first result wins (Rule 2)."""
    node.check_admitting()
    deadline = trio.current_time() + time_limit
    await _job_permit(node, deadline, None)
    try:
        actor, handler = _resolve_actor(node, actor_id, type(message), HandlerKind.REQUEST)
        turn = current_turn()
        if turn is not None and turn.actor is actor:
            # Its own turn holds the Actor's FIFO claim: the request could never run (ACT-21).
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"Actor {actor_id} cannot wait for a request to itself from its own turn",
            )
        entry = node.dispatcher.register()
        try:
            actor.offer(
                Envelope(message, handler, _actor_context(actor, actor_id, metadata), entry.route)
            )
        except BaseException:
            node.dispatcher.pop(entry.route)
            raise
    except BaseException:
        node.jobs.release()
        raise
    reply = await _settle(node, entry, deadline)
    if not isinstance(reply, reply_type):
        raise ZLinkError(
            ErrorKind.PROTOCOL_ERROR,
            f"the reply is a {type(reply).__qualname__}, not a {reply_type.__qualname__}",
        )
    return reply


def _actor_context(actor: Any, actor_id: ActorId, metadata: Mapping[str, str]) -> MessageContext:
    return MessageContext(actor.spot.spot_id, metadata, actor_id)


def _resolve_actor(
    node: LocalNode, actor_id: ActorId, message_type: type, kind: HandlerKind
) -> tuple[Any, Handler]:
    actor = node.actors.get(actor_id)
    if actor is None or not actor.accepting:
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Actor {actor_id}")
    actor_type: ActorType = actor.actor_type
    handler = actor_type.handlers.get(message_type)
    if handler is None or handler.kind is not kind:
        raise ZLinkError(
            ErrorKind.NOT_FOUND,
            f"{actor_type.name} has no {kind.value} handler for {message_type.__qualname__}",
        )
    return actor, handler


async def _job_permit(node: LocalNode, deadline: float, spot_id: SpotId | None) -> None:
    with trio.move_on_at(deadline):
        await node.jobs.acquire()
        return
    raise _deadline(spot_id)


async def _settle(node: LocalNode, entry: PendingCall, deadline: float) -> object:
    dispatcher = node.dispatcher
    try:
        with trio.move_on_at(deadline):
            outcome = await entry.wait()
            return outcome.unwrap()
    except trio.Cancelled:
        # The caller's own cancellation claims the slot unless another path already did; in
        # both cases the caller sees only its cancellation (CMP-9.10).
        dispatcher.pop(entry.route)
        raise
    # The deadline passed: the timeout path competes for the same slot (CMP-10.2).
    if dispatcher.pop(entry.route) is entry:
        dispatcher.deliver(entry, Outcome(error=_deadline(None)))
    with trio.CancelScope(shield=True):
        # Whoever won has queued the completion; it runs in the lane's next turns.
        outcome = await entry.wait()
    return outcome.unwrap()


def _deadline(spot_id: SpotId | None) -> ZLinkError:
    target = "" if spot_id is None else f" to {spot_id}"
    return ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"the request{target} timed out")


def _handler_of(spot_type: SpotType, message_type: type, kind: HandlerKind) -> Handler:
    handler = spot_type.handlers.get(message_type)
    if handler is None or handler.kind is not kind:
        raise ZLinkError(
            ErrorKind.NOT_FOUND,
            f"{spot_type.name} has no {kind.value} handler for {message_type.__qualname__}",
        )
    return handler


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


async def _resolve(
    node: LocalNode,
    spot_id: SpotId,
    message_type: type,
    kind: HandlerKind,
    instance: InstanceChoice | None,
) -> tuple[Activation, Handler]:
    while True:
        found = _resolve_now(node, spot_id, message_type, kind, instance)
        if not isinstance(found, Activation):
            return found
        await found.closed.wait()


def _resolve_now(
    node: LocalNode,
    spot_id: SpotId,
    message_type: type,
    kind: HandlerKind,
    instance: InstanceChoice | None,
) -> tuple[Activation, Handler] | Activation:
    """The target and its handler, or the closing incarnation to wait for before looking again."""
    node.check_admitting()
    current = node.activations.get(spot_id)
    if current is not None:
        if instance is not None and (
            current.kind is not SpotKind.INSTANCE
            or (instance.type_name is not None and current.spot_type.name != instance.type_name)
        ):
            raise ZLinkError(
                ErrorKind.TYPE_MISMATCH,
                f"{spot_id} is a {current.kind.name} Spot of type {current.spot_type.name}",
            )
        if current.accepting:
            return current, _handler_of(current.spot_type, message_type, kind)
        if instance is None:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"Spot {spot_id} is closing")
        # A closing incarnation still holds the id: activate the next one after it.
        return current
    if instance is None:
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {spot_id}")
    spot_type = _instance_type(node, instance)
    handler = _handler_of(spot_type, message_type, kind)
    activation = Activation(node, spot_type, spot_id, None)
    # Registered before any checkpoint, so the caller's message is the first admitted.
    node.activations[spot_id] = activation
    node.activation_nursery.start_soon(activation.run_cold)
    return activation, handler
