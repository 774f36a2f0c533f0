"""A running host: its task tree, start-up and immediate shutdown (specs/shutdown.md SHUT-2.1..
SHUT-2.3, SHUT-4.1, SHUT-4.2, SHUT-4.4..SHUT-4.10, SHUT-7.3..SHUT-7.5; specs/registration.md
REG-5.1, REG-5.11; specs/api.md API-16, API-17).

The task tree (DESIGN §2): ``open_host`` owns one nursery holding

    the store task            opens the stores and keeps them open until it is told to close
    the transport task        the RouteMesh (application and completion ROUTERs, a DEALER pair
                              per peer); closed after the last activation closed
    the membership task       publishes this host's node record (with the transport's endpoints)
                              under a lease and watches its peers (ownership/membership.py)
    the remote task           peers -> transport, the routing cache (routing/remote.py), and
                              inbound requests (routing/inbound.py)
    the completion lane       CompletionDispatcher.run
    the activations task      owns the activations nursery; every Spot's task runs inside it

The parts are built here, the composition root, and wired with the few callables that point
against the subsystem graph (architecture.md, "Inverted dependencies"); ``tree.py`` runs them.
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

The application clock (engines/clock.py): ``open_host`` runs the host on Trio's clock;
``open_host_on`` takes the clock, for ``zlink_trio.testing`` (a ``VirtualClock``). The clock
goes into the ``LocalNode``, where every part that uses application time reads it (VCLK-2);
everything else keeps Trio's clock (VCLK-1).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial

import trio

from zlink_trio._exception_groups import sole_error
from zlink_trio._integration.store import StoreConfig, Stores
from zlink_trio._integration.transport import MeshConfig, curve_public, new_curve_secret
from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.application.application import Application
from zlink_trio._runtime.application.contexts import ActorContext, SpotContext
from zlink_trio._runtime.calls.actor_manager import ActorManager
from zlink_trio._runtime.calls.route import Route
from zlink_trio._runtime.calls.spot_manager import SpotManager
from zlink_trio._runtime.calls.worker_calls import Workers
from zlink_trio._runtime.declarations.config import (
    FRAME_HEADROOM,
    HostConfig,
    check_curve_secret,
)
from zlink_trio._runtime.engines.clock import TRIO_CLOCK, Clock
from zlink_trio._runtime.engines.completion import CompletionDispatcher
from zlink_trio._runtime.engines.workers import WorkerScheduler
from zlink_trio._runtime.host.interrupts import Interruption, watch_interrupts
from zlink_trio._runtime.host.joining import join_elsewhere
from zlink_trio._runtime.host.relocation import DEFAULT_DEADLINE, Relocator
from zlink_trio._runtime.host.status import StatusStream
from zlink_trio._runtime.host.tree import TaskTree
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.authority import SpotAuthority
from zlink_trio._runtime.ownership.fence import Fence
from zlink_trio._runtime.ownership.membership import Membership
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.routing.forward import forward
from zlink_trio._runtime.routing.inbound import Inbound
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.errors import ConfigurationError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId
from zlink_trio.options import HostStatus, RelocationMode, RelocationResult

__all__ = ["Host", "open_host", "open_host_on"]


class Host:
    """A started host: ``route`` for sends and requests, ``spots`` for the Spot manager,
    ``workers`` for worker offload, and ``shutdown()``. Made only by ``open_host``."""

    def __init__(self, messaging: Messaging, tree: TaskTree) -> None:
        self._node = messaging.node
        self._messaging = messaging
        self._tree = tree
        self.route = Route(messaging)
        """Sends and requests to Spots."""
        self.spots = SpotManager(messaging)
        """Create, get-or-create and close User Spots."""
        self.actors = ActorManager(messaging.actors)
        """Create, get-or-create, find and destroy Actors."""
        self.workers = Workers(messaging.node)
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
        HOST_SHUTDOWN, drain completions, close the store. A ``RELOCATED`` host first relays
        what still reaches it for the units it moved until that has been quiet for a second
        (RELOC-69). Idempotent; concurrent and later calls wait for the same run, and cancelling
        a caller does not stop it."""
        await self._tree.shutdown(self._node)

    @property
    def follow_relays(self) -> int:
        """Calls this host sent on to Spots and Actors that had moved away (RELOC-79)."""
        return self._messaging.moved.relays

    @property
    def status(self) -> HostStatus:
        """Where the host is in its life now (RELOC-43)."""
        return self._tree.board.status

    def observe(self) -> StatusStream:
        """``async for status in host.observe()``: the current status, then every change, until
        STOPPED or ERROR; a slow reader never holds the host up (SHUT-3.12)."""
        return self._tree.board.observe()

    async def relocate(
        self,
        mode: RelocationMode = RelocationMode.PLANNED_MAINTENANCE,
        *,
        target_version: str | None = None,
        deadline: float = DEFAULT_DEADLINE,
    ) -> RelocationResult:
        """Move this host's Spots and Actors to other hosts of the mesh (host/relocation.py):
        ``PLANNED_MAINTENANCE`` to hosts of this host's application version,
        ``ROLLING_UPDATE`` to hosts of exactly ``target_version`` (higher than this host's).
        Bad arguments raise before anything changes; every other ending is the result, and the
        host serves on unless it is ``RELOCATED`` (then ``shutdown()`` ends it)."""
        relocator = self._tree.relocator
        assert relocator is not None  # bound before the host is handed out
        return await relocator.relocate(mode, target_version, deadline)

    async def relocate_and_shutdown(
        self,
        mode: RelocationMode = RelocationMode.PLANNED_MAINTENANCE,
        *,
        target_version: str | None = None,
        deadline: float = DEFAULT_DEADLINE,
    ) -> RelocationResult:
        """``relocate()``, then ``shutdown()`` if everything moved; a blocked relocation is
        returned with the host still serving (SHUT-3.11). The shutdown relays what still
        reaches the host for the units it moved until that has been quiet for a while
        (RELOC-69): a peer that has not read the new owner yet loses no send to it."""
        result = await self.relocate(mode, target_version=target_version, deadline=deadline)
        if result.relocated:
            await self.shutdown()
        return result


