"""How many PostgreSQL connections a store holds, seen by the server in ``pg_stat_activity``
(specs/store.md STORE-44..STORE-47): one while idle, more under concurrent load, one again
after the idle period. Each test's store has a database of its own, so the count is its own."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from urllib.parse import urlsplit, urlunsplit

import pytest
import trio

import zlink_trio as zl
from zlink_trio._integration.store import (
    Batch,
    Changed,
    ChangeSubscription,
    Put,
    Resync,
    StoreConfig,
    Stores,
    open_stores,
)
from zlink_trio._integration.store.bridge import Database, open_database
from zlink_trio._integration.store.statements import Statement
from zlink_trio._runtime.host.host import store_config_of
from zlink_trio.errors import ZLinkError

TIMEOUT = 10.0
_COUNT = Statement(
    "SELECT count(*) FROM pg_stat_activity WHERE datname = $1 AND backend_type = 'client backend'",
    ("database",),
)
_SLEEP = Statement("SELECT pg_sleep(0.3)", ())
_FAIL = Statement("SELECT 1 / 0", ())


@pytest.fixture
async def observer(store_dsn: str) -> AsyncIterator[Database]:
    """A small pool on the session's database that counts the connections of another."""
    async with open_database(
        store_dsn, min_size=1, max_size=2, operation_timeout=TIMEOUT, startup_timeout=30
    ) as database:
        yield database


@pytest.fixture
async def own_dsn(store_dsn: str, observer: Database) -> AsyncIterator[str]:
    """A fresh database on the session's server, dropped after the test."""
    name = f"zl_conn_{uuid.uuid4().hex[:12]}"
    await observer.fetch(Statement(f"CREATE DATABASE {name}", ()), {})
    try:
        yield urlunsplit(urlsplit(store_dsn)._replace(path=f"/{name}"))
    finally:
        await observer.fetch(Statement(f"DROP DATABASE {name} WITH (FORCE)", ()), {})


async def _count(observer: Database, dsn: str) -> int:
    name = urlsplit(dsn).path.lstrip("/")
    return int((await observer.fetch_one(_COUNT, {"database": name}))[0])


async def _wait_count(observer: Database, dsn: str, expected: int) -> None:
    with trio.fail_after(TIMEOUT):
        while expected != await _count(observer, dsn):  # noqa: ASYNC110  # a server count
            await trio.sleep(0.02)


async def _announced(stores: Stores, feed: ChangeSubscription, key: str) -> list[object]:
    """Write ``key`` and read the feed until it is announced; the events seen on the way."""
    await stores.location.write(Batch([], [Put(key, b"1")]))
    seen: list[object] = []
    with trio.fail_after(TIMEOUT):
        async for event in feed:
            seen.append(event)
            if isinstance(event, Changed) and key in event.keys:
                return seen
    raise AssertionError("the feed ended")


@pytest.mark.spec("STORE-45", "STORE-44")
async def test_an_idle_store_holds_one_connection_that_also_listens(
    observer: Database, own_dsn: str
) -> None:
    """A store doing one call at a time holds one connection, which serves its calls and its
    change feed: no dedicated listener, no spare."""
    async with open_stores(StoreConfig(dsn=own_dsn), environ={}) as stores:
        with stores.location.changes() as feed:
            for number in range(20):
                await stores.location.read(f"k{number}")
            assert 1 == await _count(observer, own_dsn)
            await _announced(stores, feed, "announced")
            for number in range(20):
                await stores.location.read(f"k{number}")
            assert 1 == await _count(observer, own_dsn)


@pytest.mark.spec("STORE-46", "STORE-44")
async def test_a_burst_grows_the_pool_and_it_shrinks_back_after_the_idle_period(
    observer: Database, own_dsn: str
) -> None:
    """Eight calls at once on a pool of five hold five connections; they stay open right after
    the burst and, after the idle period, one is left, and it still listens."""
    config = StoreConfig(dsn=own_dsn, pool_max_size=5, pool_idle_timeout=1.0)
    async with open_stores(config, environ={}) as stores:
        with stores.location.changes() as feed:
            async with trio.open_nursery() as nursery:
                for _ in range(8):
                    nursery.start_soon(stores.database.fetch, _SLEEP, {})
                await _wait_count(observer, own_dsn, 5)
            assert 5 == await _count(observer, own_dsn)  # idle, not closed yet
            await _wait_count(observer, own_dsn, 1)
            events = await _announced(stores, feed, "after the burst")
            assert Resync() not in events  # the listening connection was never closed


