"""The one place where asyncio meets Trio: the asyncpg pool behind a Trio-facing API
(specs/store.md, STORE-10, STORE-16..STORE-19, STORE-27).

Everything asyncio-flavoured in zlink_trio lives in this module, in lending.py (which pool
connection a call uses) and in aio.py, its asyncio half (the coroutines that run on the loop);
callers are plain Trio code and never see a coroutine of
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
Rule 5: which connection a call runs on, when one more is opened and when an idle one is
closed is lending.py's (Rules 1-4 there, STORE-43..STORE-46): pool connections stay lent to
this side between calls, so a call crosses the bridge once.
Rule 6: a connection runs the store's hot statements once when the pool opens it, with
arguments that change nothing (``location_sql.WARM_UP``), so that none of the driver's and the
server's one-time work per connection and statement is paid inside a call: the driver reads the
array types' definitions (~10 ms for the conditional batch, measured), parses the statement
into its statement cache, and the server builds the statement's generic plan
(``plan_cache_mode``, aio.py), which it keeps with that named statement. Each was 1-3 ms of a
relocation's commit that was the first write on its connection (bench/relocation.py, whose
hosts are new every round). The driver keeps them for the connection's life (no
``max_cached_statement_lifetime``), so a long-lived host does not parse and plan them again
every five minutes. Before the schema exists they are skipped. Behind a transaction pooler
(``pooled``) nothing is warmed and the driver's statement cache is off: a named statement lives
on one server connection, and the pooler hands the next transaction another (STORE-48).
Rule 7: the change feed listens on a pool connection that also runs statements (lending.py
Rule 2), so an idle host holds one connection (STORE-45); with ``listen_dsn`` (a direct server
behind a pooler) it listens on a dedicated connection there instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
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
from zlink_trio._integration.store.lending import Lender
from zlink_trio._integration.store.statements import Statement
from zlink_trio.errors import ConfigurationError, ErrorKind, ZLinkError

Row: TypeAlias = aio.Row

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
    """Listening on one channel until closed; ``lost`` is set when the connection drops."""

    def __init__(self, lost: trio.Event, stop: Callable[[], None]) -> None:
        self.lost = lost
        self._stop = stop

    async def close(self) -> None:
        """Stop listening (its connection is terminated); idempotent."""
        stop, self._stop = self._stop, _nothing
        stop()
        self.lost.set()


def _nothing() -> None:
    return None


class Database:
    """The asyncpg pool seen from Trio: single statements, held sessions and a listener."""

    def __init__(
        self,
        run: Callable[..., Awaitable[Any]],
        pool: Any,
        lender: Lender,
        *,
        timeout: float,
        where: str,
        listen_dsn: str | None = None,
    ) -> None:
        self._run = run
        self._lender = lender
        self.pool = pool
        self.timeout = timeout
        self.where = where
        self._listen_dsn = listen_dsn

    @property
    def idle_count(self) -> int:
        """How many pool connections are lent to this side and unused now (lending.py)."""
        return self._lender.idle_count

    async def fetch(self, statement: Statement, values: Mapping[str, Any]) -> list[Row]:
        """The rows of one statement, run as its own transaction on a pool connection."""
        args = statement.arguments(values)
        deadline = trio.current_time() + self.timeout
        lent = await self._lender.lend(deadline)
        try:
            rows = await self.call(
                aio.lent_fetch, self.pool, lent, statement.sql, args, at=deadline
            )
        except BaseException:
            await self._lender.failed(lent)
            self._lender.unlend()
            raise
        self._lender.returned(lent[0])
        return cast(list[Row], rows)

    async def fetch_one(self, statement: Statement, values: Mapping[str, Any]) -> Row:
        """The single row of a statement that always returns exactly one."""
        rows = await self.fetch(statement, values)
        return rows[0]

    async def begin(self, *, isolation: str, readonly: bool = False) -> Session:
        """A :class:`Session`: one pool connection with an open transaction, until closed."""
        deadline = trio.current_time() + self.timeout
        lent = await self._lender.lend(deadline)
        try:
            transaction = await self.call(
                aio.begin, self.pool, lent, isolation, readonly, at=deadline
            )
        except BaseException:
            await self._lender.failed(lent)
            self._lender.unlend()
            raise
        return Session(self, lent[0], transaction)

    async def end(self, connection: Any, transaction: Any, *, commit: bool) -> None:
        """Commit or roll back a session's transaction; its connection and permit come back."""
        try:
            await self.call(aio.finish, connection, transaction, commit)
        except BaseException:
            await self._lender.failed([connection])
            self._lender.unlend()
            raise
        self._lender.returned(connection)

    async def listen(self, channel: str, on_payload: Callable[[str], None]) -> Listener:
        """Start listening on ``channel``: on a pool connection that also runs statements
        (Rule 7), or on a dedicated one to ``listen_dsn``.

        ``on_payload`` runs on the Trio thread for each notification; it must not block.
        """
        lost = trio.Event()
        if self._listen_dsn is not None:
            connection = await self.call(
                aio.listen,
                self._listen_dsn,
                self.timeout,
                channel,
                aio.SESSION_SETTINGS,
                on_payload,
                lost.set,
            )
            return Listener(lost, functools.partial(aio.terminate, connection))
        deadline = trio.current_time() + self.timeout
        lent = await self._lender.lend(deadline)
        try:
            await self.call(
                aio.listen_on, self.pool, lent, channel, on_payload, lost.set, at=deadline
            )
        except BaseException:
            await self._lender.failed(lent)
            self._lender.unlend()
            raise
        self._lender.keep(lent[0], lost.set)
        self._lender.returned(lent[0])
        return Listener(lost, functools.partial(self._lender.drop_keeper, lent[0]))

    async def call(self, function: Callable[..., Any], *args: Any, at: float | None = None) -> Any:
        """Run an asyncio coroutine function to completion by ``at`` (Trio's clock), by default
        within the operation timeout."""
        with trio.move_on_at(trio.current_time() + self.timeout if at is None else at):
            try:
                return await self._run(function, *args)
            except Exception as error:
                raise aio.failure(error, self.where) from error
            except asyncio.CancelledError as error:
                # Not the caller's cancellation (that one arrives as trio.Cancelled): the
                # asyncio side ended the call, e.g. the store closing under it (STORE-49).
                raise ZLinkError(
                    ErrorKind.UNAVAILABLE,
                    f"the call to the store at {self.where} was cancelled on the driver's "
                    "side (the store is closing); a write's outcome is unknown until it is "
                    "read again",
                ) from error
        raise ZLinkError(
            ErrorKind.UNAVAILABLE,
            f"the store at {self.where} did not answer within {self.timeout} s; "
            "a write's outcome is unknown until it is read again",
        )


