"""The pytest plugin of ``zlink_trio.testing`` (specs/testing.md KIT-3), registered through the
``pytest11`` entry point, so installing zlink_trio is enough.

Fixture ``zlink_store`` (session scope): the run's store (``shared_store()``), started on first
use and left (the server stops with its last user) when the session ends; its ``open_host`` and
``open_mesh`` open test hosts on it. Fixture ``zlink_host``: a test host of the application the
test's ``zlink_app`` fixture returns (define ``zlink_app`` in your conftest.py or test module),
in a mesh of its own, shut down after the test. The stateful harness's loop (``stateful.py``)
stops when the session ends.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any

import pytest

from zlink_trio._runtime.application.application import Application
from zlink_trio.testing.hosts import (
    TestHost,
    TestMesh,
    open_test_host,
    open_test_mesh,
    open_test_stores,
)
from zlink_trio.testing.store import shared_store

__all__ = ["TestStore", "zlink_app", "zlink_host", "zlink_store"]


class TestStore:
    """The run's store: its DSN, and test hosts opened on it."""

    __test__ = False

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def open_host(self, app: Application, **config: Any) -> AbstractAsyncContextManager[TestHost]:
        """``open_test_host(app, dsn=self.dsn, **config)``."""
        return open_test_host(app, dsn=self.dsn, **config)

    def open_mesh(
        self, app: Application, *, hosts: int = 2, **config: Any
    ) -> AbstractAsyncContextManager[TestMesh]:
        """``open_test_mesh(app, hosts=hosts, dsn=self.dsn, **config)``."""
        return open_test_mesh(app, hosts=hosts, dsn=self.dsn, **config)


def _stop_harness() -> None:
    # Nothing to do when no test used the harness (``stateful`` is imported only then).
    stateful = sys.modules.get("zlink_trio.testing.stateful")
    if stateful is not None:
        stateful.stop_harness_loop()


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Stop the stateful harness's Trio loop (and leave the store it joined) with the session."""
    _stop_harness()


@pytest.fixture(scope="session")
def zlink_store() -> Iterator[TestStore]:
    """The store every test of the run shares; each test host keeps to a mesh of its own."""
    with shared_store() as dsn:
        try:
            yield TestStore(dsn)
        finally:
            # The harness's loop may hold a pool on this store: it goes before the store does.
            _stop_harness()


@pytest.fixture
def zlink_app() -> Application:
    """The application ``zlink_host`` runs: override this fixture with your own."""
    raise pytest.UsageError(
        "zlink_host needs your application: define a fixture `zlink_app` that returns your "
        "zl.Application (in conftest.py or the test module)"
    )


@pytest.fixture
async def zlink_host(zlink_store: TestStore, zlink_app: Application) -> AsyncIterator[TestHost]:
    """A test host of ``zlink_app`` on the run's store, in a mesh of its own (KIT-2) that is
    cleared from the store after the test (KIT-12)."""
    async with (
        open_test_stores(zlink_store.dsn) as stores,
        zlink_store.open_host(zlink_app, stores=stores) as host,
    ):
        yield host
