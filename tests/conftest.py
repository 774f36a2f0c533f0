"""Shared test configuration: spec marks are checked against specs/ when tests are collected,
and one PostgreSQL serves the whole test session (``store_dsn``)."""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import trio

from zlink_trio._integration.store import DSN_VARIABLE, EmbeddedPostgres

_CHECK = Path(__file__).resolve().parent.parent / "specs" / "check.py"
STARTUP_TIMEOUT = 60.0


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
