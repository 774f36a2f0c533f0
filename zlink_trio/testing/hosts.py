"""Hosts and meshes for tests, and the quiet barrier (specs/testing.md KIT-2, KIT-4, KIT-5).

``open_test_host`` is ``open_host`` with a mesh of its own unless one is given; every
``HostConfig`` field can be passed as a keyword. ``open_test_mesh`` opens several hosts of one
mesh in this process and returns once each lists every other as a peer.

Rule 1: the barrier is exact. ``wait_quiet`` returns only when, at one instant, every Trio task
is blocked, every host of the mesh opened by this kit in this process is locally quiet
(``_runtime/host/quiet.py``: no turn, no queued message, no call waiting for its outcome, ...)
and every message one of those hosts sent another has been received there (the transport's
``traffic`` ledger). Messages travel through libzmq's own I/O thread, which Trio does not see,
so while the ledger shows one on its way the barrier looks again after ``POLL`` seconds: the
condition decides, the pause only spaces the looks.
Rule 2: the barrier never hangs. Past its ``timeout`` it raises ``TimeoutError`` naming what was
still busy.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import trio
import trio.testing

from zlink_trio._integration.store import StoreConfig, Stores, open_stores
from zlink_trio._integration.transport.traffic import Traffic
from zlink_trio._runtime.application.application import Application
from zlink_trio._runtime.declarations.config import HostConfig
from zlink_trio._runtime.engines.clock import TRIO_CLOCK, Clock
from zlink_trio._runtime.host.host import Host, open_host_on
from zlink_trio._runtime.host.quiet import busy_parts
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid
from zlink_trio.testing.cleanup import CLEAR_EVERY, CLEAR_LIMIT, clear_meshes
from zlink_trio.testing.clock import VirtualClock

__all__ = [
    "POLL",
    "TestHost",
    "TestMesh",
    "open_test_host",
    "open_test_mesh",
    "open_test_stores",
]

POLL = 0.001
"""Seconds between two looks of the barrier while something is still busy (Rule 1)."""
QUIET_TIMEOUT = 10.0
MEET_TIMEOUT = 30.0

_NO_TRAFFIC = Traffic()
"""The ledger of a host without a transport: nothing sent, nothing received."""
_open: dict[str, list[TestHost]] = {}
_pending: dict[int, list[str]] = {}
"""Per open pool of ``open_test_stores`` (by id), the finished meshes not cleared yet."""
"""The kit's live hosts in this process, by mesh name: whose traffic the barrier balances."""


class TestHost:
    """A started host with the kit's barrier; the host itself is ``.host``."""

    __test__ = False  # not a pytest test class

    def __init__(self, host: Host) -> None:
        self.host = host
        self._baseline: dict[tuple[NodeRid, NodeRid], int] = {}
        """Messages a host sent this one's node RID before this run joined (Rule 1)."""

    # What tests use most, without ``.host``.
    @property
    def route(self) -> Any:
        return self.host.route

    @property
    def spots(self) -> Any:
        return self.host.spots

    @property
    def actors(self) -> Any:
        return self.host.actors

    @property
    def workers(self) -> Any:
        return self.host.workers

    @property
    def mesh(self) -> MeshName:
        return self.host.mesh

    @property
    def node_rid(self) -> NodeRid:
        return self.host.node_rid

    @property
    def node_generation(self) -> NodeGeneration:
        return self.host.node_generation

    @property
    def peers(self) -> Mapping[NodeRid, NodeGeneration]:
        return self.host.peers

    async def shutdown(self) -> None:
        await self.host.shutdown()

    def busy(self) -> list[str]:
        """Why this host and the kit's other hosts of its mesh are not quiet now (empty when
        they are): local work, then messages on their way between them."""
        hosts = _open.get(self.mesh.value, [self])
        reasons = [f"{h.node_rid}: {part}" for h in hosts for part in busy_parts(h.host)]
        for sender in hosts:
            for receiver in hosts:
                if sender is receiver:
                    continue
                sent = _traffic(sender).sent[receiver.node_rid]
                sent -= receiver._baseline.get((sender.node_rid, receiver.node_rid), 0)
                received = _traffic(receiver).received[sender.node_rid]
                if sent != received:
                    reasons.append(
                        f"{sent - received} message(s) from {sender.node_rid} on their way to "
                        f"{receiver.node_rid}"
                    )
        return reasons

    async def wait_quiet(self, timeout: float = QUIET_TIMEOUT) -> None:  # noqa: ASYNC109
        """Return once this host and the kit's other hosts of its mesh are quiet (Rule 1);
        ``TimeoutError`` naming what is still busy after ``timeout`` seconds (Rule 2)."""
        deadline = trio.current_time() + timeout
        while True:
            await trio.testing.wait_all_tasks_blocked()
            reasons = self.busy()
            if not reasons:
                return
            if trio.current_time() >= deadline:
                raise TimeoutError(f"not quiet after {timeout} s: " + "; ".join(reasons))
            await trio.sleep(POLL)


def _traffic(host: TestHost) -> Traffic:
    remote = host.host._tree.remote
    mesh = None if remote is None else remote.mesh
    return _NO_TRAFFIC if mesh is None else mesh.traffic


