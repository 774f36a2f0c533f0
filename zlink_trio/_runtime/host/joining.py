"""The source's side of a join to a User Spot of another host (specs/actors.md ACT-27; the
target's side is routing/joins_in.py and routing/arrivals.py Rule 7).

Rule 1: where the Spot lives is the store's word: its record must name a live peer, else the
join ends ``FAILED`` as one to a missing Spot does (``NOT_FOUND``, or the store's own error).
Rule 2: the Actor's type must be able to move: a type declared with ``disable_relocation()``
(every Actor type's default) cannot join a Spot of another host; its join ends ``FAILED`` with
``INVALID_OPERATION`` and it stays where it is (decision DEC-26 in specs/relocation.md).
Rule 3: the join is one move (host/moving.py) from the Actor's own lane, which sealed it
between turns, bounded by the join's deadline. The target decides the join before it
restores anything. A rejection comes back as ``REJECTED`` with ``on_actor_join``'s reply; a
refusal or a failure before the commit as ``FAILED``; in both the Actor serves here again and
its ``on_join_completed`` runs here. After the commit the Spot it leaves runs
``on_leave_actor`` and the lane ends; the completion runs on the target.
"""

from __future__ import annotations

import attrs
import trio

from zlink_trio._runtime.actors.activation import ActorActivation, DeferredJoin
from zlink_trio._runtime.actors.sealing import seal_between_turns
from zlink_trio._runtime.declarations.system import RelocateAnswer, RelocateIn
from zlink_trio._runtime.declarations.values import ActorJoinCompletion, ActorJoinOutcome
from zlink_trio._runtime.host.moving import move_to_join
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import SpotId, StableTypeName
from zlink_trio.options import RelocationReason

__all__ = ["join_elsewhere"]


def _wire_id(join_id: int) -> bytes:
    return join_id.to_bytes(16, "big")


def _failed(join: DeferredJoin, target_id: SpotId, error: ZLinkError) -> ActorJoinCompletion:
    return ActorJoinCompletion(ActorJoinOutcome.FAILED, join.join_id, target_id.value, error=error)


async def join_elsewhere(
    remote: Remote,
    moved: Moved,
    actor: ActorActivation,
    joins: list[DeferredJoin],
    target_id: SpotId,
) -> ActorJoinCompletion | None:
    """Move ``actor`` to the host of the Spot ``target_id`` as the join ``joins[0]`` (the rest:
    what the same turn deferred after it); its completion when it stays here, ``None`` once it
    moved (Rules 1-3)."""
    join, node = joins[0], actor.node

    def failed(kind: ErrorKind, text: str) -> ActorJoinCompletion:
        return _failed(join, target_id, ZLinkError(kind, text))

    left = join.deadline - node.clock.now()
    if left <= 0:
        return failed(ErrorKind.DEADLINE_EXCEEDED, f"the join to {target_id} timed out")
    deadline = trio.current_time() + left
    try:
        owner = await remote.owner_of(target_id, join.deadline)
    except ZLinkError as error:
        return failed(error.kind, f"where {target_id} lives is not known: {error.message}")
    record = remote.peer_record(owner.node_rid) if isinstance(owner, Owner) else None
    if record is None:
        return failed(ErrorKind.NOT_FOUND, f"no Spot {target_id}")
    if actor.actor_type.relocation.kind == "disable":
        cannot = (
            f"{actor.actor_type.name} cannot join {target_id} on {record.rid}: its type "
            "declares disable_relocation(), so it never leaves its host"
        )
        return failed(ErrorKind.INVALID_OPERATION, cannot)
    request_type, request = "", b""
    if join.request is not None:
        limit = node.config.max_message_bytes
        try:
            name, request = node.registry.messages.encode_within(join.request, limit)
        except ZLinkError as error:
            return failed(error.kind, error.message)
        request_type = name.value
    entry = actor.catalog.spots.entry.spot_id
    later = tuple((_wire_id(j.join_id), (j.target or entry).value) for j in joins[1:])

    def with_join(plain: RelocateIn) -> RelocateIn:
        """The Actor's ``RelocateIn``, naming the join (routing/joins_in.py)."""
        return attrs.evolve(
            plain,
            spot=target_id.value,
            join=_wire_id(join.join_id),
            request_type=request_type,
            request=request,
            later_joins=later,
        )

    try:
        sealed = seal_between_turns(actor)
    except ZLinkError as error:
        return failed(error.kind, error.message)
    outcome = await move_to_join(remote, moved, sealed, record, deadline, with_join)
    if outcome is None:
        actor.leave_for_move()
        return None
    if isinstance(outcome, RelocateAnswer):
        return _answered(actor, join, target_id, outcome)
    if outcome is RelocationReason.DEADLINE_EXCEEDED:
        return failed(ErrorKind.DEADLINE_EXCEEDED, f"the join to {target_id} timed out")
    if outcome is RelocationReason.STATE_INCOMPATIBLE:
        return failed(ErrorKind.INTERNAL_FAILURE, f"capturing Actor {actor.actor_id} failed")
    return failed(ErrorKind.UNAVAILABLE, f"moving Actor {actor.actor_id} to {record.rid} failed")


def _answered(
    actor: ActorActivation, join: DeferredJoin, target_id: SpotId, answer: RelocateAnswer
) -> ActorJoinCompletion:
    """The completion of a join the target refused (Rule 3)."""
    if answer.rejected:
        reply = None
        if answer.reply_type:
            messages = actor.node.registry.messages
            try:
                reply = messages.decode(StableTypeName(answer.reply_type), answer.reply)
            except ZLinkError as error:
                return _failed(join, target_id, error)
        return ActorJoinCompletion(
            ActorJoinOutcome.REJECTED, join.join_id, target_id.value, reply=reply
        )
    known = {int(kind) for kind in ErrorKind}
    kind = ErrorKind(answer.kind) if answer.kind in known else ErrorKind.UNAVAILABLE
    return _failed(join, target_id, ZLinkError(kind, answer.why))
