"""Deadlines, cancellation and a server outage (specs/store.md, STORE-16, STORE-17, STORE-18)."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from pathlib import Path

import pytest
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    EmbeddedPostgres,
    Found,
    IfMissing,
    Payload,
    Put,
    Resync,
    ScanPage,
    StoreConfig,
    Stores,
    open_stores,
)
from zlink_trio.errors import ErrorKind, ZLinkError

TIMEOUT = 1.0
SLACK = 1.0  # scheduling and connection teardown on a loaded 2-core machine


async def _fails_unavailable_in_time(call: object) -> None:
    start = trio.current_time()
    with pytest.raises(ZLinkError) as caught:
        await call()  # type: ignore[operator]  # an async callable
    assert ErrorKind.UNAVAILABLE == caught.value.kind
    assert trio.current_time() - start <= TIMEOUT + SLACK


@pytest.mark.spec("STORE-17", "DEC-17")
async def test_a_write_cancelled_by_its_caller_raises_cancelled_and_is_settled_by_reading(
    stores: Stores, key_prefix: str
) -> None:
    """Caller cancellation surfaces as trio.Cancelled, never as Applied or Conflict."""
    key = key_prefix + "cancelled"
    outcome: list[object] = []
    with trio.CancelScope() as scope:
        scope.cancel()
        outcome.append(await stores.location.write(Batch([IfMissing(key)], [Put(key, b"v")])))
    assert scope.cancelled_caught
    assert [] == outcome
    settled = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"v")]))
    assert isinstance(settled, Applied)


@pytest.mark.spec("STORE-16", "STORE-17", "DEC-17")
async def test_a_write_stuck_past_the_deadline_is_unavailable_with_unknown_outcome(
    store_dsn: str, key_prefix: str
) -> None:
    """A write blocked on a row lock ends with UNAVAILABLE at the deadline; reading settles it."""
    key = key_prefix + "locked"
    config = StoreConfig(dsn=store_dsn, operation_timeout=TIMEOUT)
    async with open_stores(config, environ={}) as stores:
        await stores.location.write(Batch([], [Put(key, b"before")]))
        blocker = await stores.database.begin(isolation="read_committed")
        try:
            await blocker.execute(
                "SELECT 1 FROM zlink_location_record "
                f"WHERE key = '\\x{key.encode().hex()}'::bytea FOR UPDATE"
            )
            await _fails_unavailable_in_time(
                lambda: stores.location.write(Batch([], [Put(key, b"after")]))
            )
        finally:
            await blocker.close()
        settled = await stores.location.read(key)
    assert isinstance(settled, Found)
    assert settled.value in (b"before", b"after")


@pytest.mark.spec("STORE-16", "STORE-18")
async def test_calls_fail_fast_during_an_outage_and_recover_after_it(pg_folder: Path) -> None:
    """Server stopped: every call is UNAVAILABLE within its deadline. Server back: calls succeed
    and every acknowledged write is still there."""
    server = EmbeddedPostgres(pg_folder / "outage")
    dsn = await server.start(60)
    try:
        config = StoreConfig(dsn=dsn, operation_timeout=TIMEOUT, poll_interval=0.05)
        async with open_stores(config, environ={}) as stores:
            acknowledged = {}
            for number in range(5):
                key = f"acked-{number}"
                result = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"v")]))
                assert isinstance(result, Applied)
                acknowledged[key] = result.versions[0]
            await stores.relocation.put("root", b"recovery", timedelta(hours=1))

            await server.stop(60)
            await _fails_unavailable_in_time(lambda: stores.location.read("acked-0"))
            await _fails_unavailable_in_time(
                lambda: stores.location.write(Batch([], [Put("during", b"x")]))
            )
            await _fails_unavailable_in_time(lambda: stores.location.scan("acked", 10))
            await _fails_unavailable_in_time(lambda: stores.relocation.read("root"))

            await server.start(60)
            with stores.location.changes() as feed:
                for key, version in acknowledged.items():
                    found = await stores.location.read(key)
                    assert isinstance(found, Found)
                    assert version == found.version
                assert isinstance(await stores.relocation.read("root"), Payload)
                assert isinstance(await stores.location.scan("acked", 10), ScanPage)
                # The listener reconnects by itself too. A write can commit before it listens
                # again; then the feed says Resync (re-read everything) instead of naming the
                # key, so write again until a notification names the key it wrote.
                with trio.fail_after(20):
                    heard = False
                    for attempt in range(100):
                        key = f"after-{attempt}"
                        after = await stores.location.write(Batch([], [Put(key, b"y")]))
                        assert isinstance(after, Applied)
                        async for event in feed:
                            heard = key in getattr(event, "keys", ())
                            if heard or isinstance(event, Resync):
                                break
                        if heard:
                            break
                    assert heard
    finally:
        await server.stop(60)


@pytest.mark.spec("STORE-49")
async def test_a_call_the_driver_cancels_is_unavailable_not_asyncio_cancelled(
    stores: Stores,
) -> None:
    """A coroutine cancelled on the asyncio side (as the store's close does to what runs on its
    loop) ends the Trio caller's call UNAVAILABLE."""

    async def cancelled_on_the_loop() -> None:
        raise asyncio.CancelledError

    with pytest.raises(ZLinkError) as caught:
        await stores.database.call(cancelled_on_the_loop)
    assert ErrorKind.UNAVAILABLE == caught.value.kind
