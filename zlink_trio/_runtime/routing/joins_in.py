"""The target's side of a join that moves an Actor here from another host (specs/actors.md
ACT-27; the source's side is host/joining.py, the move itself routing/arrivals.py).

Rule 1: the join is decided before anything is restored. The Actor's ``zlink.RelocateIn``
names the Spot and carries the join's id and request; the Spot must be live here and take
joins (actors/joins.py), and a User Spot's ``on_actor_join`` decides, as on one host. A
rejection answers ``rejected`` with the callback's reply; a failure answers the kind of its
cause; either way the source keeps the Actor and reports the join there.
Rule 2: an accepted join's completions wait for the unit's opening: the join's own
(``ACCEPTED`` with ``on_actor_join``'s reply), then one ``FAILED`` completion for each join the
same turn deferred after it, which does not run (actors/sealing.py ``RestoredActor.joined``).
"""

from __future__ import annotations

import attrs

from zlink_trio._runtime.actors.joins import decide_join, refuse_target
from zlink_trio._runtime.declarations.system import RelocateAnswer, RelocateIn
from zlink_trio._runtime.declarations.values import ActorJoinCompletion, ActorJoinOutcome
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotId, SpotKind, StableTypeName

__all__ = ["JoinAccepted", "ask_join", "join_id_of"]


@attrs.frozen
class JoinAccepted:
    """An accepted join: the Spot the Actor becomes a member of and what it is told (Rule 2)."""

    spot: Activation
    completions: list[ActorJoinCompletion]


def join_id_of(data: bytes) -> int:
    """A join's id as the wire carries it (16 bytes, big-endian)."""
    return int.from_bytes(data, "big")


def _failed(error: ZLinkError) -> RelocateAnswer:
    return RelocateAnswer(False, error.message, kind=int(error.kind))


async def ask_join(
    spots: SpotCatalog[Activation], node: LocalNode, actor_id: ActorId, message: RelocateIn
) -> RelocateAnswer | JoinAccepted:
    """Decide the join ``message`` carries (Rule 1)."""
    spot_id = SpotId(message.spot or "")
    target = spots.activations.get(spot_id)
    refused = refuse_target(target, spot_id)
    if refused is not None or target is None:
        return _failed(refused or ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {spot_id} here"))
    request = None
    if message.request_type:
        messages = node.registry.messages
        request = messages.decode(StableTypeName(message.request_type), message.request)
    reply: object | None = None
    if target.kind is SpotKind.USER:
        try:
            decision = await decide_join(target, actor_id, request)
        except ZLinkError as error:
            return _failed(error)
        if not decision.accepted:
            return _rejected(node, decision.reply)
        reply = decision.reply
    join_id = join_id_of(message.join)
    completions = [
        ActorJoinCompletion(ActorJoinOutcome.ACCEPTED, join_id, spot_id.value, None, reply)
    ]
    not_run = f"not run: an earlier join of the same turn moved Actor {actor_id} to another host"
    for later, spot in message.later_joins:
        moved_on = ZLinkError(ErrorKind.UNAVAILABLE, not_run)
        completions.append(
            ActorJoinCompletion(ActorJoinOutcome.FAILED, join_id_of(later), spot, error=moved_on)
        )
    return JoinAccepted(target, completions)


def _rejected(node: LocalNode, reply: object | None) -> RelocateAnswer:
    if reply is None:
        return RelocateAnswer(False, "on_actor_join rejected the join", rejected=True)
    try:
        name, payload = node.registry.messages.encode_within(reply, node.config.max_message_bytes)
    except (TypeError, ValueError, ZLinkError) as error:
        why = f"on_actor_join's reply cannot reach another host: {error}"
        return _failed(ZLinkError(ErrorKind.INTERNAL_FAILURE, why))
    return RelocateAnswer(
        False,
        "on_actor_join rejected the join",
        rejected=True,
        reply_type=name.value,
        reply=payload,
    )
