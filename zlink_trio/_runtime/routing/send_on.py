"""Sending on what waited in a unit whose move was given up because its source is gone
(routing/arrivals.py Rule 6).

Each message goes on as a call of this host, in the order it waited, and meets the id as any
caller would now: a send is admitted again, a request is made again and its outcome completes
the caller's original entry (its reply route), within what is left of its deadline. The job
permit it held while it waited is given back first: it comes in again as a new call.
"""

from __future__ import annotations

import logging

from zlink_trio._runtime.engines.completion import Outcome
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.routing.local import InstanceChoice
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import ActorId, SpotId, StableTypeName

__all__ = ["send_on"]

_log = logging.getLogger("zlink_trio.runtime.relocation")


async def send_on(
    messaging: Messaging,
    target: SpotId | ActorId,
    instance: StableTypeName | None,
    envelopes: list[Envelope],
) -> None:
    """Send ``envelopes`` on to ``target`` as this host's calls, in order (``instance``: the
    Instance Spot type the calls name, so that one may be activated here)."""
    node = messaging.node
    dispatcher = node.dispatcher
    choice = None if instance is None else InstanceChoice(instance)
    for envelope in envelopes:
        node.jobs.release()  # it leaves this host's queue, and comes in again
        message, context, route = envelope.message, envelope.context, envelope.reply_route
        metadata = context.metadata
        try:
            if route is None:
                if isinstance(target, SpotId):
                    await messaging.send(target, message, metadata, choice, None, local=True)
                else:
                    await messaging.send_actor(target, message, metadata, local=True)
                continue
            left = max((context.deadline or 0.0) - node.clock.now(), 1e-6)
            if isinstance(target, SpotId):
                value = await messaging.request(
                    target, message, object, metadata, choice, None, left, local=True
                )
            else:
                value = await messaging.request_actor(
                    target, message, object, metadata, left, local=True
                )
            outcome = Outcome(value=value)
        except ZLinkError as error:
            if route is None:
                _log.warning("a send to %s was lost with its move: %s", target, error)
                continue
            _log.warning("a request to %s that waited for its move failed: %s", target, error)
            outcome = Outcome(error=error)
        entry = dispatcher.pop(route)
        if entry is not None:
            dispatcher.deliver(entry, outcome)
