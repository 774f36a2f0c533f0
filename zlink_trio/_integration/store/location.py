"""The Location Store: exact reads, conditional batches, snapshot scans and the change feed
(specs/store.md, STORE-2..STORE-9, STORE-25).

Keys travel as their UTF-8 bytes; values, versions and clocks come back as plain Python values
(``bytes``, ``int``, aware ``datetime``), so no driver type leaves this module.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from zlink_trio._integration.store import location_sql
from zlink_trio._integration.store.bridge import Database
from zlink_trio._integration.store.contract import (
    MAX_KEY_BYTES,
    Applied,
    Batch,
    Conflict,
    Delete,
    Expired,
    Found,
    IfMissing,
    Missing,
    Put,
    ScanPage,
    encode_text,
)
from zlink_trio._integration.store.notifications import ChangeFeed, ChangeSubscription, pack
from zlink_trio._integration.store.scans import ScanSnapshots


class LocationStore:
    """The store contract on PostgreSQL; every call ends within the operation timeout.

    A call that raises ``ZLinkError(UNAVAILABLE)`` or is cancelled may or may not have committed:
    read again to learn which (STORE-17).
    """

    def __init__(self, database: Database, scans: ScanSnapshots, feed: ChangeFeed) -> None:
        self._database = database
        self._scans = scans
        self._feed = feed

    async def read(self, key: str) -> Missing | Found:
        """The live record at ``key`` and the database clock, observed by one statement."""
        raw = encode_text(key, "a store key", MAX_KEY_BYTES)
        row = await self._database.fetch_one(location_sql.READ, {"key": raw})
        if row["version"] is None:
            return Missing(row["store_now"])
        return Found(bytes(row["value"]), row["version"], row["expires_at"], row["store_now"])

    async def write(self, batch: Batch) -> Applied | Conflict:
        """Apply every mutation if every condition holds, as one commit; else change nothing."""
        if not isinstance(batch, Batch):
            raise TypeError(f"write() takes a Batch, not {type(batch).__name__}")
        puts = [item for item in batch.mutations if isinstance(item, Put)]
        deletes = [item for item in batch.mutations if isinstance(item, Delete)]
        put_keys = [item.key.encode() for item in puts]
        delete_keys = [item.key.encode() for item in deletes]
        values = {
            "condition_keys": [item.key.encode() for item in batch.conditions],
            # 0 is never issued as a version, so it stands for "no live record".
            "condition_versions": [
                0 if isinstance(item, IfMissing) else item.expected for item in batch.conditions
            ],
            "put_keys": put_keys,
            "put_values": [item.value for item in puts],
            "put_retentions": [item.retention for item in puts],
            "delete_keys": delete_keys,
            "notices": pack(put_keys + delete_keys) if batch.notify else [],
        }
        row = await self._database.fetch_one(location_sql.WRITE, values)
        store_now: datetime = row["store_now"]
        if row["failed"] is not None:
            current = tuple(
                Missing(store_now)
                if version is None
                else Found(bytes(value), version, expires, store_now)
                for version, value, expires in zip(
                    row["seen_versions"], row["seen_values"], row["seen_expiries"], strict=True
                )
            )
            return Conflict(batch.conditions[row["failed"] - 1], store_now, current)
        issued = dict(zip(row["put_keys"] or (), row["put_versions"] or (), strict=True))
        return Applied(tuple(issued[key] for key in put_keys), store_now)

    async def announce(self, keys: Sequence[str]) -> None:
        """Notify ``keys`` as a committed batch would (STORE-50): for a writer whose batch was
        quiet and who tells the mesh later, once what it had to do first is done."""
        notices = pack([key.encode() for key in keys])
        if notices:
            await self._database.fetch_one(location_sql.ANNOUNCE, {"notices": notices})

    async def scan(self, prefix: str, limit: int, cursor: str | None = None) -> ScanPage | Expired:
        """One page of live records under ``prefix`` in key byte order; pass the page's cursor
        to continue on the same snapshot. ``Expired`` means: start again without a cursor."""
        return await self._scans.scan(prefix, limit, cursor)

    async def now(self) -> datetime:
        """The database clock, the one every expiry is judged by."""
        row = await self._database.fetch_one(location_sql.NOW, {})
        now: datetime = row["store_now"]
        return now

    def changes(self) -> ChangeSubscription:
        """Hints of changed keys from now on (``Changed`` / ``Resync``); close it when done."""
        return self._feed.subscribe()