def open_host(app: Application, config: HostConfig) -> AbstractAsyncContextManager[Host]:
    """Validate ``app`` and ``config``, start a host, and shut it down when the block exits.

    ``ConfigurationError`` lists every problem before anything touches the store (REG-5.1).
    """
    return open_host_on(app, config, clock=TRIO_CLOCK)


def store_config_of(config: HostConfig) -> StoreConfig:
    """How a host with ``config`` uses its store (specs/store.md STORE-47, STORE-48)."""
    polling = config.store_transaction_pooler and config.store_listen_dsn is None
    return StoreConfig(
        dsn=config.store_dsn,
        data_dir=config.store_data_dir,
        pool_max_size=config.store_pool_size,
        pool_idle_timeout=config.store_idle_timeout,
        transaction_pooler=config.store_transaction_pooler,
        listen_dsn=config.store_listen_dsn,
        # A pooler cannot LISTEN: without a direct DSN the feed polls (STORE-48).
        **({"notifications": False} if polling else {}),
    )


@asynccontextmanager
async def open_host_on(
    app: Application, config: HostConfig, *, clock: Clock, stores: Stores | None = None
) -> AsyncIterator[Host]:
    """``open_host`` with ``clock`` as the host's application clock (VCLK-1): its timers and the
    deadlines of its calls follow ``clock``, everything else Trio's clock. With ``stores``, the
    host uses those open stores (and leaves them open) instead of opening its own, so hosts of
    one Trio run share one pool (KIT-8). Internal: the testing kit's entry
    (``zlink_trio.testing``)."""
    if not isinstance(clock, Clock):
        raise TypeError(f"open_host_on takes a Clock, not {type(clock).__name__}")
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
    curve_secret = _curve_secret(config)
    fence = Fence(config.node_lease)
    store_config = store_config_of(config)
    interruption: Interruption | None = None
    tree: TaskTree | None = None
    unwatch: Callable[[], None] = lambda: None  # noqa: E731  # replaced once the nursery runs
    try:
        async with trio.open_nursery() as nursery:
            # SIGINT is a message from here on, never an exception inside the store (SHUT-8.1).
            interruption = Interruption(nursery)
            unwatch = watch_interrupts(interruption)
            tree = TaskTree(nursery)
            stores = await nursery.start(tree.run_store, store_config, stores)
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
                WorkerScheduler(config.cpu_worker_slots, clock),
                fence,
                clock,
            )
            await nursery.start(tree.run_batches, node.authority.batches)
            spots = SpotCatalog[Activation](node)
            actors = ActorCatalog[ActorActivation](spots)
            messaging = Messaging(spots, actors)
            # The contexts hand out the clients, which sit above the Spots and Actors: bound
            # here, at the composition root, so neither subsystem imports them.
            spots.make_context = partial(SpotContext, messaging)
            actors.make_context = partial(ActorContext, messaging)
            tree.spots, tree.actors = spots, actors
            # The Entry Spot: made by the framework, Ready before the host is handed out, with
            # an id of this run's own (SPOT-2, SPOT-42).
            entry = Activation(
                spots,
                registry.entry_type,
                SpotId(f"entry.{node_generation.value:016x}"),
                None,
            )
            spots.entry = entry
            # The transport first, so the node record carries its endpoints from the first
            # write; published once the host can serve (MESH-18), then peers are followed.
            membership = Membership(
                stores.location,
                config.mesh_name,
                NodeRecord(
                    node_rid,
                    node_generation,
                    # The Spot and Actor types it serves: a relocation's target must serve
                    # every type it moves (host/relocation.py).
                    types=list(dict.fromkeys([*registry.spot_types, *registry.actor_types])),
                    curve_key="" if curve_secret is None else curve_public(curve_secret).decode(),
                    # Peers send this run nothing larger, and reply with nothing larger (MSG-6).
                    max_message_bytes=config.max_message_bytes,
                    application_version=config.application_version,
                ),
                lease=config.node_lease,
                fence=fence,
            )
            remote = Remote(
                node, stores.location, membership, lambda: len(spots.live) + len(actors.live)
            )
            inbound = Inbound(messaging, remote)
            bind = f"tcp://{config.bind_host}:*"
            mesh = await nursery.start(
                tree.run_transport,
                MeshConfig(
                    mesh=config.mesh_name,
                    node_rid=node_rid,
                    generation=node_generation,
                    application_bind=bind,
                    completion_bind=bind,
                    # The payload frame is the message; its header frame (ids, metadata) gets
                    # room of its own (MSG-6).
                    max_frame_bytes=config.max_message_bytes + FRAME_HEADROOM,
                    max_peers=config.max_peers,
                    max_in_flight_per_peer=config.max_in_flight_per_peer,
                    curve_secret_key=curve_secret,
                ),
                inbound,
            )
            remote.mesh = mesh
            membership.update(
                application_endpoint=mesh.application_endpoint,
                completion_endpoint=mesh.completion_endpoint,
            )
            tree.membership = membership
            await nursery.start(tree.run_membership, membership, node)
            node.authority.check_liveness = True
            # After the node record: a record this run claims always has a live owner to show,
            # so no janitor's reclaim or sweep can take a starting run for a dead one.
            await activations.start(entry.run)
            tree.remote = remote
            tree.inbound = inbound
            messaging.remote = remote
            remote.forgotten = messaging.reroutes.forgot  # per-sender order on a new route
            # Routing owns the wire, so it hands a lost cold race's messages to the winner.
            spots.forward = partial(forward, remote, permits_held=False)
            # The host's mover takes an Actor to the host of a Spot it joins (ACT-27).
            actors.join_elsewhere = partial(join_elsewhere, remote, messaging.moved)
            await nursery.start(tree.run_remote, remote, inbound)
            relocator = tree.relocator = Relocator(node, tree.board, spots, actors)
            relocator.membership, relocator.remote, relocator.nursery = membership, remote, nursery
            relocator.moved = messaging.moved
            host = Host(messaging, tree)
            interruption.shutdown = host.shutdown
            tree.board.set(HostStatus.SERVING)
            try:
                yield host
            finally:
                with trio.CancelScope(shield=True):
                    await host.shutdown()
    except BaseException as error:
        if tree is not None and not tree.finished.is_set():
            tree.board.set(HostStatus.ERROR)
        if interruption is not None and interruption.interrupted:
            # What the block raised while the host shut down (calls ending SHUTTING_DOWN) came
            # of the interrupt: it leaves as the cause of the KeyboardInterrupt (SHUT-8.2).
            raise KeyboardInterrupt from error
        if not isinstance(error, BaseExceptionGroup):
            raise
        # The host nursery wraps what passes through it; a lone error leaves as itself, so
        # callers can branch on its type and kind.
        lone = sole_error(error)
        if lone is None:
            raise
        raise lone from None
    finally:
        unwatch()
    if interruption is not None and interruption.interrupted:
        # The orderly shutdown is done; the interrupt leaves as itself, outside any group, so
        # ``except KeyboardInterrupt`` catches it (SHUT-8.2).
        raise KeyboardInterrupt


def _curve_secret(config: HostConfig) -> bytes | None:
    """This run's CURVE secret key (specs/security.md SEC-1): the configured one, the one in the
    key file, or a fresh one; ``None`` with ``transport_security="none"``. A key file that cannot
    be read or holds no key is a ``ConfigurationError`` before anything starts."""
    if config.transport_security == "none":
        return None
    if config.curve_secret_key is not None:
        return config.curve_secret_key.encode()
    if config.curve_key_file is None:
        return new_curve_secret()
    try:
        lines = config.curve_key_file.read_text(encoding="ascii").splitlines()
        return check_curve_secret(lines[0].strip() if lines else "", "the key file").encode()
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise ConfigurationError(
            f"HostConfig: curve_key_file {config.curve_key_file}: {type(error).__name__}: {error}"
        ) from None
