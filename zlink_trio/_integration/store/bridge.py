"""The one place where asyncio meets Trio: the asyncpg pool behind a Trio-facing API
(specs/store.md, STORE-10, STORE-16..STORE-19, STORE-27).

Everything asyncio-flavoured in zlink_trio lives in this module and in aio.py, its asyncio half
(the coroutines that run on the loop); callers are plain Trio code and never see a coroutine of
the other loop. Each public call crosses the bridge once.

Rule 1: every call ends within the operation timeout. On the store's own deadline the asyncio
task is cancelled and ``ZLinkError(UNAVAILABLE)`` is raised; a caller's cancellation propagates
as ``trio.Cancelled``. Either way a write's outcome is unknown: the caller re-reads to learn it.
Rule 2: a connection whose statement was cancelled is terminated, not returned for reuse, so a
cancelled call never waits on a server that does not answer.
Rule 3: a serialization failure or deadlock means PostgreSQL rolled the statement back; it is
retried here until the deadline and never reaches the caller as a conflict.
Rule 4: a lost or refused connection is ``UNAVAILABLE``; the pool opens a fresh connection on the
next call, so the store recovers by itself once the server is back.
Rule 5: a connection taken from the asyncpg pool stays lent to the Trio side between calls (an
idle list), so a call crosses the bridge once, not also for the pool's acquire and release
(measured: those two are ~40 % of a ``SELECT 1`` through trio-asyncio). A Trio semaphore of the
pool's size admits the calls, so the pool always has a connection for one that finds the list
empty. A connection goes back to the pool when a call on it failed (the pool replaces a closed
one, Rule 4), when it is found closed, and when the store closes.
Rule 6: a connection prepares the store's hot statements when the pool opens it, so that the
driver's one-time work per connection (reading the array types' definitions from the server:
~10 ms for the conditional batch, measured) is not paid inside the first call that uses it.
Before the schema exists they are skipped.
Rule 7: a spare is opened ahead. When a call takes the last idle connection (or finds none) and
a permit is free, a background task takes that permit and opens one more connection into the
idle list, so the next call does not open one itself (connecting and preparing: 20-45 ms
measured in bench/relocation.py, where a fresh host's first moves committed). Holding a permit,
the spare never leaves a caller that finds the list empty without a connection in the pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeAlias, cast

import asyncpg
import trio

with warnings.catch_warnings():
    # trio-asyncio 0.16 subclasses asyncio's child watcher, which Python 3.12+ deprecates at
    # class creation; we never start subprocesses through asyncio, so only that warning is
    # silenced, and only while the module is imported.
    warnings.filterwarnings(
        "ignore", message=r".*AbstractChildWatcher.*", category=DeprecationWarning
    )
    import trio_asyncio

from zlink_trio._integration.store import aio
from zlink_trio._integration.store.config import describe_dsn
from zlink_trio._integration.store.statements import Statement
from zlink_trio.errors import ConfigurationError, ErrorKind, ZLinkError

Row: TypeAlias = aio.Row
_log = logging.getLogger("zlink_trio.store")

# --- Trio side -----------------------------------------------------------------------------------


async def _run_on(loop: Any, function: Callable[..., Any], *args: Any) -> Any:
    # Several stores may be open in one Trio run, each with its own loop; asyncio code finds
    # "the running loop" through trio-asyncio's current_loop, so point it at the loop that owns
    # the pool for the length of this call (the variable is local to the calling Trio task).
    token = trio_asyncio.current_loop.set(loop)
    try:
        return await trio_asyncio.aio_as_trio(function, loop=loop)(*args)
    finally:
        trio_asyncio.current_loop.reset(token)


class Session:
    """One pool connection holding one open transaction; one task uses it at a time.

    A failed or timed-out call breaks the session: later calls raise ``UNAVAILABLE`` and
    :meth:`close` only returns the connection.
    """

    def __init__(self, database: Database, connection: Any, transaction: Any) -> None:
        self._database = database
        self._connection = connection
        self._transaction = transaction
        self._open = True

    async def fetch(self, statement: Statement, values: Mapping[str, Any]) -> list[Row]:
        """The rows of one statement run inside this session's transaction."""
        args = statement.arguments(values)
        rows = await self._call(aio.session_fetch, self._connection, statement.sql, args)
        return cast(list[Row], rows)

    async def execute(self, sql: str) -> None:
        """Run SQL text without parameters (schema statements) inside the transaction."""
        await self._call(aio.session_execute, self._connection, sql)

    async def commit(self) -> None:
        """Commit and give the connection back; ``UNAVAILABLE`` when the commit is not known."""
        if not self._open:
            raise ZLinkError(ErrorKind.UNAVAILABLE, "the store session was already broken")
        self._open = False
        await self._database.end(self._connection, self._transaction, commit=True)

    async def close(self) -> None:
        """Roll back and give the connection back; idempotent, never raises a store error."""
        if not self._open:
            return
        self._open = False
        # A failure here terminated the connection on the way out: nothing is left to undo.
        with trio.CancelScope(shield=True), contextlib.suppress(ZLinkError):
            await self._database.end(self._connection, self._transaction, commit=False)

    async def _call(self, function: Callable[..., Any], *args: Any) -> Any:
        if not self._open:
            raise ZLinkError(ErrorKind.UNAVAILABLE, "the store session was already broken")
        try:
            return await self._database.call(function, *args)
        except BaseException:
            await self.close()
            raise


