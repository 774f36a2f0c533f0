"""A running host: its task tree, start-up and immediate shutdown (specs/shutdown.md SHUT-2.1..
SHUT-2.3, SHUT-4.1, SHUT-4.2, SHUT-4.4..SHUT-4.10, SHUT-7.3..SHUT-7.5; specs/registration.md
REG-5.1, REG-5.11; specs/api.md API-16, API-17).

The task tree (DESIGN §2): ``open_host`` owns one nursery holding

    the store task            opens the stores and keeps them open until it is told to close
    the transport task        the RouteMesh (application and completion ROUTERs, a DEALER pair
                              per peer); closed after the last activation closed
    the membership task       publishes this host's node record (with the transport's endpoints)
                              under a lease and watches its peers (membership.py)
    the remote task           peers -> transport, the routing cache, inbound requests (remote.py)
    the completion lane       CompletionDispatcher.run
    the activations task      owns the activations nursery; every Spot's task runs inside it

Each part closes what it created (SHUT-4.1): the store task closes the store, the lane drains
itself, each activation releases its own store record. The host only decides the order, and it
decides it by stage, never by looking at what kind of part it is closing (SHUT-2.4).

Immediate shutdown runs once, in its own task in the host nursery, so a caller that stops
waiting does not stop it (SHUT-4.10); every ``shutdown()`` call waits for that one run
(SHUT-2.3). Its stages, in order (SHUT-4.5):

1. seal admission: every new operation, worker calls included, raises SHUTTING_DOWN (SHUT-4.6),
   and mark the node record ``draining`` so peers place nothing new here (MESH-18);
2. settle every call still in flight with SHUTTING_DOWN (SHUT-4.7), local and remote, so a turn
   waiting for a reply ends instead of holding its gate until the closing deadline;
3. seal every Actor's queue (what was queued is dropped; its calls were settled in stage 2), then
   close every activation with HOST_SHUTDOWN and one deadline, ``closing_timeout`` from now:
   ``on_closing`` runs while the Spot is still registered and holds its store record (SHUT-4.8,
   SHUT-7.3), then the activation releases its record;
4. stop serving peers (the remote task ends, the transport closes), withdraw the node record
   (the membership task ends), then drain the completion lane;
5. close the store;
6. publish the final result: ``shutdown()`` returns and ``open_host`` exits; nothing starts after
   (SHUT-4.4).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import trio

from zlink_trio._exception_groups import sole_error
from zlink_trio._integration.store import StoreConfig, Stores, open_stores
from zlink_trio._integration.transport import MeshConfig, RouteMesh, open_route_mesh
from zlink_trio._runtime.activation import Activation
from zlink_trio._runtime.actors import ActorManager
from zlink_trio._runtime.application import Application
from zlink_trio._runtime.authority import SpotAuthority
from zlink_trio._runtime.completion import CompletionDispatcher, shutting_down
from zlink_trio._runtime.config import HostConfig
from zlink_trio._runtime.membership import DRAINING, Membership, NodeRecord
from zlink_trio._runtime.node import LocalNode
from zlink_trio._runtime.remote import Remote
from zlink_trio._runtime.route import Route
from zlink_trio._runtime.spots import SpotManager
from zlink_trio._runtime.worker_calls import Workers
from zlink_trio._runtime.workers import WorkerScheduler
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotCloseReason, SpotId

__all__ = ["Host", "open_host"]

_log = logging.getLogger("zlink_trio.runtime.host")


class Host:
    """A started host: ``route`` for sends and requests, ``spots`` for the Spot manager,
    ``workers`` for worker offload, and ``shutdown()``. Made only by ``open_host``."""

    def __init__(self, node: LocalNode, tree: _TaskTree) -> None:
        self._node = node
        self._tree = tree
        self.route = Route(node)
        """Sends and requests to Spots."""
        self.spots = SpotManager(node)
        """Create, get-or-create and close User Spots."""
        self.actors = ActorManager(node)
        """Create, get-or-create, find and destroy Actors."""
        self.workers = Workers(node)
        """CPU and I/O worker calls on this host's worker scheduler."""

    @property
    def mesh(self) -> MeshName:
        """The mesh this host serves."""
        return self._node.mesh

    @property
    def node_rid(self) -> NodeRid:
        """This host's node RID, the same for its whole run (ID-9)."""
        return self._node.node_rid

    @property
    def node_generation(self) -> NodeGeneration:
        """This run's lifecycle generation, new at every start (ID-9)."""
        return self._node.node_generation

    @property
    def peers(self) -> Mapping[NodeRid, NodeGeneration]:
        """The other live hosts of this mesh as the store shows them now: node RID -> the
        generation of its current run (MESH-18)."""
        membership = self._tree.membership
        if membership is None:
            return {}
        return {rid: record.generation for rid, record in membership.peers().items()}

    async def shutdown(self) -> None:
        """Immediate shutdown: seal admission, settle calls, close every Spot with
        HOST_SHUTDOWN, drain completions, close the store. Idempotent; concurrent and later
        calls wait for the same run, and cancelling a caller does not stop it."""
        await self._tree.shutdown(self._node)


