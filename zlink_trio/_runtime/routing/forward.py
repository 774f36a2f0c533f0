"""Handing a lost cold race's admitted messages to the winning host (specs/routing.md ROUTE-8).

Two hosts may activate one Instance Spot id cold at the same instant; the store's claim picks one
(spots/activation.py Rule 7). The loser's incarnation never starts, and everything it admitted is
handed here, in admission order, to the winner: a send is sent on, a request is made again to the
winner and its outcome completes the caller's original entry, so the caller waits on its own
call and sees the winner's answer. Each message is in the winner's queue before the next one is
submitted (a request's reply is waited for in the background), so the winner handles them in
the order the loser admitted them (ROUTE-8). The Spot subsystem calls this through
``SpotCatalog.forward``, which the host binds to ``partial(forward, remote)``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable

import trio

from zlink_trio._runtime.declarations.values import MessageContext
from zlink_trio._runtime.engines.completion import Outcome
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._wire.ids import OperationId, ReplyRouteId
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import ActorId, NodeRid, SpotId, SpotKind, StableTypeName

__all__ = ["forward", "relay", "starts_once"]

_log = logging.getLogger("zlink_trio.runtime.activation")


async def forward(
    remote: Remote,
    activation: Activation,
    owner: NodeRid,
    envelopes: list[Envelope],
    *,
    permits_held: bool = True,
    replies: trio.Nursery | None = None,
) -> None:
    """Send what ``activation`` admitted to ``owner``, in order; requests complete their
    callers' entries with the winner's outcome. Each envelope's job permit is released first
    unless the caller has (``permits_held=False``: a moved Spot's relay, host/cutover.py, and
    a lost cold race, whose entries say which hold one, spots/activation.py ``_finish``).
    Returns once every reply is in, or, given ``replies``, once every message is submitted:
    the replies are then waited for in that nursery."""
    # Only an Instance Spot is named by its type on the wire (a User Spot's type comes from its
    # record, and naming it would ask for an Instance Spot).
    instance_type = activation.spot_type.name if activation.kind is SpotKind.INSTANCE else None
    await relay(
        remote,
        activation.node,
        activation.spot_id,
        instance_type,
        owner,
        envelopes,
        permits_held=permits_held,
        replies=replies,
    )


async def relay(
    remote: Remote,
    node: LocalNode,
    target: SpotId | ActorId,
    instance_type: StableTypeName | None,
    owner: NodeRid,
    envelopes: list[Envelope],
    *,
    permits_held: bool = True,
    replies: trio.Nursery | None = None,
) -> None:
    """``forward`` by the target's id: a Spot's (named by ``instance_type`` when it is an
    Instance Spot) or an Actor's (a moved Actor's relay, host/cutover.py)."""
    if replies is not None:
        await _relay(remote, node, target, instance_type, owner, envelopes, permits_held, replies)
        return
    async with trio.open_nursery() as requests:
        await _relay(remote, node, target, instance_type, owner, envelopes, permits_held, requests)


async def _relay(
    remote: Remote,
    node: LocalNode,
    target: SpotId | ActorId,
    instance_type: StableTypeName | None,
    owner: NodeRid,
    envelopes: list[Envelope],
    permits_held: bool,
    requests: trio.Nursery,
) -> None:
    for envelope in envelopes:
        if permits_held:
            node.jobs.release()
        message, context = envelope.message, envelope.context
        route = envelope.reply_route
        if route is None:
            try:
                await remote.send(Owner(owner), target, message, context.metadata, instance_type)
            except ZLinkError as error:
                _log.info("a forwarded send to %s failed: %s", target, error)
            continue
        reply_type = envelope.handler.reply_type or object
        deadline = math.inf if context.deadline is None else context.deadline

        async def forward_request(
            route: ReplyRouteId = route,
            message: object = message,
            context: MessageContext = context,
            reply_type: type = reply_type,
            deadline: float = deadline,
            operation_id: OperationId | None = envelope.operation_id,
            *,
            task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
        ) -> None:
            on_submitted = starts_once(task_status)

            try:
                value = await remote.request(
                    Owner(owner),
                    target,
                    message,
                    reply_type,
                    context.metadata,
                    instance_type,
                    deadline,
                    on_submitted,
                    operation_id=operation_id,  # a peer's operation goes on (CMP-10.5)
                )
                outcome = Outcome(value=value)
            except ZLinkError as error:
                outcome = Outcome(error=error)
            finally:
                on_submitted()  # ended before it was submitted: the next one may go
            entry = node.dispatcher.pop(route)
            if entry is not None:
                node.dispatcher.deliver(entry, outcome)

        # The next message goes only once this request is in the winner's queue, so the
        # winner sees them in admission order; the reply is waited for in the background.
        await requests.start(forward_request)


def starts_once(task_status: trio.TaskStatus[None]) -> Callable[[], None]:
    """An ``on_submitted`` for ``Remote.request`` that reports the task started the first time it
    is called (the request is on its way, or ended before), and does nothing after."""
    started = False

    def on_submitted() -> None:
        nonlocal started
        if not started:
            started = True
            task_status.started()

    return on_submitted
