"""Creating and closing User Spots on this host (specs/spots.md SPOT-3..SPOT-5, SPOT-7,
SPOT-9..SPOT-14, SPOT-32..SPOT-34, SPOT-36, SPOT-40; specs/identifiers.md ID-6.12).

Rule 1: one creation per id at a time. Within a host, concurrent create/get-or-create calls for
one id meet in ``SpotCatalog.creating``: the first runs the creation, the others wait for it and
then look again, so exactly one activation runs the factory and ``on_create`` (SPOT-15). Across
hosts the store's conditional claim decides (ownership/authority.py Rule 1).
Rule 3: nothing starts after the seal. A creation whose claim comes back after shutdown has
sealed admission gives the claim back and ends with ``SHUTTING_DOWN``; shutdown waits for the
creations in flight (``SpotCatalog.creating``) before it closes the store.
Rule 2: one deadline covers the whole creation: claim, constructor, ``on_create``,
``on_initialize`` and the Ready record (SPOT-7); when it passes the activation is cancelled, its
claim released, and the call ends with ``DEADLINE_EXCEEDED``.
"""

from __future__ import annotations

import logging
import uuid

import trio

from zlink_trio._runtime.declarations.values import SpotCreateResult, SpotCreateStatus
from zlink_trio._runtime.engines.completion import shutting_down
from zlink_trio._runtime.engines.gate import current_turn
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.authority import Claim, Held
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName, SpotCloseReason, SpotId, SpotKind, SpotRef, StableTypeName

__all__ = ["close", "create"]

_log = logging.getLogger("zlink_trio.runtime.creation")


async def create(
    spots: SpotCatalog[Activation],
    spot_id: SpotId | None,
    type_name: StableTypeName,
    request: object | None,
    mesh: MeshName | None,
    time_limit: float,
) -> SpotCreateResult:
    """``create`` (``spot_id`` ``None``: a generated id) or ``get_or_create``."""
    node = spots.node
    node.check_admitting()
    node.check_mesh(mesh)
    spot_type = node.registry.spot_types.get(type_name)
    if spot_type is None:
        raise ZLinkError(ErrorKind.NOT_FOUND, f"no Spot type {type_name} is served here")
    if spot_type.kind is not SpotKind.USER:
        raise ZLinkError(
            ErrorKind.INVALID_OPERATION,
            f"{type_name} is not a User Spot type; only User Spots "
            "are created through the Spot manager",
        )
    generated = spot_id is None
    target = SpotId(str(uuid.uuid4())) if spot_id is None else spot_id
    deadline = node.clock.now() + time_limit
    with node.clock.scope_until(deadline):
        return await _create(spots, target, generated, type_name, request, deadline)
    raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"creating {target} timed out")


async def _create(
    spots: SpotCatalog[Activation],
    spot_id: SpotId,
    generated: bool,
    type_name: StableTypeName,
    request: object | None,
    deadline: float,
) -> SpotCreateResult:
    node = spots.node
    while True:
        node.check_admitting()
        current = spots.activations.get(spot_id)
        if current is not None:
            if current.kind is not SpotKind.USER or current.spot_type.name != type_name:
                raise ZLinkError(
                    ErrorKind.TYPE_MISMATCH,
                    f"{spot_id} is a {current.kind.name} Spot of type {current.spot_type.name}",
                )
            if generated:
                raise ZLinkError(ErrorKind.ALREADY_EXISTS, f"{spot_id} exists already")
            if current.accepting and not current.keeps_record:
                return SpotCreateResult(SpotCreateStatus.EXISTING, current.ref)
            if current.accepting:  # moving here, not committed yet: not to be seen (RELOC-27)
                await current.settled.wait()
                if current.accepting:
                    continue
            await current.closed.wait()
            continue
        running = spots.creating.get(spot_id)
        if running is not None:
            await running.wait()
            continue
        done = trio.Event()
        spots.creating[spot_id] = done
        spots.creating_until[spot_id] = deadline
        try:
            return await _create_new(spots, spot_id, generated, type_name, request)
        finally:
            del spots.creating[spot_id]
            del spots.creating_until[spot_id]
            done.set()


