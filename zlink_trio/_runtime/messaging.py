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

import math
from collections.abc import Mapping
from typing import Any

import trio

from zlink_trio._runtime.activation import Activation
from zlink_trio._runtime.application import ActorType, Handler, SpotType
from zlink_trio._runtime.completion import Outcome, PendingCall
from zlink_trio._runtime.gate import current_turn
from zlink_trio._runtime.handlers import HandlerKind
from zlink_trio._runtime.mailbox import Envelope, InstanceChoice
from zlink_trio._runtime.node import LocalNode
from zlink_trio._runtime.remote import STALE, Owner
from zlink_trio._runtime.spot import MessageContext
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, SpotId, SpotKind, StableTypeName

__all__ = ["request", "request_actor", "send", "send_actor"]


async def send(
    node: LocalNode,
    spot_id: SpotId,
    message: object,
    metadata: Mapping[str, str],
    instance: InstanceChoice | None,
    mesh: MeshName | None,
    *,
    local: bool = False,
) -> None:
    """Admit a one-way message into the target Spot's mailbox, here or at its owner (Rule 1;
    remote.py Rule 3). ``local``: inbound from a peer, never forwarded (remote.py Rule 4)."""
    node.check_admitting()
    node.check_mesh(mesh)
    jobs = node.jobs
    # The hot path takes a free permit and a free mailbox slot without a coroutine or a
    # checkpoint; only a shortage waits.
    if not jobs.try_acquire():
        await jobs.acquire()
    held = True
    try:
        found = _resolve_now(node, spot_id, type(message), HandlerKind.PACKET, instance, local)
        if not isinstance(found, tuple):
            located = await _locate(
                node, spot_id, type(message), HandlerKind.PACKET, instance, local, math.inf
            )
            if isinstance(located, Owner):
                # A remote target's queue is at its owner: no local permit is held for it.
                held = False
                jobs.release()
                remote = node.remote
                assert remote is not None  # an Owner comes only from it
                await remote.send(located, spot_id, message, metadata, _type_of(instance))
                return
            found = located
        activation, handler = found
        envelope = Envelope(message, handler, MessageContext(spot_id, metadata), None)
        if not activation.try_put(envelope):
            await activation.put(envelope)
    except BaseException:
        if held:
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
    *,
    local: bool = False,
) -> object:
    """Send a request and wait for the one result that settles first (Rule 2), here or at the
    target's owner (remote.py Rule 3)."""
    node.check_admitting()
    node.check_mesh(mesh)
    deadline = trio.current_time() + time_limit
    await _job_permit(node, deadline, spot_id)
    held = True
    try:
        found = _resolve_now(node, spot_id, type(message), HandlerKind.REQUEST, instance, local)
        if not isinstance(found, tuple):
            located = await _locate(
                node, spot_id, type(message), HandlerKind.REQUEST, instance, local, deadline
            )
            if isinstance(located, Owner):
                held = False
                node.jobs.release()
                remote = node.remote
                assert remote is not None  # an Owner comes only from it
                return await remote.request(
                    located,
                    spot_id,
                    message,
                    reply_type,
                    metadata,
                    _type_of(instance),
                    deadline,
                )
            found = located
        activation, handler = found
        entry = node.dispatcher.register()
        try:
            activation.offer(
                Envelope(
                    message, handler, MessageContext(spot_id, metadata, None, deadline), entry.route
                )
            )
        except BaseException:
            node.dispatcher.pop(entry.route)
            raise
    except BaseException:
        if held:
            node.jobs.release()
        raise
    # Outside the scope above: only _settle's own scope may turn the deadline into a result,
    # after the pop race, so a reply that won the slot is never reported as a timeout.
    return await _reply_of(node, entry, deadline, reply_type)


def _type_of(instance: InstanceChoice | None) -> StableTypeName | None:
    if instance is None:
        return None
    if instance.type_name is not None:
        return instance.type_name
    raise ZLinkError(
        ErrorKind.INVALID_OPERATION,
        "instance_spot() without a type cannot reach a Spot on another host; name the type",
    )


