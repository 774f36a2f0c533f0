"""Expiry judged by the database clock (specs/store.md, STORE-6, STORE-21, STORE-22)."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Found,
    IfMissing,
    IfVersion,
    Missing,
    Payload,
    Put,
    Renewed,
    Stored,
    Stores,
)

SHORT = timedelta(milliseconds=50)


async def _wait_for_database_clock(stores: Stores, moment: datetime) -> None:
    # Expiry is the passage of database time itself: read the database clock and let exactly
    # the missing part (at most the 50 ms retention) pass; the tests then check store_now.
    now = await stores.location.now()
    await trio.sleep(max(0.0, (moment - now).total_seconds()) + 0.002)


@pytest.mark.spec("STORE-6", "DEC-14")
async def test_a_record_expires_at_commit_time_plus_retention(
    stores: Stores, key_prefix: str
) -> None:
    """expires_at is the commit's store_now plus the retention; the record is live until then."""
    key = key_prefix + "lease"
    applied = await stores.location.write(Batch([], [Put(key, b"v", timedelta(hours=1))]))
    found = await stores.location.read(key)
    assert isinstance(applied, Applied)
    assert isinstance(found, Found)
    assert applied.store_now + timedelta(hours=1) == found.expires_at


@pytest.mark.spec("STORE-6", "DEC-14")
async def test_an_expired_record_is_missing_everywhere(stores: Stores, key_prefix: str) -> None:
    """Past its expiry on the database clock a record reads Missing, fails IfVersion, satisfies
    IfMissing and is not scanned, with no sweeper involved."""
    key = key_prefix + "short"
    applied = await stores.location.write(Batch([], [Put(key, b"v", SHORT)]))
    assert isinstance(applied, Applied)
    await _wait_for_database_clock(stores, applied.store_now + SHORT)
    read = await stores.location.read(key)
    page = await stores.location.scan(key_prefix, 10)
    fenced = await stores.location.write(
        Batch([IfVersion(key, applied.versions[0])], [Put(key, b"old owner")])
    )
    retaken = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"new owner")]))
    assert isinstance(read, Missing)
    assert read.store_now >= applied.store_now + SHORT
    assert () == page.records  # type: ignore[union-attr]  # a first page never expires
    assert isinstance(fenced, Conflict)
    assert isinstance(retaken, Applied)
    assert retaken.versions[0] != applied.versions[0]


@pytest.mark.spec("STORE-21", "STORE-22")
async def test_relocation_records_expire_on_the_database_clock(
    stores: Stores, key_prefix: str
) -> None:
    """A relocation record past its retention reads Missing and cannot be renewed."""
    reference = key_prefix + "root"
    stored = await stores.relocation.put(reference, b"root", SHORT)
    assert isinstance(stored, Stored)
    assert isinstance(await stores.relocation.read(reference), Payload)
    await _wait_for_database_clock(stores, stored.expires_at)
    assert isinstance(await stores.relocation.read(reference), Missing)
    assert isinstance(await stores.relocation.renew(reference, SHORT), Missing)
    again = await stores.relocation.put(reference, b"another root", timedelta(hours=1))
    assert isinstance(again, Stored)
    renewed = await stores.relocation.renew(reference, timedelta(hours=2))
    assert isinstance(renewed, Renewed)
    assert renewed.store_now + timedelta(hours=2) == renewed.expires_at
