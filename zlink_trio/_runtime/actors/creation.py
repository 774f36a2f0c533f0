"""Creating, finding and destroying Actors of this host, and disconnect notices (specs/actors.md
ACT-1..ACT-9, ACT-22..ACT-28; specs/spots.md SPOT-51, SPOT-52). The Actor manager and the
create call that users hold are ``calls/actor_manager.py``.

Rule 1: one creation per id at a time, as for User Spots (creation.py Rule 1): concurrent calls on
this host meet in ``ActorCatalog.creating``; across hosts the store's conditional claim
decides. Only the claim's winner runs the constructor and ``on_create_actor``.
Rule 2: the Entry Spot decides. The new instance is made, then the host's Entry Spot runs
``on_create_actor(actor, request)`` as one of its control turns; only on acceptance is the Actor
recorded Ready, made a member of the Entry Spot and given its lane. A rejected Actor releases its
claim and was never findable or addressable (SPOT-52). An exception in the constructor or the
callback is a failure (``INTERNAL_FAILURE``), not a rejection.
Rule 3: one deadline covers the whole creation, claim to Ready; when it passes the claim is
released and the call ends with ``DEADLINE_EXCEEDED``.
Rule 5: shutdown ends a creation in flight. The seal is checked once the claim is back, and
shutdown cancels a creation that has an activation (``ActorActivation.creation``), so no Actor
becomes Ready after the seal: the caller gets ``SHUTTING_DOWN`` and the claim is released.
Rule 4: destroy takes the exact incarnation, is not a membership move (no ``on_leave_actor``) and
needs the Actor to be back in the Entry Spot first.
"""

from __future__ import annotations

import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.declarations.values import (
    ActorCreateResponse,
    ActorCreateResult,
    ActorCreateStatus,
)
from zlink_trio._runtime.engines.completion import shutting_down
from zlink_trio._runtime.ownership.authority import Claim, Held
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, ActorRef, MeshName, SpotKind, StableTypeName

__all__ = ["create", "destroy", "find", "notify_disconnected"]

Actors = ActorCatalog[ActorActivation]


async def create(
    actors: Actors,
    actor_id: ActorId,
    type_name: StableTypeName,
    request: object | None,
    mesh: MeshName | None,
    time_limit: float,
    *,
    exclusive: bool,
) -> ActorCreateResult:
    """``create`` (``exclusive``: ``ALREADY_EXISTS`` if the id is taken) or ``get_or_create``,
    all of it within ``time_limit`` seconds (Rule 3)."""
    node = actors.node
    node.check_admitting()
    node.check_mesh(mesh)
    if type_name not in node.registry.actor_types:
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Actor type {type_name} is served here")
    with node.clock.scope_until(node.clock.now() + time_limit):
        return await _create(actors, actor_id, type_name, request, exclusive)
    raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"creating Actor {actor_id} timed out")


async def find(actors: Actors, target: ActorId) -> ActorRef | None:
    """The ``ActorRef`` of the Ready Actor ``target``, here or on a live host, or ``None``."""
    node = actors.node
    node.check_admitting()
    local = actors.actors.get(target)
    if local is not None and local.accepting and not local.keeps_record:
        return local.ref  # (one moving here is not seen before its commit: RELOC-27)
    record = await node.authority.read_live(target)
    if record is None:
        return None  # a record whose owner is not live names no Ready Actor (ROUTE-4)
    mesh = node.mesh if record.mesh is None else record.mesh
    return ActorRef(target, record.generation, mesh, record.owner)


async def destroy(actors: Actors, actor_ref: ActorRef) -> bool:
    """End exactly the incarnation ``actor_ref`` names (Rule 4)."""
    node = actors.node
    node.check_admitting()
    current = actors.actors.get(actor_ref.actor_id)
    if current is None or actor_ref.mesh_name != node.mesh:
        return False
    generation = current.ref.object_generation
    if generation != actor_ref.object_generation:
        raise ZLinkError(
            ErrorKind.INVALID_OPERATION,
            f"Actor {actor_ref.actor_id} is now generation {generation.value}, not "
            f"{actor_ref.object_generation.value}",
        )
    if current.spot.kind is not SpotKind.ENTRY:
        raise ZLinkError(
            ErrorKind.INVALID_OPERATION,
            f"Actor {actor_ref.actor_id} is a member of {current.spot.spot_id}; it must "
            "join the Entry Spot before it is destroyed",
        )
    if current.joining:
        raise ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor_ref.actor_id} is joining")
    deadline = node.clock.now() + node.config.closing_timeout
    if not current.begin_close(deadline, drain=True):
        raise ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor_ref.actor_id} is closing")
    current.leave_membership()
    await current.closed.wait()
    return True


