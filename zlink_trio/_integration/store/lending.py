"""The pool connections lent to the Trio side of the store bridge, and how many a store holds
(specs/store.md STORE-10, STORE-43..STORE-47).

bridge.py crosses to asyncio once per call; this module decides which connection a call runs
on, when one more is opened and when one is closed. It holds asyncpg's connection objects
without looking into them (aio.py does, on the loop); ``run`` crosses to the loop.

Rule 1: a connection taken from the asyncpg pool stays lent to the Trio side between calls (the
idle list), so a call crosses the bridge once, not also for the pool's acquire and release
(measured: those two are ~40 % of a ``SELECT 1`` through trio-asyncio). A Trio semaphore of
the pool's size admits the calls, and every connection this side holds or is opening or closing
holds a permit or sits in the idle list, so the pool always has a connection for a call that
finds the list empty and may take a fresh one (STORE-43). A connection goes back to the pool
when a call on it failed (the pool replaces a closed one), when it is found closed, and when the
store closes.
Rule 2: one connection may also listen (``keep``: the change feed's LISTEN, STORE-45). Every
call prefers it, so a host doing one call at a time uses that one connection for everything
(a session too: PostgreSQL holds notifications back while its transaction is open, which for
a scan is one page, or until it is read to the end or expires). It never goes back to the
pool (the pool's release would drop its listener but leave the server listening): a failure
terminates it, and
losing it in any way (terminated, closed by the server, found closed) calls ``on_lost`` once, so
the feed listens again and says ``Resync``.
Rule 3: a spare is opened ahead only when concurrency appears: a call took the last idle
connection while another call holds one, so the next call does not open one itself
(connecting and preparing: 20-45 ms measured in bench/relocation.py). One call at a time never
opens one (STORE-44).
Rule 4: a connection idle for ``idle_timeout`` is closed, except the listening one, or, with
none listening, the most recently used one: a host that was busy shrinks back to one
connection (STORE-46). Closing holds a permit (Rule 1); at full load nothing is closed.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import trio

from zlink_trio._integration.store import aio
from zlink_trio.errors import ErrorKind, ZLinkError

_log = logging.getLogger("zlink_trio.store")

Run = Callable[..., Awaitable[Any]]
"""Run an asyncio coroutine function on the store's loop and return its result."""


def _nothing() -> None:
    return None


