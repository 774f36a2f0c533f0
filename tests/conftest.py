"""Shared test configuration: spec marks are checked against specs/ when tests are collected,
and one PostgreSQL serves the whole test session (``store_dsn``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres

_CHECK = Path(__file__).resolve().parent.parent / "specs" / "check.py"
STARTUP_TIMEOUT = 60.0
THREAD_WAIT = 20.0
"""Upper bound of starting or stopping a TrioThread; reaching it is a failure, not a pause."""


def _known_rule_ids() -> set[str]:
    loader = importlib.util.spec_from_file_location("zlink_specs_check", _CHECK)
    assert loader is not None
    assert loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    sys.modules[loader.name] = module  # dataclasses look their module up while the class is made
    loader.loader.exec_module(module)
    report = module.Report()
    module.read_rules(report)
    return set(report.rules)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that cites an unknown spec ID fails collection instead of proving nothing."""
    known = _known_rule_ids()
    unknown = sorted(
        {
            f"{item.nodeid} cites {cited}"
            for item in items
            for mark in item.iter_markers("spec")
            for cited in mark.args
            if cited not in known
        }
    )
    if unknown:
        raise pytest.UsageError("unknown spec IDs:\n  " + "\n  ".join(unknown))


class TrioThread:
    """One Trio loop in a helper thread with a nursery for background tasks: a hypothesis
    ``RuleBasedStateMachine`` drives it by calling ``run(afn)`` from its rules (DESIGN §3)."""

    def __init__(self) -> None:
        self.token: trio.lowlevel.TrioToken | None = None
        self.nursery: trio.Nursery | None = None
        self._ready = threading.Event()
        self._stop: trio.Event | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, name="model-trio", daemon=True)

    def _main(self) -> None:
        async def serve() -> None:
            self.token = trio.lowlevel.current_trio_token()
            self._stop = trio.Event()
            async with trio.open_nursery() as nursery:
                self.nursery = nursery
                self._ready.set()
                await self._stop.wait()
                nursery.cancel_scope.cancel()

        try:
            trio.run(serve)
        except BaseException as error:  # reported by stop()
            self._error = error
        finally:
            self._ready.set()

    def start(self) -> None:
        self._thread.start()
        assert self._ready.wait(THREAD_WAIT), "the model's Trio loop did not start"
        assert self.token is not None, f"the model's Trio loop failed: {self._error!r}"

    def run(self, afn: Callable[..., Awaitable[Any]], *args: object) -> Any:
        return trio.from_thread.run(afn, *args, trio_token=self.token)

    def stop(self) -> None:
        if self._stop is not None and self._thread.is_alive():
            trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
        self._thread.join(THREAD_WAIT)
        assert not self._thread.is_alive(), "the model's Trio loop did not stop"
        if self._error is not None:
            raise self._error


@pytest.fixture
def trio_thread() -> Iterator[TrioThread]:
    """A started :class:`TrioThread`, stopped (and its failure raised) after the test."""
    loop = TrioThread()
    loop.start()
    try:
        yield loop
    finally:
        loop.stop()


@pytest.fixture(scope="session")
def pg_root() -> Iterator[Path]:
    """A private folder for every embedded PostgreSQL of the session, outside pytest's own
    temporary tree: a concurrent pytest run resets that tree's permissions to 0700 (and prunes
    old runs), which would lock the server's system user out of a running server's data."""
    root = Path(tempfile.mkdtemp(prefix="zlink-test-pg-"))
    try:
        yield root
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def pg_folder(pg_root: Path) -> Path:
    """A fresh folder for one test's own embedded PostgreSQL (its data folder goes inside)."""
    return Path(tempfile.mkdtemp(dir=pg_root))


@pytest.fixture(scope="session")
def store_dsn(pg_root: Path) -> Iterator[str]:
    """The DSN of the session's PostgreSQL: ``ZLINK_STORE_DSN``, else one embedded server."""
    external = os.environ.get(DSN_VARIABLE)
    if external:
        yield external
        return
    server = EmbeddedPostgres(pg_root / "session" / "pgdata")
    dsn = trio.run(server.start, STARTUP_TIMEOUT)
    try:
        yield dsn
    finally:
        trio.run(server.stop, STARTUP_TIMEOUT)
