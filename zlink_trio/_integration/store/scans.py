"""Paged prefix scans on one snapshot (specs/store.md, STORE-7, STORE-8, STORE-9).

How the snapshot is kept: the first page opens a REPEATABLE READ, read-only transaction on a
pool connection and reads in it; if more records remain, the transaction stays open and later
pages run in that same transaction. PostgreSQL then shows every page the snapshot of the first
page, and ``now()`` (the transaction's start) stays the same, so expiry is judged at one instant
for the whole scan. A page after the first costs one round trip.

Why this and not the alternatives: exporting the snapshot (``pg_export_snapshot``) would let any
connection serve a page, but every page would pay BEGIN / SET TRANSACTION SNAPSHOT / COMMIT on
top of the read, while the exporting transaction must be held open anyway; keeping our own row
history ("as of" a version) would turn every write into two and needs a pruning policy. The cost
of holding: each open scan pins one pool connection and holds back vacuum, so open scans are
bounded in number (``max_open_scans``, the oldest is dropped first) and in time
(``scan_lifetime``). A cursor whose snapshot was dropped, that came from another process or
store, or that is not one of ours answers ``Expired``; the caller starts again.

The cursor is opaque text: base64url of a random 16-byte scan token and the next start key.
"""

from __future__ import annotations

import base64
import binascii
import secrets
from datetime import datetime
from typing import Any

import attrs
import trio

from zlink_trio._integration.store import location_sql
from zlink_trio._integration.store.bridge import Database, Row, Session
from zlink_trio._integration.store.contract import (
    MAX_KEY_BYTES,
    MAX_PAGE_BYTES,
    MAX_PAGE_LIMIT,
    Expired,
    Record,
    ScanPage,
    encode_text,
)

_TOKEN_BYTES = 16
# 0xFF never occurs in UTF-8, so it sorts after every key: the end of the empty prefix's range.
_AFTER_EVERY_KEY = b"\xff"


def prefix_range(prefix: bytes) -> tuple[bytes, bytes]:
    """``(start, end)`` such that a key starts with ``prefix`` iff ``start <= key < end``."""
    if not prefix:
        return b"", _AFTER_EVERY_KEY
    # The prefix is UTF-8, so its last byte is below 0xFF and can be incremented.
    return prefix, prefix[:-1] + bytes([prefix[-1] + 1])


@attrs.define(eq=False)
class _HeldScan:
    session: Session
    prefix: bytes
    deadline: float
    lock: trio.Lock = attrs.Factory(trio.Lock)
    released: trio.Event = attrs.Factory(trio.Event)


class ScanSnapshots:
    """The snapshots of scans still in progress, each held by one open transaction."""

    def __init__(
        self, database: Database, nursery: trio.Nursery, *, lifetime: float, capacity: int
    ) -> None:
        self._database = database
        self._nursery = nursery
        self._lifetime = lifetime
        self._capacity = capacity
        self._held: dict[bytes, _HeldScan] = {}

    @property
    def open_count(self) -> int:
        """How many snapshots are held now."""
        return len(self._held)

    async def scan(self, prefix: str, limit: int, cursor: str | None) -> ScanPage | Expired:
        """One page of live records whose key starts with ``prefix``, in key byte order."""
        raw_prefix = encode_text(prefix, "a scan prefix", MAX_KEY_BYTES, allow_empty=True)
        if type(limit) is not int:
            raise TypeError(f"a page limit must be an int, not {type(limit).__name__}")
        if not 1 <= limit <= MAX_PAGE_LIMIT:
            raise ValueError(f"a page limit must be 1..{MAX_PAGE_LIMIT}, got {limit}")
        if cursor is None:
            return await self._first_page(raw_prefix, limit)
        return await self._next_page(raw_prefix, limit, cursor)

    async def close_all(self) -> None:
        """Release every held snapshot (the store is closing)."""
        for token in list(self._held):
            await self._release(token)

    async def _first_page(self, prefix: bytes, limit: int) -> ScanPage:
        session = await self._database.begin(isolation="repeatable_read", readonly=True)
        start, end = prefix_range(prefix)
        try:
            records, next_start, store_now = await _read_page(session, start, end, limit)
        except BaseException:
            await session.close()
            raise
        if next_start is None:
            await session.close()
            return ScanPage(records, None, store_now)
        token = secrets.token_bytes(_TOKEN_BYTES)
        held = _HeldScan(session, prefix, trio.current_time() + self._lifetime)
        self._held[token] = held
        self._nursery.start_soon(self._expire_later, token, held)
        while len(self._held) > self._capacity:
            await self._release(next(iter(self._held)))
        return ScanPage(records, _encode_cursor(token, next_start), store_now)

    async def _next_page(self, prefix: bytes, limit: int, cursor: str) -> ScanPage | Expired:
        decoded = _decode_cursor(cursor)
        if decoded is None:
            return Expired()
        token, start = decoded
        held = self._held.get(token)
        if held is None or held.prefix != prefix:
            return Expired()
        _, end = prefix_range(prefix)
        if not prefix <= start < end:
            return Expired()
        if trio.current_time() >= held.deadline:
            # Past its lifetime the snapshot is gone even if the release task has not run yet.
            await self._release(token)
            return Expired()
        async with held.lock:
            if held.released.is_set():
                return Expired()
            try:
                records, next_start, store_now = await _read_page(held.session, start, end, limit)
            except BaseException:
                await self._release(token)
                raise
        if next_start is None:
            await self._release(token)
            return ScanPage(records, None, store_now)
        return ScanPage(records, _encode_cursor(token, next_start), store_now)

    async def _expire_later(self, token: bytes, held: _HeldScan) -> None:
        with trio.move_on_at(held.deadline):
            await held.released.wait()
        await self._release(token)

    async def _release(self, token: bytes) -> None:
        held = self._held.pop(token, None)
        if held is None:
            return
        held.released.set()
        with trio.CancelScope(shield=True):
            async with held.lock:
                await held.session.close()


async def _read_page(
    session: Session, start: bytes, end: bytes, limit: int
) -> tuple[tuple[Record, ...], bytes | None, datetime]:
    # One row more than asked tells whether another page follows.
    rows = await session.fetch(
        location_sql.SCAN_PAGE, {"start": start, "end": end, "limit": limit + 1}
    )
    store_now: datetime = rows[0]["store_now"]
    live = [row for row in rows if row["key"] is not None]
    records: list[Record] = []
    size = 0
    for row in live[:limit]:
        size += len(row["key"]) + len(row["value"])
        if records and size > MAX_PAGE_BYTES:
            break
        records.append(_record(row))
    if len(records) == len(live):
        return tuple(records), None, store_now
    # The smallest key after the last one returned: the same bytes followed by 0x00.
    return tuple(records), records[-1].key.encode() + b"\x00", store_now


def _record(row: Row) -> Record:
    key: bytes = row["key"]
    value: Any = row["value"]
    return Record(key.decode(), bytes(value), row["version"], row["expires_at"])


def _encode_cursor(token: bytes, start: bytes) -> str:
    return base64.urlsafe_b64encode(token + start).decode("ascii")


def _decode_cursor(cursor: object) -> tuple[bytes, bytes] | None:
    if type(cursor) is not str or not cursor:
        return None
    try:
        raw = base64.urlsafe_b64decode(cursor.encode("ascii"))
    except (binascii.Error, UnicodeEncodeError, ValueError):
        return None
    if len(raw) <= _TOKEN_BYTES:
        return None
    return raw[:_TOKEN_BYTES], raw[_TOKEN_BYTES:]
