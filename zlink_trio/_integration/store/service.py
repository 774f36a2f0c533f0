"""Opening the store: database, schema, both stores and the change feed as one resource
(specs/store.md, STORE-27..STORE-35).

This is the store branch of the host's task tree (DESIGN §2): the trio-asyncio loop with the
asyncpg pool, the LISTEN/NOTIFY task and the scan-expiry tasks live inside ``open_stores`` and
end when it exits; an embedded server started here is stopped here.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager

import attrs
import trio

from zlink_trio._exception_groups import sole_error
from zlink_trio._integration.store import location_sql
from zlink_trio._integration.store.bridge import Database, open_database
from zlink_trio._integration.store.config import StoreConfig, chosen_dsn, default_data_dir
from zlink_trio._integration.store.embedded import EmbeddedPostgres
from zlink_trio._integration.store.location import LocationStore
from zlink_trio._integration.store.notifications import ChangeFeed
from zlink_trio._integration.store.relocation import RelocationStore
from zlink_trio._integration.store.scans import ScanSnapshots
from zlink_trio._integration.store.schema import ensure_schema


@attrs.frozen
class Stores:
    """The two stores on one server, usable until ``open_stores`` exits."""

    location: LocationStore
    relocation: RelocationStore
    dsn: str
    """The server in use (the embedded one's Unix-socket DSN when none was configured)."""
    scans: ScanSnapshots
    """The held scan snapshots (``open_count`` for diagnostics)."""
    database: Database
    """The pool behind both stores, for tools and tests that need a raw session."""


@asynccontextmanager
async def open_stores(
    config: StoreConfig | None = None, *, environ: Mapping[str, str] = os.environ
) -> AsyncIterator[Stores]:
    """Open the Location and Relocation Stores; close everything on exit.

    Start-up is bounded by ``startup_timeout``: ``ConfigurationError`` for a DSN that is malformed
    or rejected, or a schema newer than this code; ``ZLinkError(UNAVAILABLE)`` when no server
    answers in time.
    """
    config = config or StoreConfig()
    dsn = chosen_dsn(config, environ)
    try:
        async with _open(config, dsn, environ) as stores:
            yield stores
    except BaseExceptionGroup as group:
        # The nurseries inside (ours and trio-asyncio's) wrap what they pass on; a caller
        # branches on the error itself, so a lone error leaves as itself.
        lone = sole_error(group)
        if lone is None:
            raise
        raise lone from None


@asynccontextmanager
async def _open(
    config: StoreConfig, dsn: str | None, environ: Mapping[str, str]
) -> AsyncIterator[Stores]:
    embedded: EmbeddedPostgres | None = None
    try:
        if dsn is None:
            embedded = EmbeddedPostgres(config.data_dir or default_data_dir(environ))
            dsn = await embedded.start(config.startup_timeout)
        async with open_database(
            dsn,
            min_size=config.pool_min_size,
            max_size=config.pool_max_size,
            operation_timeout=config.operation_timeout,
            startup_timeout=config.startup_timeout,
            idle_timeout=config.pool_idle_timeout,
            durable_commits=config.durable_commits,
            warm_up=location_sql.WARM_UP,
            pooled=config.transaction_pooler,
            listen_dsn=config.listen_dsn,
        ) as database:
            await ensure_schema(database)
            async with trio.open_nursery() as nursery:
                scans = ScanSnapshots(
                    database,
                    nursery,
                    lifetime=config.scan_lifetime,
                    capacity=config.max_open_scans,
                )
                feed = ChangeFeed()
                await nursery.start(
                    functools.partial(
                        feed.run,
                        database,
                        listen=config.notifications,
                        poll_interval=config.poll_interval,
                    )
                )
                try:
                    yield Stores(
                        LocationStore(database, scans, feed),
                        RelocationStore(database),
                        dsn,
                        scans,
                        database,
                    )
                finally:
                    await scans.close_all()
                    nursery.cancel_scope.cancel()
    finally:
        if embedded is not None:
            await embedded.stop(config.startup_timeout)
