"""Transport test helpers: in-process meshes with short liveness settings, and child nodes.

Child nodes (``node.py``) run in their own OS process, started with ``sys.executable``; every
child a test starts is killed when the test ends, whatever happened.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
import trio

from zlink_trio._integration.transport import (
    MeshConfig,
    PeerAddress,
    PeerRun,
    RouteMesh,
    open_route_mesh,
)
from zlink_trio._wire import OperationId, Reply, Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, SpotId, StableTypeName

NODE = Path(__file__).resolve().parent / "node.py"
HEARTBEAT = 0.1
WINDOW = 1.0
MESH = MeshName("test-mesh")
BIG = 64 * 1024
"""A payload size that fills the queues and socket buffers towards a peer in few sends."""


def config(rid: str, **overrides: object) -> MeshConfig:
    """A mesh config for tests: short heartbeat and liveness window, loopback endpoints."""
    values: dict[str, object] = {
        "mesh": MESH,
        "node_rid": NodeRid(rid),
        "generation": NodeGeneration.new(),
        "heartbeat_interval": HEARTBEAT,
        "liveness_window": WINDOW,
    }
    values.update(overrides)
    return MeshConfig(**values)  # type: ignore[arg-type]  # keyword values checked by MeshConfig


class Inbox:
    """Collects what a mesh delivers; a test may hold the reader with ``hold``."""

    def __init__(self) -> None:
        self.messages: list[tuple[PeerRun, Send | Request]] = []
        self.hold: trio.Event | None = None
        self.changed = trio.Condition()

    async def __call__(self, origin: PeerRun, message: Send | Request) -> None:
        self.messages.append((origin, message))
        async with self.changed:
            self.changed.notify_all()
        if self.hold is not None:
            await self.hold.wait()

    async def wait_for(self, count: int) -> None:
        """Wait until ``count`` messages arrived."""
        async with self.changed:
            while len(self.messages) < count:
                await self.changed.wait()


@asynccontextmanager
async def node(
    rid: str,
    handler: Callable[[PeerRun, Send | Request], Awaitable[None]] | None = None,
    **overrides: object,
) -> AsyncIterator[tuple[RouteMesh, Inbox]]:
    """An in-process mesh and the inbox that receives its messages (unless ``handler``)."""
    inbox = Inbox()
    async with open_route_mesh(config(rid, **overrides), handler or inbox) as mesh:
        yield mesh, inbox


async def until_up(mesh: RouteMesh, rid: str) -> PeerRun:
    """Wait for the route to ``rid`` to be up, on the mesh's route-change events."""
    peer = NodeRid(rid)
    while (run := mesh.is_up(peer)) is None:
        await mesh.route_changes.receive()
    return run


async def connect(a: RouteMesh, b: RouteMesh) -> None:
    """Make ``a`` and ``b`` peers of each other and wait until both routes are up."""
    a.add_peer(b.address)
    b.add_peer(a.address)
    with trio.fail_after(10):
        await until_up(a, b.config.node_rid.value)
        await until_up(b, a.config.node_rid.value)


class Child:
    """A node process: write commands, read its lines."""

    def __init__(self, process: trio.Process) -> None:
        self.process = process
        self._buffer = b""
        self._lines: list[str] = []
        self.address: PeerAddress | None = None

    async def tell(self, *words: object) -> None:
        assert self.process.stdin is not None
        await self.process.stdin.send_all((" ".join(map(str, words)) + "\n").encode())

    async def line(self, prefix: str) -> list[str]:
        """The next line that starts with ``prefix`` (earlier other lines are kept), as words."""
        assert self.process.stdout is not None
        while True:
            for index, text in enumerate(self._lines):
                if text.startswith(prefix):
                    del self._lines[index]
                    return text.split()
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some()
                if not chunk:
                    raise AssertionError(f"the child ended before printing {prefix!r}")
                self._buffer += chunk
            text, self._buffer = self._buffer.split(b"\n", 1)
            self._lines.append(text.decode())

    async def connect(self, mesh: RouteMesh) -> None:
        """Make this child and ``mesh`` peers of each other; wait until both routes are up."""
        assert self.address is not None
        mesh.add_peer(self.address)
        own = mesh.address
        await self.tell("peer", own.node_rid, own.application_endpoint, own.completion_endpoint)
        with trio.fail_after(15):
            await until_up(mesh, self.address.node_rid.value)
            await self.line(f"UP {own.node_rid}")


