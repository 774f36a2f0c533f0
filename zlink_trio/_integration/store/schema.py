"""The store's tables, described once with SQLAlchemy Core (specs/store.md, STORE-1, STORE-28,
STORE-29).

Keys and references are ``bytea`` holding the UTF-8 bytes, so equality is byte-exact and order is
byte order (PostgreSQL compares ``bytea`` like ``memcmp``), independent of any collation. Record
versions come from one sequence, so a version is never issued twice, whatever was deleted.
``SCHEMA_VERSION`` is written by the runtime that creates the tables; a database holding a newer
number was made by newer code, and this code refuses to run against it.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    CheckConstraint,
    Column,
    DateTime,
    Integer,
    LargeBinary,
    MetaData,
    Sequence,
    Table,
    Text,
    bindparam,
    insert,
    select,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.schema import CreateSequence, CreateTable

from zlink_trio._integration.store.bridge import Database
from zlink_trio._integration.store.statements import Statement
from zlink_trio.errors import ConfigurationError

SCHEMA_VERSION = 1
"""The layout this code reads and writes; bump it with a migration step when the tables change."""
SCHEMA_COMPONENT = "zlink_store"
"""The row of ``zlink_schema_version`` that records this layout."""
SCHEMA_LOCK = 0x7A6C_696E_6B01
"""Advisory lock key serialising schema creation between processes starting together."""
NOTIFY_CHANNEL = "zlink_store_changes"
"""The LISTEN/NOTIFY channel; each notification's payload is one changed key."""

metadata = MetaData()

schema_version = Table(
    "zlink_schema_version",
    metadata,
    Column("component", Text, primary_key=True),
    Column("version", Integer, nullable=False),
)

version_sequence = Sequence("zlink_record_version", metadata=metadata, start=1)

location_record = Table(
    "zlink_location_record",
    metadata,
    Column("key", LargeBinary, primary_key=True),
    Column("value", LargeBinary, nullable=False),
    Column("version", BigInteger, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    CheckConstraint("octet_length(key) BETWEEN 1 AND 1024", name="zlink_location_key_size"),
)

relocation_record = Table(
    "zlink_relocation_record",
    metadata,
    Column("reference", LargeBinary, primary_key=True),
    Column("payload", LargeBinary, nullable=False),
    Column("expires_at", DateTime(timezone=True), nullable=False),
    CheckConstraint(
        "octet_length(reference) BETWEEN 1 AND 4096", name="zlink_relocation_reference_size"
    ),
)


def version_table_ddl() -> str:
    """``CREATE TABLE IF NOT EXISTS`` for the schema-version table alone."""
    return _compile_ddl(CreateTable(schema_version, if_not_exists=True))


def store_ddl() -> list[str]:
    """``CREATE ... IF NOT EXISTS`` for the sequence and the record tables, in order."""
    return [
        _compile_ddl(CreateSequence(version_sequence, if_not_exists=True)),
        _compile_ddl(CreateTable(location_record, if_not_exists=True)),
        _compile_ddl(CreateTable(relocation_record, if_not_exists=True)),
    ]


def _compile_ddl(element: CreateTable | CreateSequence) -> str:
    dialect = postgresql.dialect()  # type: ignore[no-untyped-call]  # unannotated in SQLAlchemy
    return str(element.compile(dialect=dialect))


_READ_VERSION = Statement.compile(
    select(schema_version.c.version).where(schema_version.c.component == bindparam("component"))
)
_WRITE_VERSION = Statement.compile(
    insert(schema_version).values(component=bindparam("component"), version=bindparam("version"))
)


async def ensure_schema(database: Database) -> None:
    """Create the tables on first use and check the recorded layout version.

    ``ConfigurationError`` when the database records a newer layout than ``SCHEMA_VERSION``:
    newer code made it, and running older code against it could corrupt it (STORE-29).
    """
    session = await database.begin(isolation="read_committed")
    try:
        # Two processes starting together must not both run the CREATE statements.
        await session.execute(f"SELECT pg_advisory_xact_lock({SCHEMA_LOCK})")
        await session.execute(version_table_ddl())
        rows = await session.fetch(_READ_VERSION, {"component": SCHEMA_COMPONENT})
        found = rows[0]["version"] if rows else None
        if found is not None and found > SCHEMA_VERSION:
            raise ConfigurationError(
                f"the store database at {database.where} holds schema version {found}, newer "
                f"than version {SCHEMA_VERSION} that this zlink_trio knows; upgrade zlink_trio "
                "(a downgrade is never done)"
            )
        for statement in store_ddl():
            await session.execute(statement)
        if found is None:
            await session.fetch(
                _WRITE_VERSION, {"component": SCHEMA_COMPONENT, "version": SCHEMA_VERSION}
            )
        await session.commit()
    finally:
        await session.close()