@asynccontextmanager
async def open_test_host(
    app: Application,
    *,
    dsn: str | None = None,
    clock: Clock | None = None,
    stores: Stores | None = None,
    **config: Any,
) -> AsyncIterator[TestHost]:
    """``open_host(app, HostConfig(...))`` for a test: ``dsn`` is the store (``shared_store()``
    or ``ZLINK_STORE_DSN``), ``mesh`` defaults to a fresh ``test-<random>`` (KIT-2), and every
    other keyword is a ``HostConfig`` field. ``clock``: a ``VirtualClock`` for the host's
    application time (VCLK-1); its ``settle`` becomes this host's ``wait_quiet`` unless set.
    ``stores``: a pool opened by ``open_test_stores`` for hosts of one Trio run to share
    (KIT-8)."""
    named = "mesh" not in config
    config.setdefault("mesh", f"test-{uuid.uuid4().hex[:12]}")
    host_config = HostConfig(store_dsn=dsn, **config)
    async with (
        _cleared(stores if named else None, config["mesh"]),
        open_host_on(
            app, host_config, clock=TRIO_CLOCK if clock is None else clock, stores=stores
        ) as host,
    ):
        tested = TestHost(host)
        if isinstance(clock, VirtualClock) and clock.settle is None:
            clock.settle = tested.wait_quiet
        others = _open.setdefault(host.mesh.value, [])
        for other in others:
            sent = _traffic(other).sent[host.node_rid]
            tested._baseline[(other.node_rid, host.node_rid)] = sent
        others.append(tested)
        try:
            yield tested
        finally:
            others.remove(tested)
            if not others:
                del _open[host.mesh.value]


class TestMesh:
    """Hosts of one mesh in this process; ``mesh[i]`` is a ``TestHost``."""

    __test__ = False

    def __init__(self, hosts: Sequence[TestHost]) -> None:
        self.hosts = list(hosts)

    def __getitem__(self, index: int) -> TestHost:
        return self.hosts[index]

    def __len__(self) -> int:
        return len(self.hosts)

    async def wait_quiet(self, timeout: float = QUIET_TIMEOUT) -> None:  # noqa: ASYNC109
        """Every host of the mesh quiet and nothing on its way between them (KIT-5)."""
        await self.hosts[0].wait_quiet(timeout)


@asynccontextmanager
async def open_test_stores(dsn: str | None = None) -> AsyncIterator[Stores]:
    """One pool on the run's store for every test host of this Trio run (KIT-8): a host given
    it starts without opening a pool, checking the schema and starting a listener of its own."""
    # Test records are worth nothing after a crash: commits do not wait for the disk (STORE-42).
    async with open_stores(StoreConfig(dsn=dsn, durable_commits=False)) as stores:
        _pending[id(stores)] = []
        try:
            yield stores
        finally:
            with trio.CancelScope(shield=True), trio.move_on_after(CLEAR_LIMIT):
                await clear_meshes(stores.location, _pending.pop(id(stores)))


@asynccontextmanager
async def open_test_mesh(
    app: Application, *, hosts: int = 2, dsn: str | None = None, **config: Any
) -> AsyncIterator[TestMesh]:
    """``hosts`` hosts of one fresh mesh (or ``mesh=``), each a ``TestHost``; returns once each
    lists every other's current run as a peer (KIT-4). Other keywords as ``open_test_host``
    (one ``clock`` is shared by all: its ``settle`` waits for the whole mesh)."""
    if isinstance(hosts, bool) or not isinstance(hosts, int) or hosts < 1:
        raise ValueError(f"hosts must be a positive int, got {hosts!r}")
    named = "mesh" not in config
    config.setdefault("mesh", f"test-{uuid.uuid4().hex[:12]}")
    async with (
        _cleared(config.get("stores") if named else None, config["mesh"]),
        AsyncExitStack() as stack,
    ):
        opened = [
            await stack.enter_async_context(open_test_host(app, dsn=dsn, **config))
            for _ in range(hosts)
        ]
        with trio.fail_after(MEET_TIMEOUT):
            for host in opened:
                await _meet(host, [other for other in opened if other is not host])
        yield TestMesh(opened)


@asynccontextmanager
async def _cleared(stores: Stores | None, mesh: str | MeshName) -> AsyncIterator[None]:
    """After the block, the records of the kit-named ``mesh`` go from ``stores`` (KIT-12)."""
    try:
        yield
    finally:
        name = mesh.value if isinstance(mesh, MeshName) else mesh
        if stores is not None and name not in _open:
            with trio.CancelScope(shield=True):
                await finish_mesh(stores, name)


async def finish_mesh(stores: Stores, mesh: str) -> None:
    """``mesh`` is finished: on a pool of ``open_test_stores`` its records go with the next
    ``CLEAR_EVERY`` finished meshes or when the pool closes, on any other at once (KIT-12)."""
    pending = _pending.get(id(stores))
    if pending is None:
        meshes = [mesh]
    else:
        pending.append(mesh)
        if len(pending) < CLEAR_EVERY:
            return
        meshes = pending[:]
        pending.clear()
    with trio.move_on_after(CLEAR_LIMIT):
        await clear_meshes(stores.location, meshes)


async def _meet(host: TestHost, others: list[TestHost]) -> None:
    membership = host.host._tree.membership
    if membership is None or not others:
        return
    wanted = {other.node_rid: other.node_generation for other in others}
    events = membership.subscribe()  # replays every peer already known
    async with events:
        while any(host.peers.get(rid) != generation for rid, generation in wanted.items()):
            await events.receive()
