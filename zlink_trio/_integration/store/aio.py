"""The asyncio half of the store bridge (bridge.py): the coroutines that run on its loop, each
called from Trio through ``bridge.Database``, never directly, and the driver's session settings
and errors as the bridge reads them. In the package only bridge.py and lending.py, the
bridge's Trio half, import this.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, TypeAlias, cast

import asyncpg

from zlink_trio.errors import ErrorKind, ZLinkError

Row: TypeAlias = Any
"""An ``asyncpg.Record``: index it by position or by column name."""

RETRYABLE = (asyncpg.exceptions.SerializationError, asyncpg.exceptions.DeadlockDetectedError)
"""PostgreSQL rolled the statement back: run it again (bridge.py Rule 3)."""


def usable(connection: Any) -> bool:
    """Whether a lent pool connection is still open. One that closed (the server went away, or
    a cancelled call terminated it) was already handed back to its pool by asyncpg, which then
    refuses every call on it, ``is_closed`` included."""
    try:
        return not connection.is_closed()
    except asyncpg.exceptions.InterfaceError:
        return False


def terminate(connection: Any) -> None:
    """Close a lent connection at once; one that closed already (asyncpg handed it back to the
    pool and refuses every call on it) is left alone."""
    try:
        connection.terminate()
    except asyncpg.exceptions.InterfaceError:
        return


_log = logging.getLogger("zlink_trio.store")


def quiet_abandoned(loop: asyncio.AbstractEventLoop) -> None:
    """Make the bridge's loop log at DEBUG, not print, the lost connection's error of a future
    nobody awaits any more (a connect or a statement that a cancelled call abandoned: asyncpg's
    protocol still settles it when the socket closes, and asyncio reports the unread error
    when the future is collected, on stderr, often after the command that cancelled it said
    why it ended). Every other report of the loop goes to asyncio's own handler."""

    def handle(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
        error = context.get("exception")
        if isinstance(error, ConnectionError) and "never retrieved" in context.get("message", ""):
            _log.debug("a connection error of an abandoned call: %r", error)
            return
        loop.default_exception_handler(context)

    loop.set_exception_handler(handle)


UNREACHABLE = (
    OSError,
    asyncio.TimeoutError,
    asyncpg.exceptions.PostgresConnectionError,
    asyncpg.exceptions.InterfaceError,
    asyncpg.exceptions.OperatorInterventionError,
    asyncpg.exceptions.InsufficientResourcesError,
    asyncpg.exceptions.InternalClientError,
)
REJECTED_SETTINGS = (
    ValueError,
    asyncpg.exceptions.ClientConfigurationError,
    asyncpg.exceptions.InvalidCatalogNameError,
    asyncpg.exceptions.InvalidAuthorizationSpecificationError,
)
APPLICATION_NAME = "zlink_trio"
"""How the store's connections name themselves to the server (``pg_stat_activity``)."""
SESSION_SETTINGS = {
    # One statement per call, each its own transaction: SERIALIZABLE makes concurrent
    # conditional batches behave as if they ran one after another (STORE-4).
    "default_transaction_isolation": "serializable",
    # The statements are tiny; JIT compilation would only add latency.
    "jit": "off",
    # Every statement is a key lookup or a key range, so the generic plan is the right one; it
    # spares re-planning the batch statement on each call (measured: about a fifth of a CAS).
    "plan_cache_mode": "force_generic_plan",
    "application_name": APPLICATION_NAME,
}


class _FloorRetriesInOneLine(logging.Filter):
    """asyncpg logs every failed attempt to reconnect its pool's floor with a full traceback:
    while the store is down, one traceback a second per pool. The line stays (at WARNING), the
    cause joins it, the traceback goes (STORE-39)."""

    def filter(self, record: logging.LogRecord) -> bool:
        template = record.msg  # asyncpg's format string, not an error's text
        if record.exc_info and isinstance(template, str) and template.startswith(_FLOOR):
            error = record.exc_info[1]
            record.msg = f"{record.getMessage()}: {type(error).__name__}: {error}"
            record.args = None
            record.exc_info = None
            record.exc_text = None
        return True


_FLOOR = "Failed to restore the pool connection floor"
_FLOOR_FILTER = _FloorRetriesInOneLine()
logging.getLogger("asyncpg.pool").addFilter(_FLOOR_FILTER)


def failure(error: Exception, where: str) -> ZLinkError:
    if isinstance(error, UNREACHABLE):
        return ZLinkError(
            ErrorKind.UNAVAILABLE,
            f"the store at {where} cannot be used now ({type(error).__name__}: {error}); "
            "a write's outcome is unknown until it is read again",
        )
    return ZLinkError(
        ErrorKind.INTERNAL_FAILURE, f"the store at {where} failed: {type(error).__name__}: {error}"
    )


def warming(calls: Sequence[tuple[str, tuple[Any, ...]]]) -> Callable[[Any], Awaitable[None]]:
    """The pool's ``init`` for a new connection: run each statement of ``calls`` once with its
    arguments, which change nothing (bridge.py Rule 6); before the schema exists, or should one
    lose a serialization race, the rest is skipped: warming is only ahead of time."""

    async def init(connection: Any) -> None:
        for sql, args in calls:
            try:
                await connection.fetch(sql, *args)
            except (asyncpg.exceptions.SyntaxOrAccessError, *RETRYABLE):
                return  # no such table or sequence yet, or a race: the first call does it

    return init


async def acquire_into(pool: Any, lent: list[Any]) -> None:
    """A connection from the pool into ``lent`` (seen by the Trio side even if cancelled)."""
    lent.append(await pool.acquire())


async def keep_session(_connection: Any) -> None:
    # Pool connections never change session state, so the default reset query (a round trip on
    # every release) has nothing to undo.
    return None


async def lent_fetch(pool: Any, lent: list[Any], sql: str, args: tuple[Any, ...]) -> list[Row]:
    # ``lent`` holds the connection, or gets one from the pool at once: the Trio side sees it
    # even when this task is cancelled right after (lending.py Rule 1).
    if not lent:
        await acquire_into(pool, lent)
    connection = lent[0]
    attempt = 0
    while True:
        try:
            return cast(list[Row], await connection.fetch(sql, *args))
        except RETRYABLE:
            attempt += 1
        except asyncio.CancelledError:
            connection.terminate()
            raise
        # Jittered backoff so racing batches do not collide again in lockstep.
        await asyncio.sleep(random.uniform(0, min(0.05, 0.0005 * 2**attempt)))


async def begin(pool: Any, lent: list[Any], isolation: str, readonly: bool) -> Any:
    if not lent:
        await acquire_into(pool, lent)
    try:
        transaction = lent[0].transaction(isolation=isolation, readonly=readonly)
        await transaction.start()
    except BaseException:
        lent[0].terminate()
        raise
    return transaction


async def session_fetch(connection: Any, sql: str, args: tuple[Any, ...]) -> list[Row]:
    try:
        return cast(list[Row], await connection.fetch(sql, *args))
    except asyncio.CancelledError:
        connection.terminate()
        raise


async def session_execute(connection: Any, sql: str) -> None:
    try:
        await connection.execute(sql)
    except asyncio.CancelledError:
        connection.terminate()
        raise


async def finish(connection: Any, transaction: Any, commit: bool) -> None:
    try:
        if commit:
            await transaction.commit()
        else:
            await transaction.rollback()
    except BaseException:
        connection.terminate()
        raise


async def release(pool: Any, connection: Any) -> None:
    await pool.release(connection)


async def close(connection: Any) -> None:
    # A lent pool connection closes gracefully; its holder goes back to the pool, empty.
    await connection.close()


async def listen_on(
    pool: Any,
    lent: list[Any],
    channel: str,
    on_payload: Callable[[str], None],
    on_lost: Callable[[], None],
) -> None:
    """Listen on the lent connection (or a fresh one from the pool, into ``lent``), which goes
    on running statements (bridge.py Rule 7); terminated on failure."""
    if not lent:
        await acquire_into(pool, lent)
    await _listen(lent[0], channel, on_payload, on_lost)


async def listen(
    dsn: str,
    connect_timeout: float,
    channel: str,
    settings: dict[str, str],
    on_payload: Callable[[str], None],
    on_lost: Callable[[], None],
) -> Any:
    connection = await asyncpg.connect(dsn, timeout=connect_timeout, server_settings=settings)
    await _listen(connection, channel, on_payload, on_lost)
    return connection


async def _listen(
    connection: Any,
    channel: str,
    on_payload: Callable[[str], None],
    on_lost: Callable[[], None],
) -> None:
    try:
        connection.add_termination_listener(lambda _connection: on_lost())
        await connection.add_listener(
            channel, lambda _connection, _pid, _channel, payload: on_payload(payload)
        )
    except BaseException:
        connection.terminate()
        raise
