"""Worker calls on the public surface: ``host.workers`` and ``self.context.workers``
(specs/completion.md CMP-3.1..CMP-3.10; specs/decisions.md DEC-4; specs/spots.md SPOT-77).

Theory of operation.

Rule 1: one scheduler per host. Every worker call of a host runs on that host's
``WorkerScheduler`` (engines/workers.py), made with ``HostConfig.cpu_worker_slots`` slots when
the host starts and closed when shutdown seals admission, so a call made after that fails with
``SHUTTING_DOWN`` without running its work (CMP-3.27).
Rule 2: a worker call is a single-use call object like a Spot call (single_use.py Rule 1): its only
option is ``timeout(seconds)``, and with none it has no deadline, because waiting for a CPU slot
has no time limit of its own (DEC-4). The deadline is fixed when the terminal starts.
Rule 3: ``yield_()`` runs the same work with the Spot gate given back (single_use.py Rule 4), so
another turn of the Spot may run while the work does (CMP-3.5, SPOT-77).
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar, TypeVarTuple

from zlink_trio._runtime.calls.single_use import SingleUse
from zlink_trio._runtime.declarations.config import check_timeout
from zlink_trio._runtime.node.node import LocalNode

__all__ = ["WorkerCall", "Workers"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")


class WorkerCall(SingleUse, Generic[T]):
    """One CPU or I/O worker call (single-use): ``timeout(seconds)``, then one of ``submit()``,
    ``yield_()`` or ``submit_sync()``; its result is the value the work returned."""

    def __init__(self, node: LocalNode, work: Callable[[float | None], Awaitable[T]]) -> None:
        super().__init__(node)
        self._work = work
        self._timeout: float | None = None

    def timeout(self, seconds: float) -> WorkerCall[T]:
        """End the call with ``DEADLINE_EXCEEDED`` if the work has not returned within
        ``seconds`` (waiting for a CPU slot included); by default there is no deadline."""
        checked = check_timeout(seconds, "timeout")
        self._option("timeout")
        self._timeout = checked
        return self

    async def submit(self) -> T:
        """The work's result; ``ZLinkError`` (``DEADLINE_EXCEEDED``, ``INTERNAL_FAILURE`` when
        the work raised, ``SHUTTING_DOWN``); ``trio.Cancelled`` when the caller is cancelled.
        A calling turn keeps its gate."""
        self._terminal()
        return await self._run()

    async def yield_(self) -> T:
        """As ``submit()``, but the Spot's gate is given back while the work runs (SPOT_WIDE and
        Instance Spot turns only)."""
        return await self._yielding(self._run)

    def submit_sync(self) -> T:
        """``submit()`` for an application thread, blocking it (not allowed in a Trio task)."""
        return self._blocking(self._run)

    async def _run(self) -> T:
        deadline = None if self._timeout is None else self._node.clock.now() + self._timeout
        return await self._work(deadline)


class Workers:
    """Worker offload of a host: ``run_cpu_worker(fn, *args)`` runs a sync function on a
    runtime-owned thread holding one CPU slot, ``run_io_worker(afn, *args)`` awaits an async
    function as a Trio task of the host, holding none."""

    def __init__(self, node: LocalNode) -> None:
        self._node = node

    def run_cpu_worker(self, fn: Callable[[*Ts], T], *args: *Ts) -> WorkerCall[T]:
        """A call that runs ``fn(*args)`` on a worker thread; a coroutine function raises
        ``TypeError`` at once (use ``run_io_worker``)."""
        if not callable(fn) or inspect.iscoroutinefunction(fn):
            raise TypeError(f"run_cpu_worker takes a sync function; use run_io_worker for {fn!r}")
        scheduler = self._node.workers

        async def work(deadline: float | None) -> T:
            return await scheduler.run_cpu(fn, *args, deadline=deadline)

        return WorkerCall(self._node, work)

    def run_io_worker(self, afn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> WorkerCall[T]:
        """A call that awaits ``afn(*args)`` in the calling Trio task, holding no CPU slot."""
        if not callable(afn):
            raise TypeError(f"run_io_worker takes an async function, not {afn!r}")
        scheduler = self._node.workers

        async def work(deadline: float | None) -> T:
            return await scheduler.run_io(afn, *args, deadline=deadline)

        return WorkerCall(self._node, work)
