"""The conditional batch as ``location_sql`` builds it and ``LocationStore.write`` runs it
(specs/store.md STORE-3, STORE-5, STORE-6, STORE-25), on the real server.

``location_sql`` compiles its statements once, at import. The ``built_here`` fixture builds them
again inside the test and makes the store use those, so what is checked is what the builders make
now (mutation testing switches a builder's code per test process, after the import).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Changed,
    ChangeSubscription,
    Conflict,
    Delete,
    Found,
    IfMissing,
    IfVersion,
    Missing,
    Put,
    ScanPage,
    Stores,
    location_sql,
)

SHORT = timedelta(milliseconds=50)


@pytest.fixture(autouse=True)
def built_here(monkeypatch: pytest.MonkeyPatch) -> None:
    """The store's statements built in this test instead of at import."""
    for name, build in (
        ("READ", location_sql._read),
        ("WRITE", location_sql._write),
        ("SCAN_PAGE", location_sql._scan_page),
        ("NOW", location_sql._now_only),
    ):
        monkeypatch.setattr(location_sql, name, build())


async def found(stores: Stores, key: str) -> Found:
    record = await stores.location.read(key)
    assert isinstance(record, Found), key
    return record


async def put(stores: Stores, key: str, value: bytes) -> int:
    written = await stores.location.write(Batch([], [Put(key, value)]))
    assert isinstance(written, Applied)
    return written.versions[0]


async def changed_until(feed: ChangeSubscription, witness: str, prefix: str) -> set[str]:
    """Every key under ``prefix`` (this test's keys: the server may serve other writers too)
    hinted until (and with) the event that names ``witness``."""
    seen: set[str] = set()
    with trio.fail_after(10):
        async for event in feed:
            if isinstance(event, Changed):
                seen |= {key for key in event.keys if key.startswith(prefix)}
                if witness in event.keys:
                    return seen
    raise AssertionError("the feed ended")


@pytest.mark.spec("STORE-3", "STORE-25")
async def test_a_batch_names_its_first_failing_condition_and_changes_nothing(
    stores: Stores, key_prefix: str
) -> None:
    """Of three conditions the first holds and the other two fail: the Conflict names the
    second; neither the put nor the delete happened, and nothing was notified."""
    a, b, c, d = (key_prefix + name for name in "abcd")
    version_a = await put(stores, a, b"a")
    await put(stores, b, b"b")
    with stores.location.changes() as feed:
        await put(stores, key_prefix + "first", b"1")
        await changed_until(feed, key_prefix + "first", key_prefix)
        first_failing = IfMissing(b)
        before = await stores.location.now()
        conflict = await stores.location.write(
            Batch(
                [IfVersion(a, version_a), first_failing, IfVersion(c, 5)],
                [Put(d, b"d"), Delete(a)],
            )
        )
        assert isinstance(conflict, Conflict)
        assert first_failing == conflict.condition
        assert before <= conflict.store_now <= await stores.location.now()
        assert version_a == (await found(stores, a)).version
        assert isinstance(await stores.location.read(d), Missing)
        await put(stores, key_prefix + "witness", b"w")
        assert {key_prefix + "witness"} == await changed_until(
            feed, key_prefix + "witness", key_prefix
        )
    for conditions, failing in (
        ([IfVersion(a, version_a + 1)], 0),
        ([IfMissing(c), IfVersion(key_prefix + "e", version_a)], 1),
        ([IfMissing(a)], 0),
    ):
        conflict = await stores.location.write(Batch(conditions, [Put(d, b"d")]))
        assert isinstance(conflict, Conflict)
        assert conditions[failing] == conflict.condition
    assert isinstance(await stores.location.read(d), Missing)


@pytest.mark.spec("STORE-3", "STORE-5", "STORE-25")
async def test_an_applied_batch_gives_one_version_per_put_in_batch_order(
    stores: Stores, key_prefix: str
) -> None:
    """Every condition holds: each put gets a new version, reported in the batch's order of
    puts (not key order), the deletes happen (an absent key too), and every written or deleted
    key is notified."""
    old, gone, z, m, a = (key_prefix + name for name in ("old", "gone", "z", "m", "a"))
    version_old = await put(stores, old, b"old")
    with stores.location.changes() as feed:
        applied = await stores.location.write(
            Batch(
                [IfMissing(z), IfVersion(old, version_old), IfMissing(a)],
                [Put(z, b"zz"), Delete(old), Put(m, b"mm"), Delete(gone), Put(a, b"aa")],
            )
        )
        assert isinstance(applied, Applied)
        assert 3 == len(applied.versions)
        assert 3 == len(set(applied.versions))
        for key, value, version in zip(
            (z, m, a), (b"zz", b"mm", b"aa"), applied.versions, strict=True
        ):
            record = await found(stores, key)
            assert (value, version, None) == (record.value, record.version, record.expires_at)
            assert version > version_old
        assert isinstance(await stores.location.read(old), Missing)
        await put(stores, key_prefix + "witness", b"w")
        hinted = await changed_until(feed, key_prefix + "witness", key_prefix)
    assert {z, m, a, old, gone} <= hinted
    deleted_only = await stores.location.write(Batch([IfMissing(old)], [Delete(z)]))
    assert isinstance(deleted_only, Applied)
    assert () == deleted_only.versions
    assert isinstance(await stores.location.read(z), Missing)