class Lender:
    """The idle list, the permits and the listening connection of one pool (Rules 1-4)."""

    def __init__(
        self,
        run: Run,
        pool: Any,
        *,
        size: int,
        timeout: float,
        idle_timeout: float,
        where: str,
        nursery: trio.Nursery,
    ) -> None:
        self._run = run
        self._pool = pool
        self._timeout = timeout
        self._idle_timeout = idle_timeout
        self._where = where
        self._nursery = nursery
        self._permits = trio.Semaphore(size)  # one per connection the pool can have
        self._idle: list[tuple[Any, float]] = []  # (connection, idle since), oldest first
        self._busy = 0  # calls holding a permit for a connection they use
        self._opening = False  # a spare is being opened (Rule 3)
        self._keeper: Any = None  # the connection that also listens (Rule 2)
        self._keeper_lost: Callable[[], None] = _nothing
        self._idled = trio.Event()  # a connection went idle: the trimmer may have work
        nursery.start_soon(self._trim)

    @property
    def idle_count(self) -> int:
        """How many lent connections no call uses now."""
        return len(self._idle)

    async def lend(self, deadline: float) -> list[Any]:
        """Take a permit by ``deadline``; the connection to use in a one-element list, or an
        empty one: the call takes a fresh connection from the pool, which has room (Rule 1)."""
        with trio.move_on_at(deadline):
            await self._permits.acquire()
            self._busy += 1
            connection = self._take()
            if not self._idle and self._busy > 1:
                self._open_spare()
            return [] if connection is None else [connection]
        raise ZLinkError(
            ErrorKind.UNAVAILABLE,
            f"no connection to the store at {self._where} was free within {self._timeout} s",
        )

    def _take(self) -> Any:
        while self._idle:
            connection, _ = self._idle.pop(self._choose())
            if aio.usable(connection):
                return connection
            # Closed: asyncpg has handed it back to the pool, which opens a fresh one.
            if connection is self._keeper:
                self._lose_keeper()
        return None

    def _choose(self) -> int:
        """The idle entry a call takes: the listening one, else the most recently used (Rule
        2), so that the others age and close (Rule 4)."""
        for index, (connection, _) in enumerate(self._idle):
            if connection is self._keeper:
                return index
        return len(self._idle) - 1

    def returned(self, connection: Any) -> None:
        """A call ended well on ``connection``: it goes idle and the call's permit is free."""
        self._idle.append((connection, trio.current_time()))
        if self._aged():  # else nothing may close: no wake-up of the trimmer per call
            self._idled.set()
        self.unlend()

    def unlend(self) -> None:
        """A call ended without a connection to return (it gave it back, or never had one)."""
        self._busy -= 1
        self._permits.release()

    async def failed(self, lent: list[Any]) -> None:
        """A call on ``lent``'s connection failed: give it back, never raises; the permit is
        the caller's to free (``unlend``)."""
        if not lent:
            return
        connection = lent[0]
        if connection is self._keeper:
            aio.terminate(connection)  # the listener must not go back to the pool (Rule 2)
            self._lose_keeper()
            return
        await self._give_back(connection)

    def keep(self, connection: Any, on_lost: Callable[[], None]) -> None:
        """``connection`` (lent to the caller) listens from now on (Rule 2)."""
        self._keeper = connection
        self._keeper_lost = on_lost

    def drop_keeper(self, connection: Any) -> None:
        """The feed stops listening on ``connection``: terminate it, idle or not."""
        keeper = self._keeper
        if keeper is None or keeper is not connection:
            return
        self._idle = [(c, since) for c, since in self._idle if c is not keeper]
        self._keeper, self._keeper_lost = None, _nothing
        aio.terminate(keeper)

    def _lose_keeper(self) -> None:
        on_lost = self._keeper_lost
        self._keeper, self._keeper_lost = None, _nothing
        on_lost()

    def _open_spare(self) -> None:
        """Rule 3: one more idle connection, opened in the background, if a permit is free."""
        if self._opening or self._nursery.cancel_scope.cancel_called:  # none while closing
            return
        try:
            self._permits.acquire_nowait()
        except trio.WouldBlock:
            return
        self._opening = True
        self._nursery.start_soon(self._spare)

    async def _spare(self) -> None:
        lent: list[Any] = []
        try:
            with trio.move_on_after(self._timeout):
                await self._run(aio.acquire_into, self._pool, lent)
        except (Exception, asyncio.CancelledError) as error:
            # The next call meets the same trouble and reports it; the spare is never the one
            # to fail the store (the driver's own cancellation included).
            _log.debug("opening a spare store connection failed: %r", error)
        finally:
            if lent:  # also when cancelled after it came: the store's close gives it back
                self._idle.append((lent[0], trio.current_time()))
                self._idled.set()
            self._opening = False
            self._permits.release()

    def _aged(self) -> list[tuple[Any, float]]:
        """The idle entries Rule 4 may close, oldest first."""
        kept = self._keeper
        if kept is None and self._idle:
            kept = self._idle[-1][0]  # the most recently used: appended last
        return [(c, since) for c, since in self._idle if c is not kept]

    async def _trim(self) -> None:
        """Rule 4, until the store closes."""
        while True:
            aged = self._aged()
            if not aged:
                self._idled = trio.Event()
                await self._idled.wait()
                continue
            due = aged[0][1] + self._idle_timeout
            if trio.current_time() < due:
                await trio.sleep_until(due)
                continue  # used again meanwhile, perhaps
            try:
                self._permits.acquire_nowait()
            except trio.WouldBlock:  # full load: nothing is idle for long
                self._idled = trio.Event()
                await self._idled.wait()
                continue
            connection = aged[0][0]
            self._idle = [(c, since) for c, since in self._idle if c is not connection]
            try:
                await self._close(connection)
            finally:
                self._permits.release()

    async def _close(self, connection: Any) -> None:
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(self._timeout),
            contextlib.suppress(Exception),
        ):
            await self._run(aio.close, connection)

    async def _give_back(self, connection: Any) -> None:
        """Return a lent connection to the pool; never raises (a failure terminated it)."""
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(self._timeout),
            contextlib.suppress(Exception),
        ):
            await self._run(aio.release, self._pool, connection)

    async def give_back_all(self) -> None:
        """Return every idle lent connection to the pool (before it closes)."""
        self.drop_keeper(self._keeper)
        idle, self._idle = self._idle, []
        for connection, _ in idle:
            await self._give_back(connection)
