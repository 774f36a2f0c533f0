"""The host's task tree and the order of its immediate shutdown (specs/shutdown.md SHUT-2.3,
SHUT-2.4, SHUT-4.1, SHUT-4.4..SHUT-4.10, SHUT-7.3..SHUT-7.5; DESIGN §2).

``open_host`` (host.py) starts each part in the host nursery through the ``run_*`` methods here;
each part closes what it created (SHUT-4.1), and the events and cancel scopes of ``TaskTree``
encode the order in which they are told to. The stages are listed in host.py's docstring.
"""

from __future__ import annotations

import logging

import trio

from zlink_trio._integration.store import StoreConfig, Stores, open_stores
from zlink_trio._integration.transport import MeshConfig, RouteMesh, open_route_mesh
from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.engines.completion import shutting_down
from zlink_trio._runtime.engines.heap import collector_paused
from zlink_trio._runtime.host.relocation import Relocator
from zlink_trio._runtime.host.status import StatusBoard
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.batches import RecordBatcher
from zlink_trio._runtime.ownership.membership import Membership
from zlink_trio._runtime.ownership.node_record import DRAINING
from zlink_trio._runtime.routing.inbound import Inbound
from zlink_trio._runtime.routing.leaving import say_leaving
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import SpotCloseReason
from zlink_trio.options import HostStatus

__all__ = ["TaskTree"]

STALE_ROUTES_QUIET = 1.0
"""Seconds without work for a moved unit after which a relocated host's shutdown goes on: the
peers' routes have caught up with the store (its change hints reach them in milliseconds)."""

_log = logging.getLogger("zlink_trio.runtime.host")


