"""The harness's Trio loop: one helper thread that runs every example's async work
(specs/testing.md KIT-6; ``stateful.py`` Rules 1 and 2).

Rule 1: one Trio loop serves every machine. It runs in one helper thread, started on first use
and reused by every example of every machine of the process; it stops at the end of the pytest
session (the kit's plugin) or at interpreter exit, whichever comes first, and a later use starts
a new one. It keeps the run's shared store joined and one pool per store for every example's
hosts (KIT-8).
Rule 2: ``call`` runs ``afn`` in the loop under ``fail_after(timeout)``; the calling thread
waits for it at most ``timeout + GRACE`` seconds, so a loop that stopped answering fails the
call instead of hanging it.
"""

from __future__ import annotations

import atexit
import concurrent.futures
import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from zlink_trio._integration.store import Stores
from zlink_trio.testing.hosts import finish_mesh, open_test_stores
from zlink_trio.testing.scheduling import trio_random
from zlink_trio.testing.store import START_LIMIT, STOP_LIMIT, open_shared_store

__all__ = ["GRACE", "LOOP_START", "HarnessLoop", "harness_loop", "stop_harness_loop"]

GRACE = 10.0
"""Seconds the calling thread waits beyond a call's own timeout before it gives up (Rule 2)."""
LOOP_START = 20.0


class HarnessLoop:
    """One Trio loop in a helper thread, with a nursery for the tasks it holds (Rule 1)."""

    def __init__(self) -> None:
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._stop: trio.Event | None = None
        self._ready = threading.Event()
        self._dsn: str | None = None
        self._dsn_lock = threading.Lock()
        self._pools: dict[str, Stores] = {}
        self._pools_lock: trio.Lock | None = None
        self.error: BaseException | None = None
        """What ended the loop, if anything but ``stop()`` did."""
        self._thread = threading.Thread(target=self._main, name="zlink-harness", daemon=True)

    def _main(self) -> None:
        async def serve() -> None:
            self._token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        try:
            trio.run(serve)
        except BaseException as error:  # kept for whoever calls next
            self.error = error
        finally:
            self._token = None
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        if not self._ready.wait(LOOP_START) or self._token is None:
            raise RuntimeError(f"the harness's Trio loop did not start: {self.error!r}")

    @property
    def alive(self) -> bool:
        return self._token is not None and self._thread.is_alive()

    @property
    def nursery(self) -> trio.Nursery:
        """The loop's nursery: tasks that outlive one call (a test's hosts)."""
        assert self._nursery is not None
        return self._nursery

    def call(
        self,
        afn: Callable[..., Awaitable[Any]],
        *args: Any,
        timeout: float,
        seed: str | None = None,
    ) -> Any:
        """``await afn(*args)`` in the loop under ``fail_after(timeout)``; its result or error
        here. Waits at most ``timeout + GRACE`` seconds (Rule 2). ``seed``: Trio's scheduling
        random is seeded with it as the call starts in the loop (Rule 5)."""
        token = self._token
        if token is None:
            raise RuntimeError(f"the harness's Trio loop has stopped: {self.error!r}")
        done: concurrent.futures.Future[Any] = concurrent.futures.Future()

        async def step() -> None:
            if seed is not None:
                trio_random().seed(seed)
            try:
                with trio.fail_after(timeout):
                    result = await afn(*args)
            except BaseException as error:
                done.set_exception(error)
                if isinstance(error, trio.Cancelled):
                    raise  # the loop is stopping
            else:
                done.set_result(result)

        token.run_sync_soon(self.nursery.start_soon, step)
        try:
            return done.result(timeout + GRACE)
        except concurrent.futures.TimeoutError:
            raise TimeoutError(
                f"the harness's Trio loop did not answer within {timeout + GRACE} s"
            ) from None

    def store_dsn(self) -> str:
        """The run's shared store, joined once by this loop and left when it stops (Rule 3)."""
        with self._dsn_lock:
            if self._dsn is None:
                self._dsn = self.call(self._join_store, timeout=START_LIMIT)
            return self._dsn

    async def _join_store(self) -> str:
        async def hold(task_status: trio.TaskStatus[str]) -> None:
            async with open_shared_store() as dsn:
                task_status.started(dsn)
                await trio.sleep_forever()

        dsn: str = await self.nursery.start(hold)
        return dsn

    async def pool(self, dsn: str) -> Stores:
        """The loop's pool on ``dsn`` for every example's hosts (KIT-8), opened on first use
        and held until the loop stops. Called in the loop."""
        if self._pools_lock is None:
            self._pools_lock = trio.Lock()
        async with self._pools_lock:
            if dsn not in self._pools:

                async def hold(task_status: trio.TaskStatus[Stores]) -> None:
                    try:
                        async with open_test_stores(dsn) as stores:
                            task_status.started(stores)
                            await trio.sleep_forever()
                    finally:
                        self._pools.pop(dsn, None)

                self._pools[dsn] = await self.nursery.start(hold)
            return self._pools[dsn]

    async def finished(self, dsn: str, mesh: str) -> None:
        """``mesh`` on ``dsn`` is done: its records are cleared with the next finished meshes
        of the loop's pool, or when the loop stops (KIT-12). Called in the loop."""
        await finish_mesh(await self.pool(dsn), mesh)

    def stop(self) -> None:
        """End the loop: cancel what it holds (a joined store leaves it), bounded."""
        token, stop = self._token, self._stop
        if token is not None and stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(stop.set)
        self._thread.join(STOP_LIMIT + GRACE)


_loop: HarnessLoop | None = None
_loop_lock = threading.Lock()
_registered = False


def harness_loop() -> HarnessLoop:
    """The process's harness loop, started on first use or after it stopped (Rule 1)."""
    global _loop, _registered
    with _loop_lock:
        if _loop is None or not _loop.alive:
            loop = HarnessLoop()
            loop.start()
            _loop = loop
            if not _registered:
                atexit.register(stop_harness_loop)
                _registered = True
        return _loop


def stop_harness_loop() -> None:
    """Stop the harness loop if one runs (the end of a pytest session, interpreter exit)."""
    global _loop
    with _loop_lock:
        loop, _loop = _loop, None
    if loop is not None:
        loop.stop()
