"""The hypothesis stateful harness (specs/testing.md KIT-6, KIT-7). Needs hypothesis (the
``test`` extra of zlink_trio); ``zlink_trio.testing`` imports this module only when its names
are asked for.

Theory of operation.

Rule 1: one Trio loop serves every machine. It runs in one helper thread, started on first use
and reused by every example of every machine of the process (a thread and a loop per example
would cost more than a small example); it stops at the end of the pytest session (the kit's
plugin) or at interpreter exit, whichever comes first, and a later use starts a new one.
Rule 2: synchronous rules call async code through ``self.run(afn, *args)``: it runs in the loop
under ``fail_after(step_timeout)`` and returns its result or raises its error. The calling
thread waits for it at most ``step_timeout + GRACE`` seconds, so even a loop that stopped
answering fails the step instead of hanging it.
Rule 3: every example starts clean. The first use of ``self.mesh`` or ``self.host`` (a step
through ``run``, ``wait_quiet``, ``start_soon`` or ``restart_host`` uses them) opens ``hosts``
hosts of a fresh mesh (KIT-2) on the run's store and holds them open in a task of the loop;
``teardown`` shuts them down and waits until that task has ended. Hypothesis runs many examples
that never reach a step (it counts them as invalid, not among ``max_examples``), and those cost
no host. The store is ``dsn`` when set, else ``ZLINK_STORE_DSN``, else
the run's shared embedded server (KIT-1), which the loop keeps joined until it stops; the loop
also keeps one pool per store for the hosts of every example (KIT-8), so a host starts without
opening a pool of its own.
Rule 4: a failure shows what the hosts did. Each host reports its admissions, turns and call
outcomes (``LocalNode.set_trace``) into one deque of the last ``recent_events`` lines, with a
line for each ``self.run``; ``teardown`` hands them to ``hypothesis.note``, which prints them
under the failing (shrunk) example and nowhere else.
Rule 5: scheduling is part of the example. The initialize rule ``seed_scheduling`` draws a seed
and seeds Trio's scheduling random with it (``scheduling.py``), so different examples explore
different task orders and a shrunk example replays its own; hypothesis restores the random after
each example. Each later ``self.run`` seeds it again, from that seed and the step's number, as
the step starts in the loop: the hosts' background tasks, woken by I/O between two steps, draw
from the same random, and without the fresh seed those draws would shift every later step's order.
Rule 6: an example owns what it starts. Its hosts and its background tasks (``self.start_soon``)
live in the nursery of the example's holding task, each host in a task of its own, so
``self.restart_host(i)`` can shut one host down (its context exits, so the barrier no longer
counts it) and open a new run in its place while the others serve on. ``teardown`` cancels the
background tasks still running, then shuts the hosts down, the last first; the first error a
background task raised fails the example there.
"""

from __future__ import annotations

import collections
import contextlib
import os
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, ClassVar

import trio
from hypothesis import note
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument
from hypothesis.stateful import RuleBasedStateMachine, initialize

from zlink_trio._integration.store import DSN_VARIABLE
from zlink_trio._runtime.application.application import Application
from zlink_trio.testing.hosts import (
    MEET_TIMEOUT,
    TestHost,
    TestMesh,
    _meet,
    open_test_host,
)
from zlink_trio.testing.loop import GRACE, HarnessLoop, harness_loop, stop_harness_loop
from zlink_trio.testing.scheduling import trio_random

__all__ = ["GRACE", "HarnessLoop", "HostStateMachine", "harness_loop", "stop_harness_loop"]

SHUTDOWN_TIMEOUT = 60.0
"""Seconds a teardown may take to shut the example's hosts down."""