@asynccontextmanager
async def open_database(
    dsn: str,
    *,
    min_size: int,
    max_size: int,
    operation_timeout: float,
    startup_timeout: float,
    idle_timeout: float = 30.0,
    durable_commits: bool = True,
    warm_up: Sequence[tuple[Statement, Mapping[str, Any]]] = (),
    pooled: bool = False,
    listen_dsn: str | None = None,
) -> AsyncIterator[Database]:
    """Open the trio-asyncio loop and the asyncpg pool; close both on exit. Each connection the
    pool opens runs each of ``warm_up`` first (Rule 6), unless ``pooled`` (a transaction pooler
    such as PgBouncer is in front of the server: STORE-48). A connection idle for
    ``idle_timeout`` is closed, all but one (lending.py Rule 4).

    ``ConfigurationError`` when the server rejects the DSN (unknown database, user or password,
    bad option) or, ``pooled``, does not run every transaction SERIALIZABLE by itself;
    ``ZLinkError(UNAVAILABLE)`` when no server answers within ``startup_timeout``.
    """
    where = describe_dsn(dsn)
    async with trio_asyncio.open_loop() as loop:
        aio.quiet_abandoned(loop)
        run = functools.partial(_run_on, loop)
        options: dict[str, Any] = {
            "min_size": max(min_size, 1),
            "max_size": max_size,
            "timeout": operation_timeout,
            "max_inactive_connection_lifetime": idle_timeout,
            "reset": aio.keep_session,
        }
        if pooled:
            # A pooler passes on only a few startup settings; the rest must be the role's or
            # the database's own (checked below, STORE-48).
            options["server_settings"] = {"application_name": aio.APPLICATION_NAME}
            options["statement_cache_size"] = 0
        else:
            options["server_settings"] = dict(aio.SESSION_SETTINGS)
            if not durable_commits:  # commits do not wait for the disk (STORE-42)
                options["server_settings"]["synchronous_commit"] = "off"
            options["init"] = aio.warming([(s.sql, s.arguments(v)) for s, v in warm_up])
            options["max_cached_statement_lifetime"] = 0  # kept while the connection lives
        pool = await _create_pool(run, dsn, options, startup_timeout, where)
        lender: Lender | None = None
        try:
            async with trio.open_nursery() as nursery:
                lender = Lender(
                    run,
                    pool,
                    size=max(max_size, 1),
                    timeout=operation_timeout,
                    idle_timeout=idle_timeout,
                    where=where,
                    nursery=nursery,
                )
                database = Database(
                    run, pool, lender, timeout=operation_timeout, where=where, listen_dsn=listen_dsn
                )
                try:
                    if pooled:
                        await _check_pooled(database)
                    yield database
                finally:
                    nursery.cancel_scope.cancel()
        finally:
            if lender is not None:
                await lender.give_back_all()
            with trio.CancelScope(shield=True):
                # Closing is best effort: whatever is left is terminated right after.
                with trio.move_on_after(operation_timeout), contextlib.suppress(Exception):
                    await run(pool.close)
                pool.terminate()


_ISOLATION = Statement("SELECT current_setting('default_transaction_isolation')", ())


async def _check_pooled(database: Database) -> None:
    """Behind a pooler the session settings are not sent: a batch is SERIALIZABLE (STORE-4)
    only if the server makes it so for every session of the role."""
    isolation = (await database.fetch_one(_ISOLATION, {}))[0]
    if isolation != "serializable":
        raise ConfigurationError(
            f"the store at {database.where} is reached through a transaction pooler, so the "
            "store cannot set its session settings: the server must run every transaction "
            f"SERIALIZABLE by itself (default_transaction_isolation is {isolation!r}); run "
            "ALTER DATABASE <database> SET default_transaction_isolation = 'serializable' "
            "(or ALTER ROLE) on the server"
        )


async def _create_pool(
    run: Callable[..., Awaitable[Any]],
    dsn: str,
    options: dict[str, Any],
    startup_timeout: float,
    where: str,
) -> Any:
    with trio.move_on_after(startup_timeout):
        try:
            return await run(functools.partial(asyncpg.create_pool, dsn, **options))
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
