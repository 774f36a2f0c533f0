"""End-to-end harness: several hosts of one mesh over one store, driven by commands.

A cluster is one host in the test process (``local``, cheap to start and simple to call) and
child hosts, each its own OS process running ``node_child.py`` (so one can be killed with -9).
Every host runs ``e2e_app.app``. A test talks to any host the same way::

    async with cluster(store_dsn, children=("b", "c")) as hosts:
        answer = await hosts["a"].ask("request", id="room", timeout=3.0)

``ask`` sends one command (``e2e_app.COMMANDS``) and returns the host's answer: a dict with
``ok`` and either the result fields or ``error`` (an ``ErrorKind`` name), plus ``elapsed``, the
seconds the call took on that host's clock. The cluster is ready when every host lists all the
others as peers. Leaving the block normally shuts every child down and requires exit status 0;
leaving it by an exception kills every child. Every child is gone when the block ends.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import trio

import zlink_trio as zl
from tests.e2e import e2e_app

CHILD = Path(__file__).resolve().parent / "node_child.py"
START_TIMEOUT = 45.0
"""Bound for a cluster to start: Python start-up and host start on a loaded 2-core machine."""
ASK_TIMEOUT = 30.0
"""Bound for one command with no tighter bound of its own, so no test can hang on a host."""
STOP_TIMEOUT = 20.0
POLL = 0.05

Answer = dict[str, Any]
T = TypeVar("T")


async def eventually(predicate: Callable[[], Awaitable[T]], timeout: float) -> T:  # noqa: ASYNC109
    """Ask ``predicate`` every 50 ms until it returns something truthy, and return that; used for
    remote conditions that raise no local event. ``trio.TooSlowError`` after ``timeout``."""
    with trio.fail_after(timeout):
        while not (value := await predicate()):  # noqa: ASYNC110  # a remote condition
            await trio.sleep(POLL)
        return value


class Child:
    """One host in its own process."""

    def __init__(self, rid: str, process: trio.Process) -> None:
        self.rid = rid
        self.process = process
        self.alive = True
        self._buffer = b""
        self._lock = trio.Lock()

    async def _line(self) -> Answer:
        assert self.process.stdout is not None
        while True:
            while b"\n" not in self._buffer:
                chunk = await self.process.stdout.receive_some()
                if not chunk:
                    raise AssertionError(f"host {self.rid} ended (exit {self.process.poll()})")
                self._buffer += chunk
            line, self._buffer = self._buffer.split(b"\n", 1)
            if line.startswith(b"{"):  # anything else a library prints is not an answer
                answer: Answer = json.loads(line)
                return answer

    async def ready(self) -> Answer:
        answer = await self._line()
        assert answer.get("ready") is True, answer
        assert self.rid == answer["node_rid"]
        return answer

    async def ask(self, op: str, **fields: Any) -> Answer:
        """Run one command on this host and return its answer."""
        assert self.alive, f"host {self.rid} was killed"
        assert self.process.stdin is not None
        async with self._lock:
            with trio.fail_after(ASK_TIMEOUT):
                line = json.dumps({"op": op, **fields}) + "\n"
                await self.process.stdin.send_all(line.encode())
                return await self._line()

    async def kill(self) -> None:
        """kill -9, and wait until the process is gone."""
        self.alive = False
        self.process.kill()
        with trio.fail_after(STOP_TIMEOUT):
            await self.process.wait()

    async def stop(self) -> int:
        """Shut the host down with the ``shutdown`` command; its exit status."""
        answer = await self.ask("shutdown")
        assert answer == {"ok": True}, answer
        self.alive = False
        with trio.fail_after(STOP_TIMEOUT):
            return await self.process.wait()


class Local:
    """The host the test process runs itself."""

    def __init__(self, host: zl.Host) -> None:
        self.host = host
        self.rid = host.node_rid.value
        self.alive = True

    async def ask(self, op: str, **fields: Any) -> Answer:
        """Run one command on this host and return its answer."""
        with trio.fail_after(ASK_TIMEOUT):
            return await e2e_app.execute(self.host, {"op": op, **fields})


Node = Child | Local


async def until_ready(process: trio.Process) -> None:
    """Return once a child host's process has printed ``{"ready": true}`` on its stdout (the
    single-purpose children: overload, security); fails if it ends first or takes longer than
    ``START_TIMEOUT``."""
    assert process.stdout is not None
    with trio.fail_after(START_TIMEOUT):
        seen = b""
        while b'"ready"' not in seen:
            chunk = await process.stdout.receive_some()
            assert chunk, "the child host ended before it was ready"
            seen += chunk


def new_mesh() -> str:
    """A mesh name no other test uses, so tests sharing a store never meet."""
    return f"e2e-{uuid.uuid4().hex[:10]}"


async def _spawn(rid: str, mesh: str, dsn: str, peers: int, lease: float) -> Child:
    arguments = ["--mesh", mesh, "--dsn", dsn, "--rid", rid, "--peers", str(peers)]
    arguments += ["--lease", str(lease), "--ready-timeout", str(START_TIMEOUT)]
    process = await trio.lowlevel.open_process(
        [sys.executable, str(CHILD), *arguments],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    return Child(rid, process)


async def _local_ready(local: Local, peers: int) -> None:
    async def enough() -> bool:
        return len(local.host.peers) >= peers

    await eventually(enough, START_TIMEOUT)


@asynccontextmanager
async def cluster(
    dsn: str,
    children: Sequence[str] = ("b", "c"),
    local: str = "a",
    lease: float = 10.0,
    mesh: str | None = None,
) -> AsyncIterator[dict[str, Node]]:
    """A running mesh: the in-process host ``local`` and one child process per name in
    ``children``, all of mesh ``mesh`` (a new one by default) over the store ``dsn``, each with
    node lease ``lease``; yields the hosts by node RID once every host sees all the others."""
    mesh = mesh or new_mesh()
    peers = len(children)  # every host sees all the others: len(children) + 1 - 1
    spawned: list[Child] = []
    try:
        for rid in children:
            spawned.append(await _spawn(rid, mesh, dsn, peers, lease))
        config = zl.HostConfig(mesh=mesh, store_dsn=dsn, node_rid=local, node_lease=lease)
        async with zl.open_host(e2e_app.app, config) as host:
            e2e_app.started(host)
            hosts: dict[str, Node] = {local: Local(host)}
            with trio.fail_after(START_TIMEOUT):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(_local_ready, hosts[local], peers)
                    for child in spawned:
                        nursery.start_soon(child.ready)
            hosts.update((child.rid, child) for child in spawned)
            yield hosts
            statuses: dict[str, int] = {}

            async def stop(child: Child) -> None:
                statuses[child.rid] = await child.stop()

            async with trio.open_nursery() as nursery:
                for child in spawned:
                    if child.alive:
                        nursery.start_soon(stop, child)
            assert all(0 == status for status in statuses.values()), statuses
    finally:
        with trio.CancelScope(shield=True):
            for child in spawned:
                if child.process.returncode is None:
                    child.process.kill()
            with trio.move_on_after(STOP_TIMEOUT):
                for child in spawned:
                    await child.process.wait()
            for child in spawned:
                for stream in (child.process.stdin, child.process.stdout):
                    if stream is not None:
                        await stream.aclose()


def kind(answer: Answer) -> str | None:
    """The error kind an answer carries, or None when the call succeeded."""
    return None if answer["ok"] else str(answer["error"])