async def _create_new(
    spots: SpotCatalog[Activation],
    spot_id: SpotId,
    generated: bool,
    type_name: StableTypeName,
    request: object | None,
) -> SpotCreateResult:
    node = spots.node
    spot_type = node.registry.spot_types[type_name]
    claimed: Claim | Held
    if node.placing is not None and not generated:
        # Relocating: nothing new is placed here, but a Spot that lives elsewhere is found as
        # anywhere (RELOC-44).
        claimed = await node.held_elsewhere(spot_id)
    else:
        node.check_placing()
        claimed = await _claim(node, spot_id, type_name)
    if isinstance(claimed, Held):
        record = claimed.record
        if record.kind is not SpotKind.USER or record.type_name != type_name:
            raise ZLinkError(
                ErrorKind.TYPE_MISMATCH,
                f"{spot_id} is a {record.kind.name} Spot of type {record.type_name}",
            )
        if generated:
            raise ZLinkError(ErrorKind.ALREADY_EXISTS, f"{spot_id} exists already")
        ref = SpotRef(spot_id, record.generation, node.mesh, record.owner)
        return SpotCreateResult(SpotCreateStatus.EXISTING, ref)
    if not node.admitting:
        # Sealed while the claim was in flight: nothing starts after the seal (the activations
        # nursery may be closed already), and the claim is given back (SHUT-4.6).
        try:
            with trio.CancelScope(shield=True):
                with trio.move_on_after(node.config.store_release_timeout):
                    await node.authority.release(claimed)
        except ZLinkError as error:
            _log.warning("could not release the record of %s: %s", spot_id, error)
        raise shutting_down()
    # No checkpoint between the check above and start(): the nursery is open.
    activation = Activation(spots, spot_type, spot_id, claimed)
    response = await node.activation_nursery.start(activation.run, request)
    ref = SpotRef(spot_id, claimed.record.generation, node.mesh, node.node_rid)
    if not response.accepted:
        # Wait until its record is released, so the next call finds the id free (SPOT-13).
        await activation.closed.wait()
        return SpotCreateResult(SpotCreateStatus.REJECTED, ref, response.reply)
    return SpotCreateResult(SpotCreateStatus.CREATED, ref, response.reply)


async def close(spots: SpotCatalog[Activation], ref: SpotRef) -> bool:
    """Close the User Spot incarnation ``ref`` names (SPOT-32..SPOT-34, SPOT-36)."""
    node = spots.node
    node.check_admitting()
    if ref.mesh_name != node.mesh:
        return False
    current = spots.activations.get(ref.spot_id)
    if current is None:
        return False
    if current.kind is not SpotKind.USER:
        raise ZLinkError(
            ErrorKind.INVALID_OPERATION,
            f"{ref.spot_id} is a {current.kind.name} Spot; only "
            "User Spots are closed through the Spot manager",
        )
    if current.generation != ref.object_generation:
        raise ZLinkError(
            ErrorKind.INVALID_OPERATION,
            f"{ref.spot_id} is now generation {current.generation.value}, not "
            f"{ref.object_generation.value}",
        )
    if current.members:
        # Closing would strand its members; they must leave first (SPOT-37).
        return False
    deadline = node.clock.now() + node.config.closing_timeout
    if not current.begin_close(SpotCloseReason.EXPLICIT_CLOSE, deadline, drain=True):
        raise ZLinkError(ErrorKind.UNAVAILABLE, f"{ref.spot_id} is already closing")
    turn = current_turn()
    if turn is not None and turn.gate is current.gate:
        # Closing itself from its own turn: the close completes after this turn ends.
        return True
    await current.closed.wait()
    return True


async def _claim(node: LocalNode, spot_id: SpotId, type_name: StableTypeName) -> Claim | Held:
    try:
        return await node.authority.claim(spot_id, SpotKind.USER, type_name)
    except trio.Cancelled:
        # The claim's outcome is unknown (DEC-17): read it back and undo it if it was ours.
        with trio.CancelScope(shield=True), trio.move_on_after(node.config.store_release_timeout):
            await node.authority.forget_if_ours(spot_id)
        raise