class _TaskTree:
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
        self.membership: Membership | None = None
        self._started = False
        self.finished = trio.Event()

    async def run_store(
        self,
        config: StoreConfig,
        *,
        task_status: trio.TaskStatus[Stores] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with open_stores(config) as stores:
                task_status.started(stores)
                await self._close_store.wait()
        finally:
            self._store_closed.set()

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
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            with self._membership_scope:
                await membership.run(task_status=task_status)
        finally:
            self._membership_ended.set()

    async def run_transport(
        self,
        config: MeshConfig,
        remote: Remote,
        *,
        task_status: trio.TaskStatus[RouteMesh] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        try:
            async with open_route_mesh(config, remote.on_message) as mesh:
                task_status.started(mesh)
                await self._close_transport.wait()
        finally:
            self._transport_closed.set()

    async def run_remote(
        self, remote: Remote, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED
    ) -> None:
        try:
            with self._remote_scope:
                await remote.run(task_status=task_status)
        finally:
            self._remote_ended.set()

    async def shutdown(self, node: LocalNode) -> None:
        if not self._started and not self.finished.is_set():
            self._started = True
            self.nursery.start_soon(self._shut_down, node)
        await self.finished.wait()

    async def _shut_down(self, node: LocalNode) -> None:
        try:
            node.admitting = False
            node.workers.close()
            if self.membership is not None:
                self.membership.update(state=DRAINING)
            if self.remote is not None:
                self.remote.settle_all()
            settled = node.dispatcher.settle_all(shutting_down())
            _log.debug("shutdown settled %d calls in flight", settled)
            deadline = trio.current_time() + node.config.closing_timeout
            actors = list(node.live_actors)
            for actor in actors:
                actor.begin_close(deadline, drain=False)
            closing = list(node.live)
            for activation in closing:
                activation.begin_close(SpotCloseReason.HOST_SHUTDOWN, deadline, drain=False)
            # The closing deadline bounds on_closing; the store release after it gets as long.
            with trio.move_on_at(deadline + node.config.store_release_timeout):
                for actor in actors:
                    await actor.closed.wait()
                for activation in closing:
                    await activation.closed.wait()
            self._close_activations.set()
            await self._activations_closed.wait()
            # Peers are served no more: inbound work ends, the transport closes.
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
            self._remote_scope.cancel()
            self._close_transport.set()
            self._membership_scope.cancel()
            self._close_store.set()
            try:
                with trio.CancelScope(shield=True):
                    await self._store_closed.wait()
            finally:
                self.finished.set()


@asynccontextmanager
async def open_host(app: Application, config: HostConfig) -> AsyncIterator[Host]:
    """Validate ``app`` and ``config``, start a host, and shut it down when the block exits.

    ``ConfigurationError`` lists every problem before anything touches the store (REG-5.1).
    """
    if not isinstance(app, Application):
        raise TypeError(f"open_host takes a zl.Application, not {type(app).__name__}")
    if not isinstance(config, HostConfig):
        raise TypeError(f"open_host takes a zl.HostConfig, not {type(config).__name__}")
    registry = app.freeze()
    node_rid = (
        NodeRid(f"node-{uuid.uuid4().hex}")
        if config.node_rid is None
        else config.node_rid
        if isinstance(config.node_rid, NodeRid)
        else NodeRid(config.node_rid)
    )
    node_generation = NodeGeneration.new()
    store_config = StoreConfig(dsn=config.store_dsn, data_dir=config.store_data_dir)
    try:
        async with trio.open_nursery() as nursery:
            tree = _TaskTree(nursery)
            stores = await nursery.start(tree.run_store, store_config)
            dispatcher = CompletionDispatcher()
            await nursery.start(dispatcher.run)
            activations = await nursery.start(tree.run_activations)
            node = LocalNode(
                config,
                registry,
                node_rid,
                node_generation,
                dispatcher,
                SpotAuthority(stores.location, config.mesh_name, node_rid, node_generation),
                activations,
                trio.lowlevel.current_trio_token(),
                WorkerScheduler(config.cpu_worker_slots),
            )
            # The Entry Spot: made by the framework, Ready before the host is handed out, with
            # an id of this run's own (SPOT-2, SPOT-42).
            entry = Activation(
                node,
                registry.entry_type,
                SpotId(f"entry.{node_generation.value:016x}"),
                None,
            )
            node.entry = entry
            # The transport first, so the node record carries its endpoints from the first
            # write; published once the host can serve (MESH-18), then peers are followed.
            membership = Membership(
                stores.location,
                config.mesh_name,
                NodeRecord(
                    node_rid,
                    node_generation,
                    types=[t.name for t in registry.spot_types.values()],
                ),
                lease=config.node_lease,
            )
            remote = Remote(node, stores.location, membership)
            bind = f"tcp://{config.bind_host}:*"
            mesh = await nursery.start(
                tree.run_transport,
                MeshConfig(
                    mesh=config.mesh_name,
                    node_rid=node_rid,
                    generation=node_generation,
                    application_bind=bind,
                    completion_bind=bind,
                ),
                remote,
            )
            remote.mesh = mesh
            membership.update(
                application_endpoint=mesh.application_endpoint,
                completion_endpoint=mesh.completion_endpoint,
            )
            await activations.start(entry.run)
            tree.membership = membership
            await nursery.start(tree.run_membership, membership)
            node.authority.check_liveness = True
            tree.remote = remote
            node.remote = remote
            await nursery.start(tree.run_remote, remote)
            host = Host(node, tree)
            try:
                yield host
            finally:
                with trio.CancelScope(shield=True):
                    await host.shutdown()
    except BaseExceptionGroup as group:
        # The host nursery wraps what passes through it; a lone error leaves as itself, so
        # callers can branch on its type and kind.
        lone = sole_error(group)
        if lone is None:
            raise
        raise lone from None