class TaskTree:
    """The host nursery's parts and the events that encode the shutdown order."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self.nursery = nursery
        self._close_store = trio.Event()
        self._store_closed = trio.Event()
        self._close_activations = trio.Event()
        self._activations_closed = trio.Event()
        self._membership_scope = trio.CancelScope()
        self._membership_ended = trio.Event()
        self._close_transport = trio.Event()
        self._transport_closed = trio.Event()
        self._remote_scope = trio.CancelScope()
        self._remote_ended = trio.Event()
        self.remote: Remote | None = None
        self.inbound: Inbound | None = None
        self.membership: Membership | None = None
        self.spots: SpotCatalog[Activation] | None = None
        self.actors: ActorCatalog[ActorActivation] | None = None
        self._started = False
        self.finished = trio.Event()
        self._batches: RecordBatcher | None = None
        self._batches_ended = trio.Event()
        self.board = StatusBoard()
        """The host's status and its observers (status.py)."""
        self.relocator: Relocator | None = None

    async def run_store(
        self,
        config: StoreConfig,
        shared: Stores | None = None,
        *,
        task_status: trio.TaskStatus[Stores] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The host's stores until shutdown closes them; ``shared`` ones are used as they are
        and left open for their owner (the testing kit's one pool per Trio run)."""
        try:
            if shared is not None:
                task_status.started(shared)
                await self._close_store.wait()
                return
            async with open_stores(config) as stores:
                task_status.started(stores)
                await self._close_store.wait()
        finally:
            self._store_closed.set()

    async def run_batches(
        self,
        batches: RecordBatcher,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The flusher of record releases and Ready marks (ownership/batches.py); ends once
        closed and empty."""
        self._batches = batches
        try:
            await batches.run(task_status=task_status)
        finally:
            self._batches_ended.set()

    async def run_activations(
        self, *, task_status: trio.TaskStatus[trio.Nursery] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            async with trio.open_nursery() as activations:
                task_status.started(activations)
                await self._close_activations.wait()
                # Every activation has closed or overrun its bound; cancel what is left.
                activations.cancel_scope.cancel()
        finally:
            self._activations_closed.set()

    async def run_membership(
        self,
        membership: Membership,
        node: LocalNode,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The membership task. When the run loses its lease (ownership/fence.py), the host
        shuts down in order first, cutting its Spots at once (``_shut_down``), and only then
        does the error leave this task and end ``open_host`` (MESH-22)."""
        lost: ZLinkError | None = None
        try:
            with self._membership_scope:
                await membership.run(task_status=task_status)
        except ZLinkError as error:
            if membership.fence.lost is None:
                raise
            lost = error
        finally:
            self._membership_ended.set()
        if lost is not None:
            await self.shutdown(node)
            raise lost

    async def run_transport(
        self,
        config: MeshConfig,
        inbound: Inbound,
        *,
        task_status: trio.TaskStatus[RouteMesh] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with open_route_mesh(config, inbound.on_message) as mesh:
                task_status.started(mesh)
                await self._close_transport.wait()
        finally:
            self._transport_closed.set()

    async def run_remote(
        self,
        remote: Remote,
        inbound: Inbound,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            with self._remote_scope:
                async with trio.open_nursery() as serving:
                    await serving.start(remote.run)
                    await serving.start(inbound.run)
                    task_status.started()
        finally:
            self._remote_ended.set()

    async def shutdown(self, node: LocalNode) -> None:
        if not self._started and not self.finished.is_set():
            self._started = True
            relocated = self.board.status is HostStatus.RELOCATED
            self.board.set(HostStatus.DRAINING)
            if self.relocator is not None:
                self.relocator.shutdown_started()  # shutdown wins (relocation.py Rule 5)
            self.nursery.start_soon(self._shut_down, node, relocated)
        await self.finished.wait()

    async def _shut_down(self, node: LocalNode, relocated: bool) -> None:
        if relocated:
            await self._relay_stale_routes(node)
        with collector_paused():  # thousands of activations end: keep the GC off the heap
            await self._shut_down_in_order(node)

    async def _relay_stale_routes(self, node: LocalNode) -> None:
        """A relocated host relays what still reaches it for the units it moved until that has
        been quiet for ``STALE_ROUTES_QUIET`` seconds, at most its follow window, before it seals
        admission (RELOC-69): a peer that has not read the new owner yet loses no send to it.
        Then it asks every peer to drop its routes here (RELOC-78, routing/leaving.py). In the
        shutdown's own task, so cancelling a caller of ``shutdown()`` does not skip it."""
        moved = self.relocator.moved if self.relocator is not None else None
        if moved is None:
            return
        with trio.move_on_after(node.config.relocation_follow_window):
            await moved.wait_quiet(STALE_ROUTES_QUIET)
        if self.remote is None or self.membership is None or self.spots is None:
            return
        # Every peer drops its routes here and flushes what it sent (RELOC-78); then the
        # relays that set off are waited for, as the quiet wait's were.
        peers = list(self.membership.peers())
        entry = self.spots.entry.spot_id
        await say_leaving(node, self.remote, peers, entry)
        with trio.move_on_after(node.config.request_timeout):
            await moved.wait_quiet(0.0)

    async def _shut_down_in_order(self, node: LocalNode) -> None:
        try:
            node.admitting = False
            node.jobs.close()  # sends and requests waiting for a job permit end now (CMP-7.10)
            node.workers.close()
            if self.membership is not None:
                self.membership.update(state=DRAINING)
            if self.remote is not None:
                self.remote.settle_all()
            settled = node.dispatcher.settle_all(shutting_down())
            _log.debug("shutdown settled %d calls in flight", settled)
            # A run that lost its lease runs no on_closing: its Spots may already live elsewhere
            # (MESH-22), so they are cut at once.
            closing_for = 0.0 if node.fence.lost is not None else node.config.closing_timeout
            # on_closing's deadline is application time (VCLK-2); the wait below is bounded on
            # Trio's clock as well, so a host on a test's clock never waits for that clock to
            # move to shut down (VCLK-1). On Trio's clock the two bounds are one.
            started = trio.current_time()
            deadline = node.clock.now() + closing_for
            # Both are set right after the node is made, before any part can shut down.
            assert self.spots is not None
            assert self.actors is not None
            actors = list(self.actors.live)
            for actor in actors:
                actor.begin_close(deadline, drain=False)
            closing = list(self.spots.live)
            for activation in closing:
                activation.begin_close(SpotCloseReason.HOST_SHUTDOWN, deadline, drain=False)
            # The closing deadline bounds on_closing; the store release after it gets as long.
            with trio.move_on_at(started + closing_for + node.config.store_release_timeout):
                # A part crashed and the activations nursery has ended: idle units had no task
                # to end with it, so their closes run here (spots/activation.py Rule 10).
                stranded = [actor.close_stranded for actor in actors if actor.stranded]
                stranded += [spot.close_stranded for spot in closing if spot.stranded]
                if stranded:
                    async with trio.open_nursery() as closes:
                        for close in stranded:
                            closes.start_soon(close)
                # Waiting on an Event that is already set is still a checkpoint, one pass of the
                # scheduler each: with 10,000 Spots that alone was ~0.4 s, so skip those.
                for event in [a.closed for a in actors] + [a.closed for a in closing]:
                    if not event.is_set():
                        await event.wait()
                # Creations whose claim was in flight at the seal give it back before the store
                # closes (creation.py Rule 3 of spots and Rule 5 of actors).
                for creating in [*self.spots.creating.values(), *self.actors.creating.values()]:
                    if not creating.is_set():
                        await creating.wait()
            self._close_activations.set()
            await self._activations_closed.wait()
            # Every activation has released its record through the batcher: let it finish.
            if self._batches is not None:
                self._batches.close()
                await self._batches_ended.wait()
            # Peers are served no more: inbound work ends, the transport closes, and so does
            # every wait for a peer's credit (shielded, it ends no other way, OVL-2): not
            # before, so a relay still waiting for it can yet go out.
            if self.remote is not None:
                self.remote.credits.close()
            self._remote_scope.cancel()
            self._close_transport.set()
            if self.remote is not None:
                await self._remote_ended.wait()
                await self._transport_closed.wait()
            # The membership withdraws its record as it ends (bounded, shielded).
            self._membership_scope.cancel()
            await self._membership_ended.wait()
            node.dispatcher.close()
            await node.dispatcher.wait_drained()
        finally:
            # Even when the host nursery is being cancelled (a part crashed), the store still
            # closes and the result is published, so no waiter of shutdown() is left behind.
            if self._batches is not None:
                self._batches.close()
            if self.remote is not None:
                self.remote.credits.close()
            self._remote_scope.cancel()
            self._close_transport.set()
            self._membership_scope.cancel()
            self._close_store.set()
            try:
                with trio.CancelScope(shield=True):
                    await self._store_closed.wait()
            finally:
                self.board.set(HostStatus.STOPPED)
                self.finished.set()
