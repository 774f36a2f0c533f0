"""The state one running host shares among its parts (specs/shutdown.md SHUT-2.1, SHUT-4.6).

A ``LocalNode`` is made by ``open_host`` and handed to the route client, the Spot manager, every
activation and every call object of that host; hosts in one process share nothing (SHUT-2.1).
Its ``admitting`` flag is the single admission seal: every public operation checks it first, so
once shutdown has sealed it every new operation ends with ``SHUTTING_DOWN`` (SHUT-4.6).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import trio

from zlink_trio._runtime.application import Registry
from zlink_trio._runtime.authority import SpotAuthority
from zlink_trio._runtime.completion import CompletionDispatcher, shutting_down
from zlink_trio._runtime.config import HostConfig
from zlink_trio._runtime.mailbox import JobPermits
from zlink_trio._runtime.workers import WorkerScheduler
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, NodeGeneration, NodeRid, SpotId

if TYPE_CHECKING:
    from zlink_trio._runtime.activation import Activation
    from zlink_trio._runtime.actor_activation import ActorActivation
    from zlink_trio._runtime.remote import Remote

__all__ = ["LocalNode"]


class LocalNode:
    """One host run: its identity, registry, call table, store authority, activations and
    worker scheduler."""

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
        self.activations: dict[SpotId, Activation] = {}
        """Every local activation that can take messages or is closing, by id."""
        self.creating: dict[SpotId, trio.Event] = {}
        """User Spot creations in progress, by id; later callers wait for the first (SPOT-15)."""
        self.live: set[Activation] = set()
        """Every activation whose task runs, including User Spots still being created."""
        self.jobs = JobPermits(config.app_job_queue_size)
        """The host's shared application job queue (mailbox.py Rule 1)."""
        self.actors: dict[ActorId, ActorActivation] = {}
        """Every local Actor that is Ready or closing, by id."""
        self.creating_actors: dict[ActorId, trio.Event] = {}
        """Actor creations in progress, by id; later callers wait for the first."""
        self.live_actors: set[ActorActivation] = set()
        """Every Actor activation whose lane runs or is being created."""
        self._entry: Activation | None = None
        self.remote: Remote | None = None
        """Global addressing (remote.py); set once the transport and membership run."""
        self.admitting = True

    @property
    def entry(self) -> Activation:
        """This host's Entry Spot, made when the host starts."""
        if self._entry is None:
            raise ZLinkError(ErrorKind.UNAVAILABLE, "the Entry Spot has not started yet")
        return self._entry

    @entry.setter
    def entry(self, activation: Activation) -> None:
        self._entry = activation

    def check_admitting(self) -> None:
        """Raise ``SHUTTING_DOWN`` once shutdown has sealed admission (SHUT-4.6)."""
        if not self.admitting:
            raise shutting_down()

    def check_mesh(self, mesh: MeshName | None) -> None:
        """A call naming another mesh than this host's finds nothing there (CMP-5.10)."""
        if mesh is not None and mesh != self.mesh:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"no mesh named {mesh} is served here")
