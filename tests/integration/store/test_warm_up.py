"""A connection the pool opens has run the store's hot statements once, so the first call on it
neither parses its statement nor has the server plan it (specs/store.md STORE-51; bridge.py
Rule 6). The server shows it in ``pg_prepared_statements``: the connection's named statements
and how often each used its generic plan."""

from __future__ import annotations

from collections import defaultdict

import pytest

from zlink_trio._integration.store import Batch, Put, StoreConfig, Stores, open_stores
from zlink_trio._integration.store.bridge import Database
from zlink_trio._integration.store.location_sql import WARM_UP, WRITE
from zlink_trio._integration.store.statements import Statement

_PREPARED = Statement("SELECT statement, generic_plans FROM pg_prepared_statements", ())


async def _plans(database: Database) -> dict[str, list[int]]:
    """Each statement text prepared on the connection the call runs on: its named statements'
    generic plan uses (one entry per named statement)."""
    plans: dict[str, list[int]] = defaultdict(list)
    for row in await database.fetch(_PREPARED, {}):
        plans[row["statement"]].append(row["generic_plans"])
    return plans


@pytest.mark.spec("STORE-51")
async def test_the_first_write_on_a_new_connection_uses_the_statement_and_plan_it_warmed(
    stores: Stores, store_dsn: str, key_prefix: str
) -> None:
    # ``stores`` made the schema, so this store's first connection finds it (before the schema
    # exists the warm-up is skipped). Calls one at a time run on one connection (STORE-45).
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as fresh:
        before = await _plans(fresh.database)
        for statement, _values in WARM_UP:
            assert before.get(statement.sql) == [1], statement.sql[:40]
        batch = Batch((), (Put(f"{key_prefix}a", b"v"),))
        await fresh.location.write(batch)
        await fresh.location.write(batch)
        after = await _plans(fresh.database)
        # The same one named statement ran both writes on its one generic plan.
        assert after[WRITE.sql] == [3]
