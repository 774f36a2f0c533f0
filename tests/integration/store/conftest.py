"""Store test fixtures: ONE embedded PostgreSQL for the whole session, a fresh ``Stores`` per test.

``store_dsn`` is session-scoped and synchronous (pytest-trio runs each test in its own Trio run),
so it can move to ``tests/conftest.py`` unchanged when other suites need the store. Set
``ZLINK_STORE_DSN`` to run these tests against an external server instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import trio

from zlink_trio._integration.store import (
    DSN_VARIABLE,
    EmbeddedPostgres,
    StoreConfig,
    Stores,
    open_stores,
)

STARTUP_TIMEOUT = 60.0


@pytest.fixture(scope="session")
def store_dsn(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The DSN of the session's PostgreSQL: ``ZLINK_STORE_DSN``, else one embedded server."""
    external = os.environ.get(DSN_VARIABLE)
    if external:
        yield external
        return
    server = EmbeddedPostgres(Path(tmp_path_factory.mktemp("store")) / "pgdata")
    dsn = trio.run(server.start, STARTUP_TIMEOUT)
    try:
        yield dsn
    finally:
        trio.run(server.stop, STARTUP_TIMEOUT)


@pytest.fixture
def key_prefix() -> str:
    """A prefix no other test uses, so tests sharing the server never see each other's keys."""
    return f"t-{uuid.uuid4().hex[:12]}/"


@pytest.fixture
async def stores(store_dsn: str) -> AsyncIterator[Stores]:
    """Both stores on the session server, closed after the test."""
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as opened:
        yield opened
