"""The change feed: notifications and the polling fallback (specs/store.md, STORE-25, STORE-26,
STORE-40)."""

from __future__ import annotations

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
    Missing,
    Put,
    Resync,
    StoreConfig,
    Stores,
    open_stores,
)
from zlink_trio._integration.store.bridge import open_database
from zlink_trio._integration.store.notifications import (
    MAX_PENDING_KEYS,
    NOTICE_CHARS,
    ChangeFeed,
    pack,
)
from zlink_trio._integration.store.statements import Statement

_TERMINATE_OTHERS = Statement(
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid <> pg_backend_pid() "
    "AND datname = current_database() AND application_name = 'zlink_trio'",
    (),
)


async def _next_change_of(feed: ChangeSubscription, key: str) -> Changed:
    async for event in feed:
        if isinstance(event, Changed) and key in event.keys:
            return event
    raise AssertionError("the feed ended")


class _CachedRead:
    """What a cache does with the feed: keep one read, re-read when told something changed."""

    def __init__(self, stores: Stores, key: str) -> None:
        self.stores = stores
        self.key = key
        self.value: Missing | Found | None = None

    async def refresh_until(self, feed: ChangeSubscription, wanted: bytes) -> list[object]:
        events: list[object] = []
        self.value = await self.stores.location.read(self.key)
        async for event in feed:
            events.append(event)
            if isinstance(event, Resync) or self.key in event.keys:
                self.value = await self.stores.location.read(self.key)
            if isinstance(self.value, Found) and wanted == self.value.value:
                return events
        raise AssertionError("the feed ended")


@pytest.mark.spec("STORE-25")
async def test_a_committed_batch_notifies_its_keys(stores: Stores, key_prefix: str) -> None:
    """A subscriber hears Changed for every key a committed batch wrote or deleted."""
    a, b = key_prefix + "a", key_prefix + "\u0000b"
    with stores.location.changes() as feed:
        applied = await stores.location.write(Batch([], [Put(a, b"1"), Put(b, b"2")]))
        assert isinstance(applied, Applied)
        seen: set[str] = set()
        with trio.fail_after(10):
            async for event in feed:
                if isinstance(event, Changed):
                    seen |= event.keys
                if {a, b} <= seen:
                    break


@pytest.mark.spec("STORE-25")
async def test_a_committed_delete_notifies_its_key(stores: Stores, key_prefix: str) -> None:
    """A batch that only deletes a key announces that key too."""
    key = key_prefix + "gone"
    with stores.location.changes() as feed:
        await stores.location.write(Batch([], [Put(key, b"1")]))
        with trio.fail_after(10):
            await _next_change_of(feed, key)
        deleted = await stores.location.write(Batch([], [Delete(key)]))
        assert isinstance(deleted, Applied)
        with trio.fail_after(10):
            await _next_change_of(feed, key)


@pytest.mark.spec("STORE-25")
async def test_a_conflicting_batch_notifies_nothing(stores: Stores, key_prefix: str) -> None:
    """Only committed changes are announced: a Conflict's keys are not, a later write's are."""
    taken, witness = key_prefix + "taken", key_prefix + "witness"
    with stores.location.changes() as feed:
        # Hear the first write's own notice before the conflict, so it cannot arrive late and
        # be folded into the event that carries the witness.
        await stores.location.write(Batch([], [Put(taken, b"1")]))
        with trio.fail_after(10):
            await _next_change_of(feed, taken)
        conflict = await stores.location.write(Batch([IfMissing(taken)], [Put(taken, b"2")]))
        assert isinstance(conflict, Conflict)
        await stores.location.write(Batch([], [Put(witness, b"w")]))
        with trio.fail_after(10):
            event = await _next_change_of(feed, witness)
    assert taken not in event.keys


@pytest.mark.spec("STORE-26", "DEC-16")
async def test_a_cache_follows_changes_with_notifications(stores: Stores, key_prefix: str) -> None:
    """With notifications on, a cache re-reading on each event sees another writer's change."""
    key = key_prefix + "cached"
    await stores.location.write(Batch([], [Put(key, b"old")]))
    cache = _CachedRead(stores, key)
    with stores.location.changes() as feed:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(stores.location.write, Batch([], [Put(key, b"new")]))
            with trio.fail_after(10):
                events = await cache.refresh_until(feed, b"new")
    assert any(isinstance(event, Changed) for event in events)


