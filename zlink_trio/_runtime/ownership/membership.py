"""Node membership through the Location Store (specs/mesh.md, MESH-1..MESH-17).

``Membership`` is one node run's membership in one mesh. It composes the own record under a
lease (``lease``: publish, renew, withdraw, MESH-3, MESH-5, MESH-8..MESH-11) with the watch over
the peers' records (``peer_watch``: scan, change hints, polling, lease expiry and the peer
events, MESH-4, MESH-6, MESH-7, MESH-13, MESH-15); the record and the events themselves are in
``node_record`` (MESH-1, MESH-2). What stays here is the public face: the checked settings
(MESH-16), ``update`` (MESH-14), ``is_live`` read from the store (MESH-12) and the one run that
ties the lease and the watch together (MESH-17).

Key layout: ``m/<mesh>/node/<node rid>``, see ``node_record``.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import Any

import trio

from zlink_trio._exception_groups import sole_error
from zlink_trio._integration.store import (
    Found,
    LocationStore,
)
from zlink_trio._runtime.ownership.fence import Fence, fence_margin
from zlink_trio._runtime.ownership.lease import NodeLease
from zlink_trio._runtime.ownership.node_record import (
    NodeRecord,
    PeerChanged,
    PeerEvent,
    PeerUp,
    decode_or_none,
)
from zlink_trio._runtime.ownership.peer_watch import PeerWatch
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid

__all__ = ["Membership", "WITHDRAW_TIMEOUT"]

_log = logging.getLogger("zlink_trio.runtime.membership")

WITHDRAW_TIMEOUT = 2.0
"""Seconds the shielded delete of the own record may take when the run ends (MESH-5)."""


def _seconds(name: str, value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise TypeError(f"{name} must be a number of seconds, not {type(value).__name__}")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds, got {value}")
    return float(value)


class Membership:
    """This node run's record in one mesh, and the live records of its peers.

    ``run()`` publishes the record, renews it every ``renew_every`` seconds under a lease of
    ``lease`` seconds, watches the peers and withdraws the record when it ends. A membership
    runs once; a restarted node makes a new one with a new generation.
    """

    def __init__(
        self,
        store: LocationStore,
        mesh: MeshName,
        record: NodeRecord,
        *,
        lease: float = 10.0,
        renew_every: float | None = None,
        poll_every: float | None = None,
        fence: Fence | None = None,
    ) -> None:
        if not isinstance(mesh, MeshName):
            raise TypeError(f"mesh must be a MeshName, not {type(mesh).__name__}")
        if not isinstance(record, NodeRecord):
            raise TypeError(f"record must be a NodeRecord, not {type(record).__name__}")
        self._lease = _seconds("lease", lease)
        if timedelta(seconds=self._lease) <= timedelta(0):
            raise ValueError(f"lease must be at least a microsecond, got {lease}")
        self._renew_every = (
            self._lease / 3 if renew_every is None else _seconds("renew_every", renew_every)
        )
        if self._renew_every >= self._lease:
            raise ValueError(
                f"renew_every ({self._renew_every}) must be shorter than the lease ({self._lease})"
            )
        self._poll_every = (
            self._lease / 2 if poll_every is None else _seconds("poll_every", poll_every)
        )
        self._store = store
        self._prefix = f"m/{mesh.value}/node/"
        key = self._prefix + record.rid.value
        self.fence = Fence(self._lease) if fence is None else fence
        """This run's self-fence (fence.py): moved by each renewal, closed when the lease is
        lost."""
        self._own = NodeLease(
            store,
            mesh,
            key,
            record,
            lease=self._lease,
            renew_every=self._renew_every,
            fence=self.fence,
        )
        self._watch = PeerWatch(
            store,
            self._prefix,
            key,
            record.rid,
            poll_every=self._poll_every,
            silence=self._lease + fence_margin(self._lease),
        )
        self._ran = False

    # --- what callers read ---------------------------------------------------------------------

    @property
    def rid(self) -> NodeRid:
        return self._own.record.rid

    @property
    def generation(self) -> NodeGeneration:
        return self._own.record.generation

    @property
    def record(self) -> NodeRecord:
        """The record the next write publishes (updates included)."""
        return self._own.record

    def peers(self) -> Mapping[NodeRid, NodeRecord]:
        """The live peers as last observed, this node excluded; a snapshot, not a view."""
        return self._watch.peers()

    async def wait_for_peer(
        self, rid: NodeRid, generation: NodeGeneration | None = None
    ) -> NodeRecord:
        """Wait until ``rid`` (of ``generation``, if given) is a live peer and return its record.

        Raises ``ZLinkError(SHUTTING_DOWN)`` once the membership has ended.
        """
        if not isinstance(rid, NodeRid):
            raise TypeError(f"rid must be a NodeRid, not {type(rid).__name__}")
        if generation is not None and not isinstance(generation, NodeGeneration):
            raise TypeError(f"generation must be a NodeGeneration, not {type(generation).__name__}")
        return await self._watch.wait_for_peer(rid, generation)

    def subscribe(self) -> trio.MemoryReceiveChannel[PeerEvent]:
        """A channel of peer events: first ``PeerUp`` for every live peer known now, then each
        change as it is observed. It ends when the membership ends, or when the subscriber falls
        ``MAX_QUEUED_EVENTS`` behind (subscribe again for a fresh snapshot)."""
        return self._watch.subscribe()

    async def sees_state(self, rid: NodeRid, state: str) -> None:
        """Return once this node's view of peer ``rid`` says ``state`` (at once if it does
        now), or when the view of peers ends; the caller bounds the wait."""
        events = self._watch.subscribe()
        async with events:
            async for event in events:
                record = event.record if isinstance(event, PeerUp | PeerChanged) else None
                if record is not None and record.rid == rid and record.state == state:
                    return

    async def is_live(self, rid: NodeRid, generation: NodeGeneration) -> bool:
        """Whether the store holds a live record of exactly this run, read now (not the cache).

        A store failure raises ``ZLinkError(UNAVAILABLE)``: unknown is not dead (MESH-12).
        """
        if not isinstance(rid, NodeRid):
            raise TypeError(f"rid must be a NodeRid, not {type(rid).__name__}")
        if not isinstance(generation, NodeGeneration):
            raise TypeError(f"generation must be a NodeGeneration, not {type(generation).__name__}")
        found = await self._store.read(self._prefix + rid.value)
        if not isinstance(found, Found):
            return False
        record = decode_or_none(found.value)
        return record is not None and record.rid == rid and record.generation == generation

    # --- what the host changes -----------------------------------------------------------------

    def update(
        self,
        *,
        load: int | None = None,
        state: str | None = None,
        application_endpoint: str | None = None,
        completion_endpoint: str | None = None,
    ) -> None:
        """Change what this node publishes. A new load goes out with the next renewal; any other
        change is written at once (MESH-14). ``None`` leaves a field as it is."""
        changes: dict[str, Any] = {
            name: value
            for name, value in (
                ("load", load),
                ("state", state),
                ("application_endpoint", application_endpoint),
                ("completion_endpoint", completion_endpoint),
            )
            if value is not None
        }
        self._own.revise(changes)

    def load_from(self, source: Callable[[], int]) -> None:
        """Read the load to publish from ``source`` at each write of the record (MESH-14): the
        renewal carries the load of that moment, and nothing wakes in between to ask."""
        self._own.load_from(source)

    async def published(self) -> None:
        """Return once the store holds every change ``update`` made so far but the load."""
        await self._own.published()

    # --- the run -------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Publish the record, report started, then renew and watch until cancelled.

        Raises ``ZLinkError(ALREADY_EXISTS)`` when another live run holds this RID at start,
        ``ZLinkError(UNAVAILABLE)`` when the store cannot be reached to publish at start, and
        ``ZLinkError(UNAVAILABLE)`` once the lease is lost (the record was removed by a peer or
        taken over; the fence is closed for good, lease.py Rule 4). On the way out the own
        record is deleted if it is still this run's.
        """
        if self._ran:
            raise ZLinkError(ErrorKind.INVALID_OPERATION, "a Membership runs only once")
        self._ran = True
        try:
            with self._store.changes() as subscription:
                # Subscribed before the first scan, so nothing written after it is missed.
                await self._own.publish(first=True)
                try:
                    await self._watch.refresh_all()
                except ZLinkError as error:
                    if error.kind != ErrorKind.UNAVAILABLE:
                        raise
                    _log.warning("could not read the peers of %s yet: %s", self.rid, error)
                try:
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(self._own.renew_loop)
                        nursery.start_soon(self._watch.watch_loop, subscription)
                        task_status.started()
                except BaseExceptionGroup as group:
                    lone = sole_error(group)
                    if lone is None:
                        raise
                    raise lone from None
        finally:
            self._watch.end()
            with trio.move_on_after(WITHDRAW_TIMEOUT) as scope:
                scope.shield = True
                await self._own.withdraw()
            if scope.cancelled_caught:
                _log.warning(
                    "withdrawing the node record of %s timed out; peers remove it once silent",
                    self.rid,
                )