Spawn = Callable[..., Awaitable[Child]]


@pytest.fixture
async def spawn() -> AsyncIterator[Spawn]:
    """Start child nodes (``await spawn("b", "--send-hwm", "5")``); all are killed at the end."""
    children: list[trio.Process] = []

    async def start(rid: str, *options: str) -> Child:
        process = await trio.lowlevel.open_process(
            [sys.executable, str(NODE), "--rid", rid, *options],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
        )
        children.append(process)
        child = Child(process)
        with trio.fail_after(30):
            _, application, completion, _generation = await child.line("READY")
        child.address = PeerAddress(NodeRid(rid), application, completion)
        return child

    try:
        yield start
    finally:
        for process in children:
            process.kill()
        with trio.CancelScope(shield=True), trio.move_on_after(10):
            for process in children:
                await process.wait()
            for process in children:
                for stream in (process.stdin, process.stdout):
                    if stream is not None:
                        await stream.aclose()


async def until(predicate: Callable[[], bool]) -> None:
    """Wait for a condition the mesh has no event for (a drop counter), re-checking every 10 ms.

    Always used inside ``trio.fail_after``.
    """
    while not predicate():  # noqa: ASYNC110  # a counter, not an event: nothing to wait on
        await trio.sleep(0.01)


def numbered(number: int, size: int = 64) -> Send:
    """A one-way message whose payload starts with ``number`` (8 bytes), ``size`` bytes long."""
    return Send(SpotId("s"), StableTypeName("n"), number.to_bytes(8, "big").ljust(size, b"p"))


def echo(mesh_of: Callable[[], RouteMesh]) -> Callable[[PeerRun, Send | Request], Awaitable[None]]:
    """A handler that answers every Request with its own payload (type ``echo``)."""

    async def handle(origin: PeerRun, message: Send | Request) -> None:
        if type(message) is Request:
            mesh_of().reply(
                origin,
                Reply(
                    message.reply_route,
                    message.operation_id,
                    origin.generation,
                    StableTypeName("echo"),
                    message.payload,
                ),
            )

    return handle


async def ask(
    mesh: RouteMesh,
    peer: str,
    payload: bytes = b"q",
    timeout: float = 5.0,  # noqa: ASYNC109  # the request's own budget, passed on
    kind: str = "echo",
) -> Reply:
    """One request of type ``kind`` to ``peer``."""
    return await mesh.request(
        NodeRid(peer),
        operation_id=OperationId.new(),
        target=SpotId("s"),
        message_type=StableTypeName(kind),
        payload=payload,
        timeout=timeout,
    )


BLOCK = Send(SpotId("s"), StableTypeName("block"), b"")
"""Makes a child node's application reader wait until it is told ``resume``."""


async def outcome(work: Awaitable[object], into: list[ErrorKind | None]) -> None:
    """Run ``work`` and note how it ended: None when it returned, else its ErrorKind."""
    try:
        await work
    except ZLinkError as error:
        into.append(error.kind)
    else:
        into.append(None)


async def fill(mesh: RouteMesh, peer: NodeRid, admitted: list[int] | None = None) -> None:
    """Send numbered messages of ``BIG`` bytes to ``peer`` until 1,000 were admitted."""
    for number in range(1_000):  # far more than the queues and socket buffers hold
        await mesh.send(peer, numbered(number, BIG))
        if admitted is not None:
            admitted.append(number)


async def until_stuck(mesh: RouteMesh, peer: NodeRid, admitted: list[int]) -> None:
    """Wait until ``fill`` waits for room and no more sends get through.

    libzmq's I/O thread moves frames into the kernel outside Trio's view, so one moment in
    which every task is blocked is not enough: a wait can end once the thread drains a buffer.
    Stuck means waiting, with the admitted count unchanged over five 20 ms checks in a row.
    """
    steady = 0
    last = -1
    while steady < 5:
        await trio.sleep(0.02)
        stuck = mesh.waiting_sends(peer) == 1 and len(admitted) == last
        steady = steady + 1 if stuck else 0
        last = len(admitted)
