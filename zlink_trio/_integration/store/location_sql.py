"""The Location Store's four statements, built with SQLAlchemy Core (specs/store.md, STORE-2,
STORE-3, STORE-5, STORE-6, STORE-7, STORE-15).

Each store call is one statement, so it is one round trip and its own transaction; the pool's
connections run at SERIALIZABLE, which makes a conditional batch behave as if batches ran one
at a time (a lost race is a serialization failure, retried by the bridge, never a Conflict).

- ``READ``: the record and ``now()`` of the same statement, expiry judged against that ``now()``.
- ``WRITE``: a conditional batch. Conditions arrive as two arrays (key, expected version, with 0
  meaning "no live record"), so every batch shape shares one prepared statement. The verdict is
  the lowest failing condition index, or NULL; the delete, upsert and notify sub-statements all
  run only when it is NULL, so a batch commits everything or nothing.
- ``ANNOUNCE``: notifications of keys a quiet batch wrote, sent later by its writer (STORE-50);
  it writes nothing, so its commit waits for no disk.
- ``SCAN_PAGE``: records with ``start <= key < end`` in key byte order, live at ``now()``; run
  inside a held REPEATABLE READ transaction, so every page sees the first page's snapshot and
  the same ``now()``.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import (
    BigInteger,
    Interval,
    LargeBinary,
    Text,
    and_,
    any_,
    bindparam,
    column,
    delete,
    func,
    literal_column,
    or_,
    select,
    true,
)
from sqlalchemy.dialects.postgresql import ARRAY, aggregate_order_by
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.sql.elements import ColumnClause

from zlink_trio._integration.store.schema import (
    NOTIFY_CHANNEL,
    location_record,
    version_sequence,
)
from zlink_trio._integration.store.statements import Statement

_record = location_record
_now = func.now()
_CHANNEL: ColumnClause[Any] = literal_column(f"'{NOTIFY_CHANNEL}'")
_live = or_(_record.c.expires_at.is_(None), _record.c.expires_at > _now)


def _read() -> Statement:
    one_row = select(literal_column("1").label("one")).subquery("one_row")
    joined = one_row.outerjoin(
        _record, and_(_record.c.key == bindparam("key", type_=LargeBinary), _live)
    )
    query = select(
        _now.label("store_now"),
        _record.c.value,
        _record.c.version,
        _record.c.expires_at,
    ).select_from(joined)
    return Statement.compile(query)


def _write() -> Statement:
    conditions = (
        func.unnest(
            bindparam("condition_keys", type_=ARRAY(LargeBinary)),
            bindparam("condition_versions", type_=ARRAY(BigInteger)),
        )
        .table_valued(
            column("key", LargeBinary), column("expected", BigInteger), with_ordinality="ordinal"
        )
        .render_derived(name="condition")
    )
    current_version = (
        select(_record.c.version).where(_record.c.key == conditions.c.key, _live).scalar_subquery()
    )
    verdict = (
        select(
            func.min(conditions.c.ordinal)
            .filter(func.coalesce(current_version, literal_column("0")) != conditions.c.expected)
            .label("failed")
        )
        .select_from(conditions)
        .cte("verdict")
    )
    failed = select(verdict.c.failed).scalar_subquery()

    deleted = (
        delete(_record)
        .where(
            _record.c.key == any_(bindparam("delete_keys", type_=ARRAY(LargeBinary))),
            failed.is_(None),
        )
        .returning(_record.c.key)
        .cte("deleted")
    )

    puts = (
        func.unnest(
            bindparam("put_keys", type_=ARRAY(LargeBinary)),
            bindparam("put_values", type_=ARRAY(LargeBinary)),
            bindparam("put_retentions", type_=ARRAY(Interval)),
        )
        .table_valued(
            column("key", LargeBinary),
            column("value", LargeBinary),
            column("retention", Interval),
        )
        .render_derived(name="put")
    )
    rows = select(
        puts.c.key,
        puts.c.value,
        version_sequence.next_value(),
        _now + puts.c.retention,
    ).where(failed.is_(None))
    upsert = pg_insert(_record).from_select(["key", "value", "version", "expires_at"], rows)
    written = (
        upsert.on_conflict_do_update(
            index_elements=[_record.c.key],
            set_={
                "value": upsert.excluded.value,
                "version": upsert.excluded.version,
                "expires_at": upsert.excluded.expires_at,
            },
        )
        .returning(_record.c.key, _record.c.version)
        .cte("written")
    )

    # The changed keys, packed by the caller into a few payloads (notifications.py ``pack``).
    notices = (
        func.unnest(bindparam("notices", type_=ARRAY(Text)))
        .table_valued(column("payload", Text))
        .render_derived(name="notices")
    )
    notified = (
        select(func.pg_notify(_CHANNEL, notices.c.payload))
        .select_from(notices)
        .where(failed.is_(None))
        .cte("notified")
    )

    # What a failed batch saw at its condition keys, in condition order (STORE-41): the caller
    # that lost learns the current records without a second round trip.
    looked_at = (
        func.unnest(bindparam("condition_keys", type_=ARRAY(LargeBinary)))
        .table_valued(column("key", LargeBinary), with_ordinality="ordinal")
        .render_derived(name="looked_at")
    )
    in_order = looked_at.c.ordinal
    seen = (
        select(
            func.array_agg(aggregate_order_by(_record.c.version, in_order)).label("versions"),
            func.array_agg(aggregate_order_by(_record.c.value, in_order)).label("values"),
            func.array_agg(aggregate_order_by(_record.c.expires_at, in_order)).label("expiries"),
        )
        .select_from(looked_at.outerjoin(_record, and_(_record.c.key == looked_at.c.key, _live)))
        .where(failed.is_not(None))
        .cte("seen")
    )

    query = select(
        failed.label("failed"),
        select(seen.c.versions).scalar_subquery().label("seen_versions"),
        select(seen.c["values"]).scalar_subquery().label("seen_values"),
        select(seen.c.expiries).scalar_subquery().label("seen_expiries"),
        _now.label("store_now"),
        select(func.array_agg(written.c.key)).scalar_subquery().label("put_keys"),
        select(func.array_agg(written.c.version)).scalar_subquery().label("put_versions"),
        select(func.count()).select_from(deleted).scalar_subquery().label("deleted"),
        select(func.count()).select_from(notified).scalar_subquery().label("notified"),
    )
    return Statement.compile(query)


def _announce() -> Statement:
    notices = (
        func.unnest(bindparam("notices", type_=ARRAY(Text)))
        .table_valued(column("payload", Text))
        .render_derived(name="notices")
    )
    return Statement.compile(
        select(func.count(func.pg_notify(_CHANNEL, notices.c.payload)).label("sent")).select_from(
            notices
        )
    )


def _scan_page() -> Statement:
    page = (
        select(_record.c.key, _record.c.value, _record.c.version, _record.c.expires_at)
        .where(
            _record.c.key >= bindparam("start", type_=LargeBinary),
            _record.c.key < bindparam("end", type_=LargeBinary),
            _live,
        )
        .order_by(_record.c.key)
        .limit(bindparam("limit", type_=BigInteger))
        .subquery("page")
        .lateral()
    )
    # The outer join on a one-row table keeps one row even for an empty page, so the page
    # always reports the snapshot's clock.
    one_row = select(literal_column("1").label("one")).subquery("one_row")
    query = (
        select(_now.label("store_now"), page.c.key, page.c.value, page.c.version, page.c.expires_at)
        .select_from(one_row.outerjoin(page, true()))
        .order_by(page.c.key)
    )
    return Statement.compile(query)


def _now_only() -> Statement:
    return Statement.compile(select(_now.label("store_now")))


READ = _read()
WRITE = _write()
ANNOUNCE = _announce()
SCAN_PAGE = _scan_page()
NOW = _now_only()

WARM_UP: tuple[tuple[Statement, dict[str, Any]], ...] = (
    (WRITE, {name: [] for name in WRITE.names}),  # every parameter an array: an empty batch
    (READ, {"key": b""}),
    (NOW, {}),
    (ANNOUNCE, {name: [] for name in ANNOUNCE.names}),
)
"""The hot statements with arguments that change nothing (an empty batch, a key no record has,
no notices): a connection the pool opens runs each once (bridge.py Rule 6, STORE-51)."""