async def notify_disconnected(actors: Actors, target: ActorId) -> bool:
    """Run ``on_disconnect_actor`` of the Actor's current Spot once; ``False`` when no Ready
    Actor has the id here."""
    actors.node.check_admitting()
    current = actors.actors.get(target)
    if current is None or not current.accepting:
        return False
    await current.notify_disconnected()
    return True


async def _create(
    actors: Actors,
    actor_id: ActorId,
    type_name: StableTypeName,
    request: object | None,
    exclusive: bool,
) -> ActorCreateResult:
    node = actors.node
    while True:
        node.check_admitting()
        current = actors.actors.get(actor_id)
        if current is not None:
            if current.actor_type.name != type_name:
                raise ZLinkError(
                    ErrorKind.TYPE_MISMATCH,
                    f"Actor {actor_id} is of type {current.actor_type.name}",
                )
            if exclusive:
                raise ZLinkError(ErrorKind.ALREADY_EXISTS, f"Actor {actor_id} exists already")
            if current.accepting:
                return ActorCreateResult(ActorCreateStatus.EXISTING, current.ref)
            await current.closed.wait()
            continue
        running = actors.creating.get(actor_id)
        if running is not None:
            await running.wait()
            continue
        done = trio.Event()
        actors.creating[actor_id] = done
        try:
            return await _create_new(actors, actor_id, type_name, request, exclusive)
        finally:
            del actors.creating[actor_id]
            done.set()


async def _create_new(
    actors: Actors,
    actor_id: ActorId,
    type_name: StableTypeName,
    request: object | None,
    exclusive: bool,
) -> ActorCreateResult:
    node = actors.node
    claimed: Claim | Held
    if node.placing is not None and not exclusive:
        # Relocating: nothing new is placed here, but an Actor that lives elsewhere is found as
        # anywhere (RELOC-44).
        claimed = await node.held_elsewhere(actor_id)
    else:
        node.check_placing()
        try:
            claimed = await node.authority.claim(actor_id, SpotKind.INVALID, type_name)
        except trio.Cancelled:
            # The claim's outcome is unknown (DEC-17): read it back, undo it if it was ours.
            with (
                trio.CancelScope(shield=True),
                trio.move_on_after(node.config.store_release_timeout),
            ):
                await node.authority.forget_if_ours(actor_id)
            raise
    if isinstance(claimed, Held):
        record = claimed.record
        if record.type_name != type_name:
            raise ZLinkError(
                ErrorKind.TYPE_MISMATCH, f"Actor {actor_id} is of type {record.type_name}"
            )
        if exclusive:
            raise ZLinkError(ErrorKind.ALREADY_EXISTS, f"Actor {actor_id} exists already")
        ref = ActorRef(actor_id, record.generation, node.mesh, record.owner)
        return ActorCreateResult(ActorCreateStatus.EXISTING, ref)
    activation = ActorActivation(actors, node.registry.actor_types[type_name], actor_id, claimed)
    ready = False
    try:
        # Shutdown cancels this scope (ActorActivation.begin_close): the creation ends at once
        # with SHUTTING_DOWN, whichever step it is in, and its claim is released below.
        with activation.creation:
            node.check_admitting()  # the seal may have come while the claim was in flight
            try:
                instance = activation.make_instance()
            except Exception as error:
                raise ZLinkError(
                    ErrorKind.INTERNAL_FAILURE,
                    f"{activation.actor_type.cls.__qualname__}() raised {type(error).__name__}",
                ) from None
            try:
                response = await actors.spots.entry.control_turn(
                    lambda entry: entry.on_create_actor(instance, request)
                )
            except ZLinkError:
                raise
            except Exception as error:
                raise ZLinkError(
                    ErrorKind.INTERNAL_FAILURE, f"on_create_actor raised {type(error).__name__}"
                ) from None
            if not isinstance(response, ActorCreateResponse):
                raise ZLinkError(
                    ErrorKind.INTERNAL_FAILURE, "on_create_actor must return an ActorCreateResponse"
                )
            if not response.accepted:
                return ActorCreateResult(ActorCreateStatus.REJECTED, None, response.reply)
            node.check_admitting()
            await activation.become_ready()
            ready = True
            return ActorCreateResult(ActorCreateStatus.CREATED, activation.ref, response.reply)
        raise shutting_down()
    finally:
        if not ready:
            await activation.abandon()