@pytest.mark.spec("STORE-45")
async def test_a_failed_call_on_the_listening_connection_makes_the_feed_listen_again(
    observer: Database, own_dsn: str
) -> None:
    """A statement that fails on the listening connection ends it: the feed says Resync,
    listens on another connection, later writes are announced again, and the store is back to
    one connection after the idle period."""
    config = StoreConfig(dsn=own_dsn, pool_idle_timeout=0.5)
    async with open_stores(config, environ={}) as stores:
        with stores.location.changes() as feed:
            with pytest.raises(ZLinkError):
                await stores.database.fetch(_FAIL, {})
            with trio.fail_after(TIMEOUT):
                assert Resync() == await feed.__anext__()
            assert [Changed(frozenset({"after"}))] == await _announced(stores, feed, "after")
            await _wait_count(observer, own_dsn, 1)


@pytest.mark.spec("STORE-45")
async def test_a_cancelled_call_on_the_listening_connection_makes_the_feed_listen_again(
    own_dsn: str,
) -> None:
    """A call cancelled on the listening connection terminates it (bridge.py Rule 2): the feed
    says Resync and later writes are announced again."""
    async with open_stores(StoreConfig(dsn=own_dsn), environ={}) as stores:
        with stores.location.changes() as feed:
            with trio.move_on_after(0.1):
                await stores.database.fetch(_SLEEP, {})
            with trio.fail_after(TIMEOUT):
                assert Resync() == await feed.__anext__()
            assert [Changed(frozenset({"after"}))] == await _announced(stores, feed, "after")


app = zl.Application()


@pytest.mark.spec("STORE-47")
async def test_an_idle_host_holds_one_store_connection_on_average(
    observer: Database, own_dsn: str
) -> None:
    """A host that started and then idles (renewing its node record twice a second) holds one
    store connection once its start-up burst has closed, 1.5 at most on average, and never more
    than its configured pool."""
    config = zl.HostConfig(
        mesh=f"conn-{uuid.uuid4().hex[:8]}",
        store_dsn=own_dsn,
        store_pool_size=4,
        store_idle_timeout=0.5,
        node_lease=1.5,
        transport_security="none",
    )
    async with zl.open_host(app, config):
        await _wait_count(observer, own_dsn, 1)
        samples = []
        # Four seconds, eight renewals: one overlap of a renewal and a peer poll opens a spare
        # for up to the idle timeout, which a shorter window would count twice as much.
        for _ in range(80):
            samples.append(await _count(observer, own_dsn))
            await trio.sleep(0.05)
    assert max(samples) <= 4, samples
    assert sum(samples) / len(samples) <= 1.5, samples


@pytest.mark.spec("STORE-47")
def test_a_host_sizes_its_store_by_its_configuration() -> None:
    """HostConfig's store sizes and pooler reach the host's StoreConfig; a pool too small for
    two scans and a free connection is a ConfigurationError when the config is made."""
    config = zl.HostConfig(
        mesh="m",
        store_pool_size=4,
        store_idle_timeout=2.0,
        store_transaction_pooler=True,
        store_listen_dsn="postgresql://direct/db",
    )
    store = store_config_of(config)
    assert (4, 2.0, True, "postgresql://direct/db", True) == (
        store.pool_max_size,
        store.pool_idle_timeout,
        store.transaction_pooler,
        store.listen_dsn,
        store.notifications,
    )
    polling = store_config_of(zl.HostConfig(mesh="m", store_transaction_pooler=True))
    assert (True, False) == (polling.transaction_pooler, polling.notifications)
    with pytest.raises(zl.ConfigurationError, match="store_pool_size"):
        zl.HostConfig(mesh="m", store_pool_size=2)
