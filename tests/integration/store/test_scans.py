"""Paged prefix scans on one snapshot (specs/store.md, STORE-7, STORE-8, STORE-9)."""

from __future__ import annotations

import pytest
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Delete,
    Expired,
    Put,
    Record,
    ScanPage,
    StoreConfig,
    Stores,
    open_stores,
)


async def _put_all(stores: Stores, keys: list[str]) -> None:
    result = await stores.location.write(Batch([], [Put(key, key.encode()) for key in keys]))
    assert isinstance(result, Applied)


async def _page(stores: Stores, prefix: str, limit: int, cursor: str | None = None) -> ScanPage:
    page = await stores.location.scan(prefix, limit, cursor)
    assert isinstance(page, ScanPage)
    return page


@pytest.mark.spec("STORE-7", "STORE-1")
async def test_pages_list_the_prefix_in_key_byte_order(stores: Stores, key_prefix: str) -> None:
    """Pages of 2 walk every key under the prefix once, in UTF-8 byte order, and stop."""
    names = ["b", "a", "\u00e9", "Z", "a\u0000", "ab", "\U0001f600"]
    await _put_all(stores, [key_prefix + name for name in names])
    await _put_all(stores, [key_prefix[:-1] + "0", key_prefix[:-1] + "."])  # just outside
    keys: list[str] = []
    page = await _page(stores, key_prefix, 2)
    keys += [record.key for record in page.records]
    while page.cursor is not None:
        page = await _page(stores, key_prefix, 2, page.cursor)
        keys += [record.key for record in page.records]
    expected = sorted((key_prefix + name for name in names), key=lambda key: key.encode())
    assert expected == keys


@pytest.mark.spec("STORE-7")
async def test_an_empty_prefix_scans_from_the_first_key(stores: Stores, key_prefix: str) -> None:
    """The empty prefix covers every key; a page holds at most `limit` records."""
    await _put_all(stores, [key_prefix + "x"])
    page = await _page(stores, "", 1)
    assert 1 == len(page.records)
    assert page.cursor is not None


@pytest.mark.spec("STORE-7")
async def test_a_page_holds_at_most_four_mib_of_keys_and_values(
    stores: Stores, key_prefix: str
) -> None:
    """Five 1 MiB values with a limit of 10: a page stops before 4 MiB, the rest follows."""
    keys = [f"{key_prefix}{n}" for n in range(5)]
    for key in keys:  # one batch each: a batch holds at most 4 MiB
        result = await stores.location.write(Batch([], [Put(key, bytes(1024 * 1024))]))
        assert isinstance(result, Applied)
    sizes: list[int] = []
    seen: list[str] = []
    page = await _page(stores, key_prefix, 10)
    while True:
        sizes.append(sum(len(r.key.encode()) + len(r.value) for r in page.records))
        seen += [record.key for record in page.records]
        if page.cursor is None:
            break
        page = await _page(stores, key_prefix, 10, page.cursor)
    assert keys == seen
    assert len(sizes) > 1
    assert all(size <= 4 * 1024 * 1024 for size in sizes)


@pytest.mark.spec("STORE-8", "DEC-15")
async def test_later_pages_stay_on_the_first_pages_snapshot(
    stores: Stores, key_prefix: str
) -> None:
    """Keys added, changed and deleted after page one do not show in later pages."""
    keys = [f"{key_prefix}{n:02d}" for n in range(6)]
    await _put_all(stores, keys)
    first = await _page(stores, key_prefix, 2)
    changed = await stores.location.write(
        Batch(
            [],
            [
                Delete(keys[3]),
                Put(keys[4], b"changed"),
                Put(key_prefix + "03a", b"new"),
                Put(key_prefix + "99", b"new"),
            ],
        )
    )
    assert isinstance(changed, Applied)
    records: list[Record] = list(first.records)
    page = first
    while page.cursor is not None:
        page = await _page(stores, key_prefix, 2, page.cursor)
        assert first.store_now == page.store_now
        records += page.records
    assert keys == [record.key for record in records]
    assert [key.encode() for key in keys] == [record.value for record in records]
    fresh = await _page(stores, key_prefix, 100)
    assert key_prefix + "99" in [record.key for record in fresh.records]


@pytest.mark.spec("STORE-9")
async def test_a_scan_pushed_out_by_newer_scans_answers_expired(
    store_dsn: str, key_prefix: str
) -> None:
    """With max_open_scans=2 a third open scan drops the oldest snapshot."""
    config = StoreConfig(dsn=store_dsn, max_open_scans=2, pool_max_size=4)
    async with open_stores(config, environ={}) as stores:
        await _put_all(stores, [key_prefix + name for name in "abc"])
        oldest, middle, newest = [await _page(stores, key_prefix, 1) for _ in range(3)]
        assert isinstance(await stores.location.scan(key_prefix, 1, oldest.cursor), Expired)
        assert isinstance(await stores.location.scan(key_prefix, 1, middle.cursor), ScanPage)
        assert isinstance(await stores.location.scan(key_prefix, 1, newest.cursor), ScanPage)


@pytest.mark.spec("STORE-9")
async def test_a_scan_past_its_lifetime_answers_expired(store_dsn: str, key_prefix: str) -> None:
    """After scan_lifetime the snapshot is released and its cursor answers Expired."""
    config = StoreConfig(dsn=store_dsn, scan_lifetime=0.2)
    async with open_stores(config, environ={}) as stores:
        await _put_all(stores, [key_prefix + name for name in "ab"])
        first = await _page(stores, key_prefix, 1)
        assert 1 == stores.scans.open_count
        # The lifetime is the passage of time itself, so that is what the test lets happen.
        await trio.sleep(0.25)
        assert isinstance(await stores.location.scan(key_prefix, 1, first.cursor), Expired)
        assert 0 == stores.scans.open_count


@pytest.mark.spec("STORE-9")
@pytest.mark.parametrize("cursor", ["", "not base64!", "AAAA", "A" * 40])
async def test_a_cursor_we_did_not_issue_answers_expired(
    stores: Stores, key_prefix: str, cursor: str
) -> None:
    """A malformed or unknown cursor is Expired, not an error."""
    assert isinstance(await stores.location.scan(key_prefix, 1, cursor), Expired)


@pytest.mark.spec("STORE-9")
async def test_a_cursor_used_with_another_prefix_answers_expired(
    stores: Stores, key_prefix: str
) -> None:
    """A cursor belongs to its prefix; with another it is Expired and the scan stays usable."""
    await _put_all(stores, [key_prefix + name for name in "ab"])
    first = await _page(stores, key_prefix, 1)
    assert isinstance(await stores.location.scan(key_prefix + "a", 1, first.cursor), Expired)
    assert isinstance(await stores.location.scan(key_prefix, 1, first.cursor), ScanPage)
