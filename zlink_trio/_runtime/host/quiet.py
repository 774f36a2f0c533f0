"""What keeps a host from being quiet: the local half of the testing kit's barrier
(specs/testing.md KIT-5; ``zlink_trio.testing`` adds the traffic between hosts).

A host is quiet when no turn runs (message, tick, lifecycle or control turn; an Actor's lane
between messages), no activation or creation is on its way in or out, no admitted message waits
for its turn, no inbound send waits in a backlog, no call waits for its outcome, the completion
lane is empty and no worker call runs. Each reason is reported as a short phrase naming what is
busy, so a barrier that times out can say why. Read-only, and only asked for by tests.
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any

from zlink_trio._runtime.actors.activation import ActorState
from zlink_trio._runtime.spots.activation import ActivationState

__all__ = ["busy_parts"]

_SHOWN = 5
"""Most activations named one by one; the rest are counted."""


def busy_parts(host: Any) -> list[str]:
    """Why ``host`` (a started ``Host``) is not quiet now; empty when it is."""
    node = host._node
    tree = host._tree
    parts: list[str] = []
    for kind, catalog, ready, id_of in (
        ("Spot", tree.spots, ActivationState.READY, attrgetter("spot_id")),
        ("Actor", tree.actors, ActorState.READY, attrgetter("actor_id")),
    ):
        if catalog is None:
            continue
        parts += _listed(
            [
                f"{kind} {id_of(a)} ({a.state.value}{', in a turn' if a.busy else ''})"
                for a in catalog.live
                if a.state is not ready or a.busy
            ]
        )
        if catalog.creating:
            parts.append(f"{len(catalog.creating)} {kind} creation(s) in flight")
    queued = node.config.app_job_queue_size - node.jobs.available
    if queued:
        parts.append(f"{queued} admitted message(s) wait for their turn")
    if tree.inbound is not None and (parked := tree.inbound.backlogs.parked):
        parts.append(f"{parked} send(s) from peers wait in backlogs")
    if waiting := node.dispatcher.in_flight:
        parts.append(f"{waiting} call(s) wait for their outcome")
    if lane := node.dispatcher.queued:
        parts.append(f"{lane} completion(s) wait on the completion lane")
    workers = node.workers
    if running := workers.cpu_slots_in_use + workers.cpu_calls_waiting:
        parts.append(f"{running} worker call(s) run or wait")
    remote = tree.remote
    if remote is not None and remote.mesh is not None and (pending := remote.mesh.pending_requests):
        parts.append(f"{pending} request(s) to peers wait for their reply")
    return parts


def _listed(names: list[str]) -> list[str]:
    if len(names) <= _SHOWN:
        return names
    return [*names[:_SHOWN], f"and {len(names) - _SHOWN} more activation(s)"]
