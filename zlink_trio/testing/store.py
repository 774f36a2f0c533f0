"""The one store of a test run (specs/testing.md KIT-1).

``ZLINK_STORE_DSN`` when it is set; otherwise the embedded PostgreSQL in one data folder per
user, which every process of the run joins as a user (STORE-36): pytest-xdist workers and tox
environments running in parallel share the server, and the last one to leave stops it. Each test
or example keeps to a mesh of its own (KIT-2), so sharing the server shares nothing else.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import trio

from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres

__all__ = ["FOLDER_VARIABLE", "open_shared_store", "shared_store", "shared_store_folder"]

FOLDER_VARIABLE = "ZLINK_TEST_STORE_DIR"
"""Where the shared embedded server keeps its data, instead of the per-user cache folder."""

START_LIMIT = 120.0
"""Seconds a first start may take (initdb of a new folder included)."""
STOP_LIMIT = 30.0


def shared_store_folder(environ: Mapping[str, str] = os.environ) -> Path:
    """``$ZLINK_TEST_STORE_DIR``, else ``$XDG_CACHE_HOME/zlink_trio/test-store``, else
    ``~/.cache/zlink_trio/test-store``; the data folder is ``pgdata`` inside it."""
    chosen = environ.get(FOLDER_VARIABLE)
    if chosen:
        return Path(chosen)
    base = environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "zlink_trio" / "test-store"


@asynccontextmanager
async def open_shared_store(environ: Mapping[str, str] = os.environ) -> AsyncIterator[str]:
    """The DSN of the run's store for the body of the block (async form, inside Trio)."""
    external = environ.get(DSN_VARIABLE)
    if external:
        yield external
        return
    server = EmbeddedPostgres(shared_store_folder(environ) / "pgdata")
    dsn = await server.start(START_LIMIT)
    try:
        yield dsn
    finally:
        with trio.CancelScope(shield=True):
            await server.stop(STOP_LIMIT)


@contextmanager
def shared_store(environ: Mapping[str, str] = os.environ) -> Iterator[str]:
    """The DSN of the run's store for the body of the block (outside Trio: a fixture, a script).
    Starts the embedded server, or joins it when another process of the run has started it."""
    external = environ.get(DSN_VARIABLE)
    if external:
        yield external
        return
    server = EmbeddedPostgres(shared_store_folder(environ) / "pgdata")
    dsn = trio.run(server.start, START_LIMIT)
    try:
        yield dsn
    finally:
        trio.run(server.stop, STOP_LIMIT)
