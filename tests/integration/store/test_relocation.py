"""The Relocation Store (specs/store.md, STORE-20..STORE-24)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from zlink_trio._integration.store import (
    AlreadyStored,
    Batch,
    Found,
    Missing,
    Payload,
    PayloadConflict,
    Put,
    Renewed,
    Stored,
    Stores,
)

HOUR = timedelta(hours=1)


@pytest.mark.spec("STORE-20")
async def test_put_stores_then_recognises_identical_bytes(stores: Stores, key_prefix: str) -> None:
    """The first put is Stored; the same bytes again are AlreadyStored with the same expiry."""
    reference = key_prefix + "root"
    first = await stores.relocation.put(reference, b"\x00root\xff", HOUR)
    again = await stores.relocation.put(reference, b"\x00root\xff", 2 * HOUR)
    assert isinstance(first, Stored)
    assert first.store_now + HOUR == first.expires_at
    assert isinstance(again, AlreadyStored)
    assert first.expires_at == again.expires_at


@pytest.mark.spec("STORE-20")
async def test_put_of_different_bytes_is_a_conflict_and_keeps_the_first(
    stores: Stores, key_prefix: str
) -> None:
    """Bytes differing in the last byte conflict; the stored payload is unchanged."""
    reference = key_prefix + "root"
    await stores.relocation.put(reference, b"payload-1", HOUR)
    conflict = await stores.relocation.put(reference, b"payload-2", HOUR)
    read = await stores.relocation.read(reference)
    assert isinstance(conflict, PayloadConflict)
    assert isinstance(read, Payload)
    assert b"payload-1" == read.payload


@pytest.mark.spec("STORE-20")
async def test_references_compare_byte_exactly(stores: Stores, key_prefix: str) -> None:
    """References differing only in case are different records."""
    assert isinstance(await stores.relocation.put(key_prefix + "r", b"lower", HOUR), Stored)
    assert isinstance(await stores.relocation.put(key_prefix + "R", b"upper", HOUR), Stored)


@pytest.mark.spec("STORE-21", "STORE-22")
async def test_read_and_renew_keep_the_bytes(stores: Stores, key_prefix: str) -> None:
    """Renew moves the expiry to store_now + retention and leaves the payload as stored."""
    reference = key_prefix + "root"
    assert isinstance(await stores.relocation.read(reference), Missing)
    assert isinstance(await stores.relocation.renew(reference, HOUR), Missing)
    stored = await stores.relocation.put(reference, b"bytes", HOUR)
    renewed = await stores.relocation.renew(reference, 3 * HOUR)
    read = await stores.relocation.read(reference)
    assert isinstance(stored, Stored)
    assert isinstance(renewed, Renewed)
    assert renewed.store_now + 3 * HOUR == renewed.expires_at
    assert Payload(b"bytes", renewed.expires_at, read.store_now) == read


@pytest.mark.spec("STORE-23")
async def test_delete_is_idempotent(stores: Stores, key_prefix: str) -> None:
    """Deleting twice, or deleting what never existed, succeeds and leaves nothing."""
    reference = key_prefix + "root"
    await stores.relocation.put(reference, b"bytes", HOUR)
    await stores.relocation.delete(reference)
    await stores.relocation.delete(reference)
    await stores.relocation.delete(key_prefix + "never")
    assert isinstance(await stores.relocation.read(reference), Missing)
    assert isinstance(await stores.relocation.put(reference, b"new", HOUR), Stored)


@pytest.mark.spec("STORE-24")
async def test_relocation_records_are_separate_from_location_records(
    stores: Stores, key_prefix: str
) -> None:
    """The same text as a location key and a relocation reference names two records."""
    name = key_prefix + "shared-name"
    await stores.location.write(Batch([], [Put(name, b"location")]))
    stored = await stores.relocation.put(name, b"relocation", HOUR)
    location = await stores.location.read(name)
    assert isinstance(stored, Stored)
    assert isinstance(location, Found)
    assert b"location" == location.value
    await stores.relocation.delete(name)
    assert isinstance(await stores.location.read(name), Found)


@pytest.mark.spec("STORE-20", "STORE-11")
async def test_bad_relocation_arguments_are_refused(stores: Stores) -> None:
    """An empty reference, a non-positive retention or a str payload is refused."""
    with pytest.raises(ValueError):
        await stores.relocation.put("", b"x", HOUR)
    with pytest.raises(ValueError):
        await stores.relocation.put("r", b"x", timedelta(0))
    with pytest.raises(TypeError):
        await stores.relocation.put("r", "x", HOUR)  # type: ignore[arg-type]  # the point
