"""The bridge lends pool connections to the Trio side between calls (bridge.py Rule 5): more
calls than connections wait their turn, and a cancelled call gives its connection back."""

from __future__ import annotations

import pytest
import trio

from zlink_trio._integration.store.bridge import open_database
from zlink_trio._integration.store.statements import Statement

SLEEP = Statement("SELECT pg_sleep(0.05)", ())
SLEEP_LONG = Statement("SELECT pg_sleep(30)", ())
ONE = Statement("SELECT 1", ())
TIMEOUT = 5.0


@pytest.mark.spec("STORE-43")
async def test_more_calls_than_connections_each_get_one_in_turn(store_dsn: str) -> None:
    """Twelve calls on a pool of two: each runs once a connection is free, none waits for the
    operation timeout (a connection left idle on the Trio side while a call waits for the pool
    would hold the others until then)."""
    async with open_database(
        store_dsn, min_size=1, max_size=2, operation_timeout=TIMEOUT, startup_timeout=30
    ) as database:
        done: list[float] = []
        started = trio.current_time()

        async def one() -> None:
            await database.fetch(SLEEP, {})
            done.append(trio.current_time() - started)

        async with trio.open_nursery() as nursery:
            for _ in range(12):
                nursery.start_soon(one)
    assert 12 == len(done)
    assert max(done) < TIMEOUT / 2, done  # six turns of 50 ms, far from the timeout


@pytest.mark.spec("STORE-43")
async def test_cancelled_calls_give_their_connections_back(store_dsn: str) -> None:
    """Both connections of a pool of two busy in calls that are cancelled: the next calls, and
    a session, still get a connection at once."""
    async with open_database(
        store_dsn, min_size=1, max_size=2, operation_timeout=TIMEOUT, startup_timeout=30
    ) as database:
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(database.fetch, SLEEP_LONG, {})
            await trio.sleep(0.2)  # both statements are on the server
            nursery.cancel_scope.cancel()
        with trio.fail_after(TIMEOUT / 2):
            for _ in range(3):
                assert 1 == (await database.fetch_one(ONE, {}))[0]
            session = await database.begin(isolation="repeatable_read", readonly=True)
            await session.fetch(ONE, {})
            await session.close()
            async with trio.open_nursery() as nursery:
                for _ in range(2):
                    nursery.start_soon(database.fetch, ONE, {})


@pytest.mark.spec("STORE-44")
async def test_a_spare_connection_is_opened_when_concurrency_appears(store_dsn: str) -> None:
    """Calls one at a time keep one connection; two calls at once took both idle ones, so a
    third joins the idle list in the background. (Polled: the spare is opened on the bridge's
    asyncio loop, which Trio's task barrier does not see.)"""
    async with open_database(
        store_dsn, min_size=1, max_size=3, operation_timeout=TIMEOUT, startup_timeout=30
    ) as database:
        for _ in range(20):
            await database.fetch(ONE, {})
        assert 1 == database.idle_count
        async with trio.open_nursery() as nursery:  # both at once: both are lent, one is new
            for _ in range(2):
                nursery.start_soon(database.fetch, SLEEP, {})
        with trio.fail_after(TIMEOUT):
            while database.idle_count < 3:  # noqa: ASYNC110  # both back, and a spare
                await trio.sleep(0.01)