async def _locate(
    node: LocalNode,
    spot_id: SpotId,
    message_type: type,
    kind: HandlerKind,
    instance: InstanceChoice | None,
    local: bool,
    deadline: float,
) -> tuple[Activation, Handler] | Owner:
    """Where a target that is not ready here is: after its closing incarnation here, at a live
    remote owner, or (with ``instance_spot()``) a new cold activation here (remote.py Rule 1)."""
    while True:
        found = _resolve_now(node, spot_id, message_type, kind, instance, local)
        if isinstance(found, tuple):
            return found
        if isinstance(found, Activation):
            with trio.move_on_at(deadline):
                await found.closed.wait()
                continue
            raise _deadline(spot_id)
        remote = node.remote
        # _resolve_now returns None only for a call of this host that may go remote.
        assert remote is not None
        owner = await remote.owner_of(spot_id, deadline)
        if isinstance(owner, Owner):
            return owner
        if owner is STALE and instance is None:
            raise ZLinkError(ErrorKind.UNAVAILABLE, f"the owner of Spot {spot_id} is not live")
        # No live owner anywhere: activate here (only with instance_spot(), else NOT_FOUND); the
        # store's claim decides if another host does the same at once.
        created = _resolve_now(node, spot_id, message_type, kind, instance, True)
        if isinstance(created, tuple):
            return created
        if isinstance(created, Activation):
            continue
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {spot_id}")


async def send_actor(
    node: LocalNode,
    actor_id: ActorId,
    message: object,
    metadata: Mapping[str, str],
    *,
    local: bool = False,
) -> None:
    """Admit a one-way message into the Actor's queue, here or at its owner (Rule 1; CMP-5.8)."""
    node.check_admitting()
    actor = node.actors.get(actor_id)
    if actor is None and not local and node.remote is not None:
        owner = await node.remote.owner_of(actor_id, math.inf)
        if isinstance(owner, Owner):
            await node.remote.send(owner, actor_id, message, metadata, None)
            return
        if owner is STALE:
            raise ZLinkError(ErrorKind.UNAVAILABLE, f"the owner of Actor {actor_id} is not live")
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
    *,
    local: bool = False,
) -> object:
    """A request to an Actor: one deadline, the first result wins (Rule 2), here or at its
    owner."""
    node.check_admitting()
    deadline = trio.current_time() + time_limit
    if actor_id not in node.actors and not local and node.remote is not None:
        owner = await node.remote.owner_of(actor_id, deadline)
        if isinstance(owner, Owner):
            return await node.remote.request(
                owner, actor_id, message, reply_type, metadata, None, deadline
            )
        if owner is STALE:
            raise ZLinkError(ErrorKind.UNAVAILABLE, f"the owner of Actor {actor_id} is not live")
    await _job_permit(node, deadline, None)
    try:
        actor, handler = _resolve_actor(node, actor_id, type(message), HandlerKind.REQUEST)
        turn = current_turn()
        if turn is not None and turn.actor is actor:
            # Its own turn holds the Actor's FIFO claim: the request could never run (ACT-17).
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"Actor {actor_id} cannot wait for a request to itself from its own turn",
            )
        entry = node.dispatcher.register()
        try:
            context = _actor_context(actor, actor_id, metadata, deadline)
            actor.offer(Envelope(message, handler, context, entry.route))
        except BaseException:
            node.dispatcher.pop(entry.route)
            raise
    except BaseException:
        node.jobs.release()
        raise
    return await _reply_of(node, entry, deadline, reply_type)


def _actor_context(
    actor: Any, actor_id: ActorId, metadata: Mapping[str, str], deadline: float | None = None
) -> MessageContext:
    return MessageContext(actor.spot.spot_id, metadata, actor_id, deadline)


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
    if node.jobs.try_acquire():
        return  # the hot path: no cancel scope, no checkpoint
    with trio.move_on_at(deadline):
        await node.jobs.acquire()
        return
    raise _deadline(spot_id)


async def _reply_of(
    node: LocalNode, entry: PendingCall, deadline: float, reply_type: type
) -> object:
    """The request's settled reply, checked to be a ``reply_type``."""
    reply = await _settle(node, entry, deadline)
    if not isinstance(reply, reply_type):
        raise ZLinkError(
            ErrorKind.PROTOCOL_ERROR,
            f"the reply is a {type(reply).__qualname__}, not a {reply_type.__qualname__}",
        )
    return reply


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


def _resolve_now(
    node: LocalNode,
    spot_id: SpotId,
    message_type: type,
    kind: HandlerKind,
    instance: InstanceChoice | None,
    create: bool,
) -> tuple[Activation, Handler] | Activation | None:
    """The local target and its handler; or the closing incarnation to wait for; or ``None``
    when nothing here holds the id and ``create`` is false (the caller looks at the store).
    With ``create`` (or without a remote side) a missing id is activated cold here when
    ``instance_spot()`` asks for it, else ``NOT_FOUND``."""
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
    if not create and node.remote is not None:
        return None
    if instance is None:
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {spot_id}")
    spot_type = _instance_type(node, instance)
    handler = _handler_of(spot_type, message_type, kind)
    activation = Activation(node, spot_type, spot_id, None)
    # Registered before any checkpoint, so the caller's message is the first admitted.
    node.activations[spot_id] = activation
    node.activation_nursery.start_soon(activation.run_cold)
    return activation, handler