class Listener:
    """A dedicated connection listening on one channel; ``lost`` is set when it drops."""

    def __init__(self, database: Database) -> None:
        self._database = database
        self._connection: Any = None
        self.lost = trio.Event()

    async def close(self) -> None:
        """Stop listening and close the connection; idempotent."""
        connection, self._connection = self._connection, None
        if connection is not None:
            connection.terminate()
        self.lost.set()


class Database:
    """The asyncpg pool seen from Trio: single statements, held sessions and a listener."""

    def __init__(
        self, loop: Any, pool: Any, dsn: str, timeout: float, size: int, spares: trio.Nursery
    ) -> None:
        self._loop = loop
        self._spares = spares
        self._opening = False  # a spare is being opened (Rule 7)
        self.pool = pool
        self.timeout = timeout
        self._dsn = dsn
        self.where = describe_dsn(dsn)
        self._idle: list[Any] = []  # pool connections lent to this side, unused now (Rule 5)
        self._permits = trio.Semaphore(size)  # one per connection the pool can have

    async def fetch(self, statement: Statement, values: Mapping[str, Any]) -> list[Row]:
        """The rows of one statement, run as its own transaction on a pool connection."""
        args = statement.arguments(values)
        deadline = trio.current_time() + self.timeout
        lent = await self._lend(deadline)
        try:
            rows = await self.call(
                aio.lent_fetch, self.pool, lent, statement.sql, args, at=deadline
            )
        except BaseException:
            if lent:
                await self._give_back(lent[0])
            raise
        else:
            self._idle.append(lent[0])
        finally:
            self._permits.release()
        return cast(list[Row], rows)

    async def fetch_one(self, statement: Statement, values: Mapping[str, Any]) -> Row:
        """The single row of a statement that always returns exactly one."""
        rows = await self.fetch(statement, values)
        return rows[0]

    async def begin(self, *, isolation: str, readonly: bool = False) -> Session:
        """A :class:`Session`: one pool connection with an open transaction, until closed."""
        deadline = trio.current_time() + self.timeout
        lent = await self._lend(deadline)
        try:
            transaction = await self.call(
                aio.begin, self.pool, lent, isolation, readonly, at=deadline
            )
        except BaseException:
            if lent:
                await self._give_back(lent[0])
            self._permits.release()
            raise
        return Session(self, lent[0], transaction)

    async def end(self, connection: Any, transaction: Any, *, commit: bool) -> None:
        """Commit or roll back a session's transaction; its connection and permit come back."""
        try:
            await self.call(aio.finish, connection, transaction, commit)
        except BaseException:
            await self._give_back(connection)
            raise
        else:
            self._idle.append(connection)
        finally:
            self._permits.release()

    async def listen(self, channel: str, on_payload: Callable[[str], None]) -> Listener:
        """Start listening on ``channel`` on a new dedicated connection (not from the pool).

        ``on_payload`` runs on the Trio thread for each notification; it must not block.
        """
        listener = Listener(self)
        listener._connection = await self.call(
            aio.listen,
            self._dsn,
            self.timeout,
            channel,
            aio.SESSION_SETTINGS,
            on_payload,
            listener.lost.set,
        )
        return listener

    async def call(self, function: Callable[..., Any], *args: Any, at: float | None = None) -> Any:
        """Run an asyncio coroutine function to completion by ``at`` (Trio's clock), by default
        within the operation timeout."""
        with trio.move_on_at(trio.current_time() + self.timeout if at is None else at):
            try:
                return await _run_on(self._loop, function, *args)
            except Exception as error:
                raise aio.failure(error, self.where) from error
        raise ZLinkError(
            ErrorKind.UNAVAILABLE,
            f"the store at {self.where} did not answer within {self.timeout} s; "
            "a write's outcome is unknown until it is read again",
        )

    async def _lend(self, deadline: float) -> list[Any]:
        """Take a permit by ``deadline``; the connection to use: an idle one, or none (the call
        takes one from the pool, which has one for every permit, Rule 5)."""
        with trio.move_on_at(deadline):
            await self._permits.acquire()
            while self._idle:
                connection = self._idle.pop()
                if aio.usable(connection):
                    if not self._idle:
                        self._open_spare()
                    return [connection]
                # Closed: asyncpg has handed it back to the pool, which opens a fresh one.
            self._open_spare()
            return []
        raise ZLinkError(
            ErrorKind.UNAVAILABLE,
            f"no connection to the store at {self.where} was free within {self.timeout} s",
        )

    def _open_spare(self) -> None:
        """Rule 7: one more idle connection, opened in the background, if a permit is free."""
        if self._opening or self._spares.cancel_scope.cancel_called:  # none while closing
            return
        try:
            self._permits.acquire_nowait()
        except trio.WouldBlock:
            return
        self._opening = True
        self._spares.start_soon(self._spare)

    async def _spare(self) -> None:
        lent: list[Any] = []
        try:
            with trio.move_on_after(self.timeout):
                await _run_on(self._loop, aio.acquire_into, self.pool, lent)
        except (Exception, asyncio.CancelledError) as error:
            # The next call meets the same trouble and reports it; the spare is never the one
            # to fail the store (the driver's own cancellation included).
            _log.debug("opening a spare store connection failed: %r", error)
        finally:
            if lent:  # also when cancelled after it came: the store's close gives it back
                self._idle.append(lent[0])
            self._opening = False
            self._permits.release()

    async def _give_back(self, connection: Any) -> None:
        """Return a lent connection to the pool; never raises (a failure terminated it)."""
        with (
            trio.CancelScope(shield=True),
            trio.move_on_after(self.timeout),
            contextlib.suppress(Exception),
        ):
            await _run_on(self._loop, aio.release, self.pool, connection)

    async def give_back_all(self) -> None:
        """Return every idle lent connection to the pool (before it closes)."""
        idle, self._idle = self._idle, []
        for connection in idle:
            await self._give_back(connection)


