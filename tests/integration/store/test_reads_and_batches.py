"""Exact reads and conditional batches on the real server (specs/store.md, STORE-1..STORE-5)."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import pytest
import trio
import trio.testing

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Delete,
    Found,
    IfMissing,
    IfVersion,
    Missing,
    Put,
    StoreConfig,
    Stores,
    open_stores,
)


@pytest.mark.spec("STORE-2", "DEC-11")
async def test_read_is_one_observation_with_the_database_clock(
    stores: Stores, key_prefix: str
) -> None:
    """A read answers Missing or Found with now() of the same statement."""
    key = key_prefix + "k"
    before = await stores.location.now()
    missing = await stores.location.read(key)
    applied = await stores.location.write(Batch([], [Put(key, b"v")]))
    found = await stores.location.read(key)
    after = await stores.location.now()
    assert isinstance(missing, Missing)
    assert isinstance(applied, Applied)
    assert Found(b"v", applied.versions[0], None, found.store_now) == found
    assert before <= missing.store_now <= applied.store_now <= found.store_now <= after


@pytest.mark.spec("STORE-2", "DEC-11")
async def test_store_now_is_the_statements_database_clock_not_the_callers(
    store_dsn: str, key_prefix: str
) -> None:
    """With the database's now() an hour ahead (a schema first on the search path shadows it),
    reads report that clock: Missing and Found carry the shifted time, and a record's expiry
    is judged against it (live while store_now < expires_at)."""
    schema = "clock_" + uuid.uuid4().hex[:12]
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as plain:
        real_now = await plain.location.now()
        setup = await plain.database.begin(isolation="read_committed")
        await setup.execute(f"CREATE SCHEMA {schema}")
        await setup.execute(
            f"CREATE FUNCTION {schema}.now() RETURNS timestamptz LANGUAGE sql STABLE "
            "AS $$ SELECT pg_catalog.now() + interval '1 hour' $$"
        )
        await setup.commit()
        try:
            separator = "&" if "?" in store_dsn else "?"
            shifted = f"{store_dsn}{separator}search_path={schema},pg_catalog,public"
            async with open_stores(StoreConfig(dsn=shifted), environ={}) as stores:
                key = key_prefix + "k"
                missing = await stores.location.read(key)
                applied = await stores.location.write(
                    Batch([], [Put(key, b"v", timedelta(minutes=30))])
                )
                found = await stores.location.read(key)
        finally:
            cleanup = await plain.database.begin(isolation="read_committed")
            await cleanup.execute(f"DROP SCHEMA {schema} CASCADE")
            await cleanup.commit()
    ahead = real_now + timedelta(minutes=59)
    assert isinstance(missing, Missing)
    assert isinstance(applied, Applied)
    assert isinstance(found, Found)
    assert ahead <= missing.store_now
    assert ahead <= found.store_now < found.expires_at  # type: ignore[operator]  # has retention
    assert applied.store_now + timedelta(minutes=30) == found.expires_at


@pytest.mark.spec("STORE-12")
async def test_results_hold_only_plain_python_values(stores: Stores, key_prefix: str) -> None:
    """Values, versions and clocks come back as bytes, int and aware datetime."""
    key = key_prefix + "plain"
    applied = await stores.location.write(Batch([], [Put(key, b"\x00\xff")]))
    found = await stores.location.read(key)
    page = await stores.location.scan(key_prefix, 10)
    assert isinstance(applied, Applied)
    assert isinstance(found, Found)
    assert (bytes, int, datetime) == (type(found.value), type(found.version), type(found.store_now))
    assert found.store_now.tzinfo is not None
    assert all(type(v) is int for v in applied.versions)
    record = page.records[0]  # type: ignore[union-attr]  # a first page is never Expired
    assert (str, bytes, int) == (type(record.key), type(record.value), type(record.version))


@pytest.mark.spec("STORE-1")
async def test_keys_compare_byte_exactly(stores: Stores, key_prefix: str) -> None:
    """Case and Unicode normalisation never make two keys equal."""
    names = ["a", "A", "\u00e9", "e\u0301"]  # precomposed and decomposed é are different keys
    for number, name in enumerate(names):
        await stores.location.write(
            Batch([IfMissing(key_prefix + name)], [Put(key_prefix + name, bytes([number]))])
        )
    for number, name in enumerate(names):
        found = await stores.location.read(key_prefix + name)
        assert isinstance(found, Found)
        assert bytes([number]) == found.value


@pytest.mark.spec("STORE-3", "DEC-12")
async def test_a_failing_condition_leaves_every_key_untouched(
    stores: Stores, key_prefix: str
) -> None:
    """One false condition among several: Conflict names it and nothing is written."""
    a, b, c = (key_prefix + name for name in "abc")
    first = await stores.location.write(Batch([], [Put(a, b"a1"), Put(b, b"b1")]))
    assert isinstance(first, Applied)
    stale = IfVersion(b, first.versions[1] + 1000)
    result = await stores.location.write(
        Batch([IfVersion(a, first.versions[0]), stale], [Put(a, b"a2"), Delete(b), Put(c, b"c")])
    )
    assert isinstance(result, Conflict)
    assert stale == result.condition
    assert (b"a1", first.versions[0]) == _value_version(await stores.location.read(a))
    assert (b"b1", first.versions[1]) == _value_version(await stores.location.read(b))
    assert isinstance(await stores.location.read(c), Missing)


@pytest.mark.spec("STORE-41")
async def test_a_conflict_shows_what_the_batch_found_at_each_condition_key(
    stores: Stores, key_prefix: str
) -> None:
    """Three conditions (a held key, an absent key, an expired key) on a batch that fails: the
    Conflict lists, in condition order, the live record or Missing at each, on its own clock,
    whichever condition failed."""
    a, b, c = (key_prefix + name for name in "abc")
    first = await stores.location.write(
        Batch([], [Put(a, b"a1"), Put(c, b"gone", timedelta(microseconds=1))])
    )
    assert isinstance(first, Applied)
    result = await stores.location.write(
        Batch([IfMissing(b), IfMissing(c), IfMissing(a)], [Put(b, b"b")])
    )
    assert isinstance(result, Conflict)
    assert IfMissing(a) == result.condition
    now = result.store_now
    assert (
        Missing(now),
        Missing(now),
        Found(b"a1", first.versions[0], None, now),
    ) == result.current
    again = await stores.location.write(Batch([IfVersion(a, first.versions[0] + 1)], []))
    assert isinstance(again, Conflict)
    assert (Found(b"a1", first.versions[0], None, again.store_now),) == again.current


@pytest.mark.spec("STORE-3", "DEC-12")
async def test_a_batch_applies_every_mutation_together(stores: Stores, key_prefix: str) -> None:
    """When every condition holds, puts and deletes all land and each put gets a version."""
    a, b, c = (key_prefix + name for name in "abc")
    first = await stores.location.write(Batch([], [Put(a, b"a1"), Put(b, b"b1")]))
    assert isinstance(first, Applied)
    result = await stores.location.write(
        Batch(
            [IfVersion(a, first.versions[0]), IfMissing(c)],
            [Put(c, b"c1"), Delete(b), Put(a, b"a2")],
        )
    )
    assert isinstance(result, Applied)
    assert 2 == len(result.versions)
    assert (b"c1", result.versions[0]) == _value_version(await stores.location.read(c))
    assert (b"a2", result.versions[1]) == _value_version(await stores.location.read(a))
    assert isinstance(await stores.location.read(b), Missing)


@pytest.mark.spec("STORE-3", "DEC-12")
async def test_readers_never_see_half_a_batch(stores: Stores, key_prefix: str) -> None:
    """While batches move a token between two keys, every scan sees it in exactly one place."""
    a, b = key_prefix + "a", key_prefix + "b"
    await stores.location.write(Batch([], [Put(a, b"token")]))
    seen: list[int] = []

    async def mover() -> None:
        for turn in range(40):
            source, target = (a, b) if turn % 2 == 0 else (b, a)
            result = await stores.location.write(
                Batch([IfMissing(target)], [Delete(source), Put(target, b"token")])
            )
            assert isinstance(result, Applied)

    async def watcher(done: trio.Event) -> None:
        while not done.is_set():
            page = await stores.location.scan(key_prefix, 10)
            seen.append(len(page.records))  # type: ignore[union-attr]  # first pages never expire

    done = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(watcher, done)
        await mover()
        done.set()
    assert seen
    assert {1} == set(seen)


@pytest.mark.spec("STORE-4", "STORE-10", "DEC-12")
async def test_twenty_racing_creates_of_one_key_give_one_winner(
    store_dsn: str, key_prefix: str
) -> None:
    """20 concurrent IfMissing creates on 20 connections: one Applied, 19 Conflict, one record."""
    key = key_prefix + "contended"
    config = StoreConfig(dsn=store_dsn, pool_min_size=20, pool_max_size=21, operation_timeout=30)
    results: list[Applied | Conflict] = []
    async with open_stores(config, environ={}) as stores:
        ready = trio.Event()

        async def create(number: int) -> None:
            await ready.wait()
            batch = Batch([IfMissing(key)], [Put(key, f"writer {number}".encode())])
            results.append(await stores.location.write(batch))

        async with trio.open_nursery() as nursery:
            for number in range(20):
                nursery.start_soon(create, number)
            await trio.testing.wait_all_tasks_blocked()
            ready.set()
        page = await stores.location.scan(key_prefix, 100)
    winners = [r for r in results if isinstance(r, Applied)]
    assert (1, 19) == (len(winners), sum(isinstance(r, Conflict) for r in results))
    assert 1 == len(page.records)  # type: ignore[union-attr]  # first pages never expire
    assert winners[0].versions[0] == page.records[0].version  # type: ignore[union-attr]


@pytest.mark.spec("STORE-5", "DEC-13")
async def test_a_stale_writer_is_fenced_by_its_old_version(stores: Stores, key_prefix: str) -> None:
    """After someone else's write, a CAS with the version read before fails."""
    key = key_prefix + "lease"
    first = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"owner-a")]))
    assert isinstance(first, Applied)
    second = await stores.location.write(
        Batch([IfVersion(key, first.versions[0])], [Put(key, b"owner-b")])
    )
    assert isinstance(second, Applied)
    stale = await stores.location.write(
        Batch([IfVersion(key, first.versions[0])], [Put(key, b"owner-a again")])
    )
    assert isinstance(stale, Conflict)
    assert (b"owner-b", second.versions[0]) == _value_version(await stores.location.read(key))


@pytest.mark.spec("STORE-5", "DEC-13")
async def test_a_deleted_and_recreated_key_never_repeats_a_version(
    stores: Stores, key_prefix: str
) -> None:
    """Put, delete and put again, many times: every version is new for the key."""
    key = key_prefix + "again"
    versions: list[int] = []
    for _ in range(10):
        put = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"x")]))
        assert isinstance(put, Applied)
        versions.append(put.versions[0])
        gone = await stores.location.write(Batch([IfVersion(key, put.versions[0])], [Delete(key)]))
        assert isinstance(gone, Applied)
    assert len(versions) == len(set(versions))
    assert sorted(versions) == versions
    for old in versions:
        result = await stores.location.write(Batch([IfVersion(key, old)], [Put(key, b"late")]))
        assert isinstance(result, Conflict)


def _value_version(result: Missing | Found) -> tuple[bytes, int]:
    assert isinstance(result, Found)
    return result.value, result.version
