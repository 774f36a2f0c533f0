"""The Relocation Store: recovery records put by framework-issued reference (specs/store.md,
STORE-20..STORE-24; DEC-6, DEC-7).

It keeps what recovery needs (for example the root of a cold activation in progress), never a
relocation payload: relocation state travels source to target over the mesh (DEC-6). Its own
table on the same server; each call is one statement judged on the database clock.

A put on a reference holding identical bytes answers ``AlreadyStored`` and leaves the expiry as
it was (``renew`` is the one way to extend it); a put on an expired reference stores afresh.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from sqlalchemy import (
    Interval,
    LargeBinary,
    and_,
    bindparam,
    delete,
    func,
    literal_column,
    select,
    update,
)
from sqlalchemy.dialects.postgresql import insert as pg_insert

from zlink_trio._integration.store.bridge import Database
from zlink_trio._integration.store.contract import (
    MAX_PAYLOAD_BYTES,
    MAX_REFERENCE_BYTES,
    AlreadyStored,
    Missing,
    Payload,
    PayloadConflict,
    Renewed,
    Stored,
    check_retention,
    encode_text,
)
from zlink_trio._integration.store.schema import relocation_record
from zlink_trio._integration.store.statements import Statement

_table = relocation_record
_now = func.now()
_reference = bindparam("reference", type_=LargeBinary)
_retention = bindparam("retention", type_=Interval)


def _put() -> Statement:
    payload = bindparam("payload", type_=LargeBinary)
    current = (
        select(_table.c.payload, _table.c.expires_at)
        .where(_table.c.reference == _reference, _table.c.expires_at > _now)
        .cte("current_record")
    )
    insert = pg_insert(_table).values(
        reference=_reference, payload=payload, expires_at=_now + _retention
    )
    stored = (
        insert.on_conflict_do_update(
            index_elements=[_table.c.reference],
            set_={"payload": insert.excluded.payload, "expires_at": insert.excluded.expires_at},
            # Only an expired record may be replaced; a live one is compared instead.
            where=_table.c.expires_at <= _now,
        )
        .returning(_table.c.expires_at)
        .cte("stored")
    )
    query = select(
        _now.label("store_now"),
        select(stored.c.expires_at).scalar_subquery().label("stored_until"),
        select(current.c.expires_at).scalar_subquery().label("current_until"),
        # Byte-exact comparison in the database, so the live payload never travels back.
        select(current.c.payload == payload).scalar_subquery().label("same"),
    )
    return Statement.compile(query)


def _read() -> Statement:
    one_row = select(literal_column("1").label("one")).subquery("one_row")
    joined = one_row.outerjoin(
        _table, and_(_table.c.reference == _reference, _table.c.expires_at > _now)
    )
    query = select(_now.label("store_now"), _table.c.payload, _table.c.expires_at).select_from(
        joined
    )
    return Statement.compile(query)


def _renew() -> Statement:
    renewed = (
        update(_table)
        .where(_table.c.reference == _reference, _table.c.expires_at > _now)
        .values(expires_at=_now + _retention)
        .returning(_table.c.expires_at)
        .cte("renewed")
    )
    query = select(
        _now.label("store_now"),
        select(renewed.c.expires_at).scalar_subquery().label("expires_at"),
    )
    return Statement.compile(query)


_PUT = _put()
_READ = _read()
_RENEW = _renew()
_DELETE = Statement.compile(delete(_table).where(_table.c.reference == _reference))


def _reference_bytes(reference: str) -> bytes:
    return encode_text(reference, "a relocation reference", MAX_REFERENCE_BYTES)


class RelocationStore:
    """Recovery records by reference; every call ends within the operation timeout and a
    call that fails with ``UNAVAILABLE`` or is cancelled is settled by reading again."""

    def __init__(self, database: Database) -> None:
        self._database = database

    async def put(
        self, reference: str, payload: bytes, retention: timedelta
    ) -> Stored | AlreadyStored | PayloadConflict:
        """Store ``payload`` at ``reference`` unless a live record is already there."""
        raw = _reference_bytes(reference)
        if type(payload) is not bytes:
            raise TypeError(f"a payload must be bytes, not {type(payload).__name__}")
        if len(payload) > MAX_PAYLOAD_BYTES:
            raise ValueError(f"a payload is at most {MAX_PAYLOAD_BYTES} bytes, got {len(payload)}")
        check_retention(retention, optional=False)
        row = await self._database.fetch_one(
            _PUT, {"reference": raw, "payload": payload, "retention": retention}
        )
        store_now: datetime = row["store_now"]
        if row["stored_until"] is not None:
            return Stored(row["stored_until"], store_now)
        if row["same"]:
            return AlreadyStored(row["current_until"], store_now)
        return PayloadConflict(store_now)

    async def read(self, reference: str) -> Payload | Missing:
        """The live record at ``reference``, or ``Missing`` when absent or expired."""
        row = await self._database.fetch_one(_READ, {"reference": _reference_bytes(reference)})
        if row["expires_at"] is None:
            return Missing(row["store_now"])
        return Payload(bytes(row["payload"]), row["expires_at"], row["store_now"])

    async def renew(self, reference: str, retention: timedelta) -> Renewed | Missing:
        """Make a live record expire ``retention`` from now on the database clock."""
        raw = _reference_bytes(reference)
        check_retention(retention, optional=False)
        row = await self._database.fetch_one(_RENEW, {"reference": raw, "retention": retention})
        if row["expires_at"] is None:
            return Missing(row["store_now"])
        return Renewed(row["expires_at"], row["store_now"])

    async def delete(self, reference: str) -> None:
        """Remove the record at ``reference``; succeeds when there is none."""
        await self._database.fetch(_DELETE, {"reference": _reference_bytes(reference)})
