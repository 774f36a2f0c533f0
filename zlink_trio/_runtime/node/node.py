"""The state one running host shares among its parts (specs/shutdown.md SHUT-2.1, SHUT-4.6).

A ``LocalNode`` is made by ``open_host`` and handed to every subsystem of that host; hosts in one
process share nothing (SHUT-2.1). It holds what every part needs and nothing that names a Spot
or an Actor: the host's identity, configuration and registry, its completion dispatcher, store
authority, job permits, worker scheduler and the activations nursery. The live Spots and Actors
are kept by their own subsystems (``spots/catalog.py``, ``actors/catalog.py``), which sit above
this module. Its ``admitting`` flag is the single admission seal: every public operation checks
it first, so once shutdown has sealed it every new operation ends with ``SHUTTING_DOWN``
(SHUT-4.6). The same check consults the run's ``fence`` (ownership/fence.py): a run whose lease
is overdue admits nothing and refuses with ``UNAVAILABLE`` (MESH-21). Its ``clock`` is the
host's application clock (engines/clock.py): every part reads application time from it, and
Trio's clock only for the infrastructure (VCLK-1, VCLK-2).

A test can watch the host work (specs/testing.md KIT-6): ``set_trace(fn)`` makes ``trace`` a
callable that the runtime tells, in one line each, of every message admitted (a Spot's or
Actor's mailbox here, the transport's queue for a remote target), every turn's start and end
(messages and timer ticks) and every delivered call outcome. Unset (``None``, the default) it
costs each of those places one attribute read and formats nothing.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import trio

from zlink_trio._runtime.declarations.config import HostConfig
from zlink_trio._runtime.declarations.registry import Registry
from zlink_trio._runtime.engines.clock import Clock
from zlink_trio._runtime.engines.completion import CompletionDispatcher, shutting_down
from zlink_trio._runtime.engines.mailbox import IdleServers, JobPermits
from zlink_trio._runtime.engines.workers import WorkerScheduler
from zlink_trio._runtime.ownership.authority import Held, SpotAuthority
from zlink_trio._runtime.ownership.fence import Fence
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, NodeGeneration, NodeRid, SpotId

__all__ = ["LocalNode"]


class LocalNode:
    """One host run: its identity, registry, call table, store authority, job permits, worker
    scheduler and the nursery its activations run in."""

    def __init__(
        self,
        config: HostConfig,
        registry: Registry,
        node_rid: NodeRid,
        node_generation: NodeGeneration,
        dispatcher: CompletionDispatcher,
        authority: SpotAuthority,
        activation_nursery: trio.Nursery,
        token: trio.lowlevel.TrioToken,
        workers: WorkerScheduler,
        fence: Fence,
        clock: Clock,
    ) -> None:
        self.config = config
        self.registry = registry
        self.mesh: MeshName = config.mesh_name
        self.node_rid = node_rid
        self.node_generation = node_generation
        self.dispatcher = dispatcher
        self.authority = authority
        self.activation_nursery = activation_nursery
        self.token = token
        self.workers = workers
        """The host's one worker scheduler; closed when shutdown seals admission."""
        self.jobs = JobPermits(config.app_job_queue_size)
        """The host's shared application job queue (mailbox.py Rule 1)."""
        self.idle_servers = IdleServers(self.spawn)
        """Retires the gate tasks of Spots idle for a whole period (mailbox.py Rule 5)."""
        self.admitting = True
        self.placing: str | None = None
        """Why this host takes no new Spots or Actors (it is relocating), or ``None``."""
        self.fence = fence
        """Whether this run's lease lets it serve (ownership/fence.py)."""
        self.clock = clock
        """Application time: timers and the deadlines of calls follow it (VCLK-2)."""
        self.trace: Callable[[str], None] | None = None
        """Told what the host does, one line per event, when set (``set_trace``)."""

    def set_trace(self, trace: Callable[[str], None] | None) -> None:
        """Report admissions, turns and call outcomes to ``trace`` (``None``: stop)."""
        self.trace = trace
        self.dispatcher.trace = trace

    def spawn(self, function: Callable[..., Awaitable[object]], *args: object) -> bool:
        """Start ``function(*args)`` in the activations nursery; ``False`` once that nursery has
        ended (a part of the host crashed and the host is ending): the caller leaves the work to
        the shutdown (spots/activation.py Rule 10)."""
        try:
            self.activation_nursery.start_soon(function, *args)
        except RuntimeError:  # "Nursery is closed to new arrivals"
            return False
        return True

    def check_admitting(self) -> None:
        """Raise ``SHUTTING_DOWN`` once shutdown has sealed admission (SHUT-4.6), and
        ``UNAVAILABLE`` while the run's lease is overdue (MESH-21)."""
        if not self.admitting:
            raise shutting_down()
        self.fence.check()

    def check_placing(self) -> None:
        """``check_admitting``, and ``UNAVAILABLE`` while this host takes no new Spots or
        Actors (a relocation, RELOC-44): the caller places them on another host."""
        self.check_admitting()
        if self.placing is not None:
            raise ZLinkError(
                ErrorKind.UNAVAILABLE,
                f"host {self.node_rid} takes no new Spots or Actors: {self.placing}",
            )

    async def held_elsewhere(self, target: SpotId | ActorId) -> Held:
        """While this host takes no new Spots or Actors (RELOC-44): ``target`` as the live host
        that holds it has it, found as anywhere; else ``check_placing``'s error."""
        record = await self.authority.read_live(target)
        if record is None:
            self.check_placing()
        assert record is not None  # check_placing raised otherwise
        return Held(record)

    def not_admitted(self, target: str) -> ZLinkError:
        """The error of a message whose wait for room in ``target``'s queue ended without
        admission: ``SHUTTING_DOWN`` once this host stops admitting, else ``UNAVAILABLE`` (the
        target closed), never ``NOT_FOUND`` (CMP-7.9)."""
        if not self.admitting:
            return shutting_down()
        return ZLinkError(ErrorKind.UNAVAILABLE, f"{target} closed before admitting the message")

    def check_mesh(self, mesh: MeshName | None) -> None:
        """A call naming another mesh than this host's finds nothing there (CMP-5.10)."""
        if mesh is not None and mesh != self.mesh:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"no mesh named {mesh} is served here")