@pytest.mark.spec("STORE-5", "STORE-6")
async def test_a_put_over_a_record_gives_a_new_version_and_its_own_expiry(
    stores: Stores, key_prefix: str
) -> None:
    """Overwriting keeps one record with the new value, a larger version and the new put's
    expiry (none, or the commit's clock plus its retention); the old version is fenced off."""
    key = key_prefix + "k"
    first = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"1", SHORT * 100)]))
    assert isinstance(first, Applied)
    record = await found(stores, key)
    assert first.store_now + SHORT * 100 == record.expires_at
    second = await stores.location.write(
        Batch([IfVersion(key, first.versions[0])], [Put(key, b"2")])
    )
    assert isinstance(second, Applied)
    assert second.versions[0] > first.versions[0]
    record = await found(stores, key)
    assert (b"2", second.versions[0], None) == (record.value, record.version, record.expires_at)
    fenced = await stores.location.write(
        Batch([IfVersion(key, first.versions[0])], [Put(key, b"3")])
    )
    assert isinstance(fenced, Conflict)
    assert b"2" == (await found(stores, key)).value
    page = await stores.location.scan(key_prefix, 10)
    assert isinstance(page, ScanPage)
    assert [key] == [r.key for r in page.records]


@pytest.mark.spec("STORE-6", "STORE-5")
async def test_conditions_see_only_live_records(stores: Stores, key_prefix: str) -> None:
    """An expired record and a deleted one count as missing: IfMissing holds on them and
    IfVersion with their last version fails."""
    expired, deleted = key_prefix + "expired", key_prefix + "deleted"
    short = await stores.location.write(Batch([], [Put(expired, b"e", SHORT)]))
    assert isinstance(short, Applied)
    version_deleted = await put(stores, deleted, b"d")
    assert isinstance(await stores.location.write(Batch([], [Delete(deleted)])), Applied)
    await _wait_for_database_clock(stores, short.store_now + SHORT)
    for key, version in ((expired, short.versions[0]), (deleted, version_deleted)):
        fenced = await stores.location.write(Batch([IfVersion(key, version)], [Put(key, b"x")]))
        assert isinstance(fenced, Conflict)
        taken = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"new")]))
        assert isinstance(taken, Applied)
        assert b"new" == (await found(stores, key)).value


async def test_write_takes_only_a_batch(stores: Stores, key_prefix: str) -> None:
    with pytest.raises(TypeError, match="write\\(\\) takes a Batch, not Put"):
        await stores.location.write(Put(key_prefix + "k", b"v"))  # type: ignore[arg-type]  # the error under test


async def test_now_is_the_database_clock(stores: Stores, key_prefix: str) -> None:
    before = await stores.location.read(key_prefix + "none")
    now = await stores.location.now()
    after = await stores.location.read(key_prefix + "none")
    assert isinstance(now, datetime)
    assert before.store_now <= now <= after.store_now


async def _wait_for_database_clock(stores: Stores, moment: datetime) -> None:
    # Expiry is the passage of database time itself: read the database clock and let exactly
    # the missing part (at most the 50 ms retention) pass.
    now = await stores.location.now()
    await trio.sleep(max(0.0, (moment - now).total_seconds()) + 0.002)


@pytest.mark.spec("STORE-25")
async def test_a_quiet_batch_commits_and_notifies_nothing(stores: Stores, key_prefix: str) -> None:
    """A batch made with ``notify=False`` writes and deletes as any batch does, and the feed
    hears nothing of it: the next hint for this test's keys is the witness written after it."""
    kept, quiet, gone = (key_prefix + name for name in ("kept", "quiet", "gone"))
    version = await put(stores, kept, b"1")
    await put(stores, gone, b"g")
    with stores.location.changes() as feed:
        await put(stores, key_prefix + "first", b"1")
        await changed_until(feed, key_prefix + "first", key_prefix)
        applied = await stores.location.write(
            Batch(
                [IfVersion(kept, version)],
                [Put(kept, b"2"), Put(quiet, b"q"), Delete(gone)],
                notify=False,
            )
        )
        assert isinstance(applied, Applied)
        assert b"2" == (await found(stores, kept)).value
        assert b"q" == (await found(stores, quiet)).value
        assert isinstance(await stores.location.read(gone), Missing)
        await put(stores, key_prefix + "witness", b"w")
        assert {key_prefix + "witness"} == await changed_until(
            feed, key_prefix + "witness", key_prefix
        )
    with pytest.raises(TypeError):
        Batch([], [Put(kept, b"3")], notify=1)  # type: ignore[arg-type]


@pytest.mark.spec("STORE-50")
async def test_an_announcement_notifies_keys_a_quiet_batch_wrote(
    stores: Stores, key_prefix: str
) -> None:
    """``announce`` hints exactly the keys it is given, as a committed batch would, and writes
    nothing; the quiet batch before it hinted nothing (the witness bounds what was heard)."""
    moved, other = key_prefix + "moved", key_prefix + "other"
    with stores.location.changes() as feed:
        quiet = await stores.location.write(Batch([], [Put(moved, b"m")], notify=False))
        assert isinstance(quiet, Applied)
        await put(stores, key_prefix + "witness", b"w")
        assert {key_prefix + "witness"} == await changed_until(
            feed, key_prefix + "witness", key_prefix
        )
        await stores.location.announce([moved, other])
        assert {moved, other} == await changed_until(feed, other, key_prefix)
        await stores.location.announce([])  # nothing to say: no statement, no hint
        await put(stores, key_prefix + "last", b"l")
        assert {key_prefix + "last"} == await changed_until(feed, key_prefix + "last", key_prefix)
    assert isinstance(await stores.location.read(other), Missing)
    assert quiet.versions[0] == (await found(stores, moved)).version
