"""Store test fixtures: a fresh ``Stores`` per test on the session's server (``store_dsn``,
defined in ``tests/conftest.py``)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

from zlink_trio._integration.store import (
    StoreConfig,
    Stores,
    open_stores,
)


@pytest.fixture
def key_prefix() -> str:
    """A prefix no other test uses, so tests sharing the server never see each other's keys."""
    return f"t-{uuid.uuid4().hex[:12]}/"


@pytest.fixture
async def stores(store_dsn: str) -> AsyncIterator[Stores]:
    """Both stores on the session server, closed after the test."""
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as opened:
        yield opened