class HostStateMachine(RuleBasedStateMachine):
    """A hypothesis ``RuleBasedStateMachine`` whose every example runs on fresh zlink_trio
    hosts (specs/testing.md KIT-6, KIT-7).

    Set ``app`` (and optionally ``hosts``, ``host_config``, ``step_timeout``, ``dsn``,
    ``recent_events``) on the subclass. Rules use ``self.host`` (the first ``TestHost``),
    ``self.mesh`` (all of them), ``self.run(afn, *args)``, ``self.wait_quiet()``,
    ``self.start_soon(afn, *args)`` and ``self.restart_host(index)`` (KIT-11). A subclass that
    overrides ``teardown`` calls ``super().teardown()``."""

    app: ClassVar[Application]
    """The application every host of the example runs."""
    hosts: ClassVar[int] = 1
    """How many hosts of one mesh each example opens."""
    host_config: ClassVar[Mapping[str, Any]] = {}
    """``HostConfig`` fields for every host (``open_test_host`` keywords)."""
    step_timeout: ClassVar[float] = 20.0
    """Seconds one ``self.run`` may take before it fails with ``trio.TooSlowError``."""
    dsn: ClassVar[str | None] = None
    """The store; ``None``: ``ZLINK_STORE_DSN``, else the run's shared embedded server."""
    recent_events: ClassVar[int] = 50
    """How many of the last events a failing example reports."""

    def __init__(self) -> None:
        super().__init__()
        self.events: collections.deque[str] = collections.deque(maxlen=self.recent_events)
        """The hosts' recent events, oldest first (Rule 4)."""
        self._loop = harness_loop()
        self._exit: trio.Event | None = None
        self._ended: trio.Event | None = None
        self._failure: BaseException | None = None
        self._tasks: trio.Nursery | None = None
        self._hosts: trio.Nursery | None = None
        self._held: list[tuple[trio.Event, trio.Event]] = []
        """Per host slot: the event that lets its host close, and the one set once it has."""
        self._config: tuple[str, dict[str, Any]] = ("", {})
        self._scheduling: int | None = None
        self._steps = 0
        self._mesh: TestMesh | None = None

    @property
    def mesh(self) -> TestMesh:
        """Every host of the example, opened on first use (Rule 3)."""
        if self._mesh is None:
            seed = None if self._scheduling is None else f"{self._scheduling}/open"
            self._mesh = self._loop.call(
                self._open, self._store(), timeout=SHUTDOWN_TIMEOUT, seed=seed
            )
        return self._mesh

    @property
    def host(self) -> TestHost:
        """The example's first host (``self.mesh[0]``), opened on first use (Rule 3)."""
        return self.mesh[0]

    def _store(self) -> str:
        return self.dsn or os.environ.get(DSN_VARIABLE) or self._loop.store_dsn()

    async def _open(self, dsn: str) -> TestMesh:
        config = dict(self.host_config)
        config.setdefault("stores", await self._loop.pool(dsn))
        config.setdefault("mesh", f"test-{uuid.uuid4().hex[:12]}")
        self._config = (dsn, config)
        exit_, ended = trio.Event(), trio.Event()

        async def hold(task_status: trio.TaskStatus[TestMesh]) -> None:
            started = False
            try:
                async with trio.open_nursery() as hosts:
                    self._hosts = hosts
                    try:
                        opened = [await self._start_host(index) for index in range(self.hosts)]
                        with trio.fail_after(MEET_TIMEOUT):
                            for host in opened:
                                await _meet(host, [other for other in opened if other is not host])
                        async with trio.open_nursery() as tasks:
                            self._tasks = tasks
                            task_status.started(TestMesh(opened))
                            started = True
                            await exit_.wait()
                            tasks.cancel_scope.cancel()
                    finally:
                        for host_exit, host_ended in reversed(self._held):
                            host_exit.set()
                            await host_ended.wait()
            except Exception as error:
                if not started:
                    raise  # nursery.start raises it to __init__
                self._failure = self._failure or error  # teardown raises it
            finally:
                ended.set()

        mesh: TestMesh = await self._loop.nursery.start(hold)
        self._exit, self._ended = exit_, ended
        return mesh

    async def _start_host(self, index: int) -> TestHost:
        """Open a host for slot ``index`` in a task of its own (Rule 6)."""
        assert self._hosts is not None
        dsn, config = self._config
        exit_, ended = trio.Event(), trio.Event()
        prefix = f"host {index}: " if self.hosts > 1 else ""

        async def hold_host(task_status: trio.TaskStatus[TestHost]) -> None:
            try:
                async with open_test_host(self.app, dsn=dsn, **config) as host:
                    host.host._node.set_trace(self._tracer(prefix))
                    try:
                        task_status.started(host)
                        await exit_.wait()
                    finally:
                        host.host._node.set_trace(None)
            finally:
                ended.set()

        host: TestHost = await self._hosts.start(hold_host)
        if index < len(self._held):
            self._held[index] = (exit_, ended)
        else:
            self._held.append((exit_, ended))
        return host

    def _tracer(self, prefix: str) -> Callable[[str], None]:
        append = self.events.append
        if not prefix:
            return append
        return lambda line: append(prefix + line)

    def run(self, afn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        """``await afn(*args)`` in the harness's Trio loop, within ``step_timeout``: its result,
        or its exception raised here."""
        return self._step(f"run {getattr(afn, '__qualname__', afn)}", afn, *args)

    def _step(self, line: str, afn: Callable[..., Awaitable[Any]], *args: Any) -> Any:
        _ = self.mesh  # opened before the step's number is counted (Rule 3)
        self.events.append(line)
        self._steps += 1
        seed = None if self._scheduling is None else f"{self._scheduling}/{self._steps}"
        return self._loop.call(afn, *args, timeout=self.step_timeout, seed=seed)

    def start_soon(self, afn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``await afn(*args)`` as a background task of the example in the harness's
        loop and return at once: it may outlive the step, ``teardown`` cancels it if it still
        runs, and its error fails the example at ``teardown`` (Rule 6)."""
        self._step(f"start {getattr(afn, '__qualname__', afn)}", self._start_task, afn, args)

    async def _start_task(self, afn: Callable[..., Awaitable[Any]], args: tuple[Any, ...]) -> None:
        assert self._tasks is not None

        async def task() -> None:
            try:
                await afn(*args)
            except Exception as error:
                self._failure = self._failure or error

        self._tasks.start_soon(task)

    def restart_host(self, index: int = 0) -> TestHost:
        """Shut ``self.mesh[index]`` down and open a new run in its place, in the same mesh
        with the same ``host_config``; returns once it and every other host list each other as
        peers. ``self.mesh[index]`` (and ``self.host`` for index 0) is then the new host."""
        if not 0 <= index < len(self.mesh):
            raise IndexError(f"no host {index} in a mesh of {len(self.mesh)}")
        host: TestHost = self._step(f"restart host {index}", self._restart, index)
        return host

    async def _restart(self, index: int) -> TestHost:
        exit_, ended = self._held[index]
        exit_.set()
        await ended.wait()
        host = await self._start_host(index)
        others = [other for i, other in enumerate(self.mesh.hosts) if i != index]
        with trio.fail_after(MEET_TIMEOUT):
            await _meet(host, others)
            for other in others:
                await _meet(other, [host])
        self.mesh.hosts[index] = host
        return host

    def wait_quiet(self) -> None:
        """Wait until every host of the example is quiet (``TestMesh.wait_quiet``, KIT-5)."""
        self.run(self.mesh.wait_quiet)

    @initialize(seed=st.integers(0, 2**32 - 1))
    def seed_scheduling(self, seed: int) -> None:
        """Seed Trio's scheduling order from the example (Rule 5)."""
        self.events.append(f"scheduling seed {seed}")
        self._scheduling = seed
        trio_random().seed(seed)

    def teardown(self) -> None:
        """Cancel the example's background tasks, shut its hosts down and wait for both (Rule
        6); report the recent events (Rule 4); raise a background task's error."""
        recent = list(self.events)
        try:
            if self._exit is not None:
                self._loop.call(self._close, timeout=SHUTDOWN_TIMEOUT)
        finally:
            with contextlib.suppress(InvalidArgument):  # teardown called outside a test
                note(_Events(recent))
            super().teardown()
        if self._failure is not None:
            raise self._failure

    async def _close(self) -> None:
        assert self._exit is not None
        assert self._ended is not None
        self._exit.set()
        await self._ended.wait()
        dsn, config = self._config
        await self._loop.finished(dsn, config["mesh"])


class _Events:
    """The recent events, formatted only when hypothesis prints them (``note`` calls repr)."""

    def __init__(self, lines: list[str]) -> None:
        self.lines = lines

    def __repr__(self) -> str:
        body = "\n".join(f"  {line}" for line in self.lines) or "  (none)"
        return f"recent events of the hosts (oldest first):\n{body}"
