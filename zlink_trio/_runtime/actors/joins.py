"""What decides a join to a User Spot, wherever the joining Actor runs (specs/actors.md
ACT-22, ACT-26, ACT-27): the same checks and the same ``on_actor_join`` turn for a join on one
host (activation.py Rule 3) and for one that moves the Actor from another host
(routing/arrivals.py, host/joining.py).
"""

from __future__ import annotations

from zlink_trio._runtime.declarations.values import SpotActorJoinResult
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotId, SpotKind

__all__ = ["decide_join", "refuse_target"]


def refuse_target(target: Activation | None, target_id: SpotId) -> ZLinkError | None:
    """Why ``target`` takes no join (``NOT_FOUND``: missing or closing; ``INVALID_OPERATION``:
    an Instance Spot), ``None`` when it may be asked."""
    if target is None or not target.accepting:
        return ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {target_id} here")
    if target.kind is SpotKind.INSTANCE:
        return ZLinkError(
            ErrorKind.INVALID_OPERATION, f"{target_id} is an Instance Spot: it has no Actors"
        )
    return None


async def decide_join(
    target: Activation, actor_id: ActorId, request: object | None
) -> SpotActorJoinResult:
    """The decision of the User Spot ``target``'s ``on_actor_join`` (ACT-22), run as a control
    turn of that Spot; ``ZLinkError`` for a join that cannot be decided (ACT-26): the turn's own
    error, or ``INTERNAL_FAILURE`` when the callback raises or returns anything else."""
    try:
        decision = await target.control_turn(lambda spot: spot.on_actor_join(actor_id, request))
    except ZLinkError:
        raise
    except Exception as error:
        raised = f"on_actor_join raised {type(error).__name__}"
        raise ZLinkError(ErrorKind.INTERNAL_FAILURE, raised) from None
    if not isinstance(decision, SpotActorJoinResult):
        wrong = "on_actor_join must return a SpotActorJoinResult"
        raise ZLinkError(ErrorKind.INTERNAL_FAILURE, wrong)
    return decision