@asynccontextmanager
async def open_database(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    operation_timeout: float,
    startup_timeout: float,
    durable_commits: bool = True,
    prepared: Sequence[Statement] = (),
) -> AsyncIterator[Database]:
    """Open the trio-asyncio loop and the asyncpg pool; close both on exit. Each connection the
    pool opens prepares ``prepared`` first (Rule 6).

    ``ConfigurationError`` when the server rejects the DSN (unknown database, user or password,
    bad option); ``ZLinkError(UNAVAILABLE)`` when no server answers within ``startup_timeout``.
    """
    where = describe_dsn(dsn)
    async with trio_asyncio.open_loop() as loop:
        settings = dict(aio.SESSION_SETTINGS)
        if not durable_commits:  # commits do not wait for the disk (STORE-42)
            settings["synchronous_commit"] = "off"
        init = aio.preparing([statement.sql for statement in prepared])
        sizes = (min_size, max_size)
        timeouts = (operation_timeout, startup_timeout)
        pool = await _create_pool(loop, dsn, sizes, timeouts, where, settings, init)
        try:
            async with trio.open_nursery() as spares:
                database = Database(loop, pool, dsn, operation_timeout, max(max_size, 1), spares)
                try:
                    yield database
                finally:
                    spares.cancel_scope.cancel()
        finally:
            await database.give_back_all()
            with trio.CancelScope(shield=True):
                # Closing is best effort: whatever is left is terminated right after.
                with trio.move_on_after(operation_timeout), contextlib.suppress(Exception):
                    await _run_on(loop, pool.close)
                pool.terminate()


async def _create_pool(
    loop: Any,
    dsn: str,
    sizes: tuple[int, int],
    timeouts: tuple[float, float],
    where: str,
    settings: dict[str, str],
    init: Callable[[Any], Awaitable[None]],
) -> Any:
    (min_size, max_size), (operation_timeout, startup_timeout) = sizes, timeouts
    with trio.move_on_after(startup_timeout):
        try:
            return await _run_on(
                loop,
                functools.partial(
                    asyncpg.create_pool,
                    dsn,
                    min_size=max(min_size, 1),
                    max_size=max_size,
                    timeout=operation_timeout,
                    reset=aio.keep_session,
                    init=init,
                    server_settings=settings,
                ),
            )
        except aio.REJECTED_SETTINGS as error:
            raise ConfigurationError(
                f"the store DSN ({where}) was rejected: {type(error).__name__}: {error}"
            ) from error
        except (*aio.UNREACHABLE, asyncpg.exceptions.PostgresError) as error:
            raise ZLinkError(
                ErrorKind.UNAVAILABLE,
                f"cannot reach PostgreSQL at {where}: {type(error).__name__}: {error}",
            ) from error
    raise ZLinkError(
        ErrorKind.UNAVAILABLE, f"PostgreSQL at {where} did not answer within {startup_timeout} s"
    )