@pytest.mark.spec("STORE-26", "DEC-16")
async def test_a_cache_follows_changes_with_polling_alone(store_dsn: str, key_prefix: str) -> None:
    """With notifications off, Resync ticks alone bring the same cache to the new value."""
    config = StoreConfig(dsn=store_dsn, notifications=False, poll_interval=0.05)
    async with open_stores(config, environ={}) as stores:
        key = key_prefix + "polled"
        await stores.location.write(Batch([], [Put(key, b"old")]))
        cache = _CachedRead(stores, key)
        with stores.location.changes() as feed:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stores.location.write, Batch([], [Put(key, b"new")]))
                with trio.fail_after(10):
                    events = await cache.refresh_until(feed, b"new")
    assert events
    assert all(isinstance(event, Resync) for event in events)


@pytest.mark.spec("STORE-26")
async def test_a_subscriber_too_far_behind_is_told_to_resync() -> None:
    """Up to 10,000 pending keys arrive as Changed; one more turns them into one Resync."""
    feed = ChangeFeed()
    with feed.subscribe() as caught_up, feed.subscribe() as behind:
        for number in range(MAX_PENDING_KEYS):
            feed.publish_key(f"k{number}")
        event = await caught_up.__anext__()
        assert isinstance(event, Changed)
        assert MAX_PENDING_KEYS == len(event.keys)
        feed.publish_key("one more")
        assert Resync() == await behind.__anext__()
        feed.publish_key("after")
        assert Changed(frozenset({"after"})) == await behind.__anext__()


@pytest.mark.spec("STORE-26", "DEC-16")
async def test_a_lost_listener_reconnects_and_says_resync(stores: Stores, key_prefix: str) -> None:
    """When the server drops the listening connection, the feed listens again and tells every
    subscriber Resync (notifications may have been lost meanwhile); hints follow again."""
    # The store's one idle connection listens (STORE-45); a pool of its own ends it.
    async with open_database(
        stores.dsn, min_size=1, max_size=2, operation_timeout=10, startup_timeout=30
    ) as killer:
        with stores.location.changes() as feed:
            await killer.fetch(_TERMINATE_OTHERS, {})
            with trio.fail_after(10):
                event = await feed.__anext__()
            assert Resync() == event
            key = key_prefix + "after"
            await stores.location.write(Batch([], [Put(key, b"1")]))
            with trio.fail_after(10):
                await _next_change_of(feed, key)


@pytest.mark.spec("STORE-40")
def test_keys_are_packed_into_few_payloads_under_the_limit() -> None:
    """Packing keeps every key, in order, and no payload over the limit; a key of the largest
    size fits alone, and 512 keys of a release batch take a handful of payloads."""
    small = [f"m/mesh/spot/room-{number}".encode() for number in range(512)]
    largest = "é".encode() * 512  # 1,024 bytes, the longest key
    keys = [b"\x00nul", largest, *small, largest, largest, largest]
    payloads = pack(keys)
    assert all(len(payload) <= NOTICE_CHARS for payload in payloads)
    assert [bytes.fromhex(part) for p in payloads for part in p.split(",")] == keys
    assert len(pack(small)) <= 8
    assert [] == pack([])


@pytest.mark.spec("STORE-40")
async def test_a_packed_payload_announces_each_key_and_a_bad_one_resyncs() -> None:
    """A payload of several keys publishes every one; one that is not ours is a Resync."""
    feed = ChangeFeed()
    with feed.subscribe() as subscription:
        feed._publish_payload(",".join(pack([b"a", b"b\x00", b"c"])[0].split(",")))
        assert Changed(frozenset({"a", "b\u0000", "c"})) == await subscription.__anext__()
        feed._publish_payload("6162,not hex")
        assert Resync() == await subscription.__anext__()


@pytest.mark.spec("STORE-40", "STORE-25")
async def test_a_large_batch_is_announced_in_few_notifications(
    store_dsn: str, key_prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """600 keys written in one batch reach a subscriber, every one, in a few notifications."""
    received: list[str] = []
    publish = ChangeFeed._publish_payload

    def counting(feed: ChangeFeed, payload: str) -> None:
        received.append(payload)
        publish(feed, payload)

    monkeypatch.setattr(ChangeFeed, "_publish_payload", counting)
    keys = {f"{key_prefix}{number:04d}" for number in range(600)}
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        with stores.location.changes() as feed:
            written = await stores.location.write(
                Batch([], [Put(key, b"v") for key in sorted(keys)])
            )
            assert isinstance(written, Applied)
            seen: set[str] = set()
            with trio.fail_after(10):
                async for event in feed:
                    if isinstance(event, Changed):
                        seen |= event.keys & keys
                    if seen == keys:
                        break
    prefix = key_prefix.encode()
    ours = [p for p in received if bytes.fromhex(p.split(",")[0]).startswith(prefix)]
    assert 0 < len(ours) <= 10, len(ours)
