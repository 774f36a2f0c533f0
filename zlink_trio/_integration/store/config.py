"""Store configuration: where the database is and how the store uses it (specs/store.md,
STORE-30..STORE-32).

The DSN is chosen once, in this order: ``StoreConfig.dsn``, then the ``ZLINK_STORE_DSN``
environment variable, then the embedded server in ``data_dir`` (or the default data folder).
A DSN is checked before anything connects, so a typo is a ``ConfigurationError`` that names it.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from urllib.parse import urlsplit

import attrs

from zlink_trio.errors import ConfigurationError

DSN_VARIABLE = "ZLINK_STORE_DSN"
"""The environment variable naming an external PostgreSQL."""


def _positive(_instance: object, attribute: attrs.Attribute[float], value: float) -> None:
    if not value > 0:
        raise ValueError(f"{attribute.name} must be positive, got {value}")


@attrs.frozen
class StoreConfig:
    """How to reach the database and how the store uses it; every time is in seconds."""

    dsn: str | None = None
    """A ``postgresql://`` DSN; ``None`` means ``ZLINK_STORE_DSN``, else the embedded server."""
    data_dir: Path | None = None
    """The embedded server's data folder; ``None`` means :func:`default_data_dir`."""
    pool_min_size: int = 1
    pool_max_size: int = 10
    """Most connections the store's pool holds, the listening one included (STORE-47)."""
    pool_idle_timeout: float = attrs.field(default=30.0, validator=_positive)
    """A pool connection unused this long is closed, all but one (STORE-46)."""
    operation_timeout: float = attrs.field(default=5.0, validator=_positive)
    """Every store call ends within this time: with its result or ``ZLinkError(UNAVAILABLE)``."""
    startup_timeout: float = attrs.field(default=30.0, validator=_positive)
    """Starting the embedded server and opening the pool end within this time."""
    notifications: bool = True
    """Listen for change notifications; ``False`` makes the change feed poll instead."""
    poll_interval: float = attrs.field(default=1.0, validator=_positive)
    """How often the change feed says ``Resync`` when it does not listen."""
    scan_lifetime: float = attrs.field(default=30.0, validator=_positive)
    """How long a paged scan's snapshot is held after its first page."""
    max_open_scans: int = 2
    """Most scan snapshots held at once; opening one more expires the oldest."""
    durable_commits: bool = True
    """``False``: a write returns before the database has its commit on disk (PostgreSQL's
    ``synchronous_commit=off``), about half a write's time; a crash of the database server may
    lose the last writes but never corrupts the store (STORE-42). For test stores, whose records
    nobody needs after a crash; never for a mesh that serves."""

    transaction_pooler: bool = False
    """``dsn`` is a pooler in transaction mode (PgBouncer's ``pool_mode = transaction``): no
    prepared statements, no session settings, no LISTEN through it (STORE-48)."""
    listen_dsn: str | None = None
    """A direct DSN of the same server for the change feed's LISTEN when ``dsn`` is a pooler;
    ``None`` listens on a pool connection (STORE-45)."""

    def __attrs_post_init__(self) -> None:
        problems = []
        if self.transaction_pooler and self.notifications and self.listen_dsn is None:
            problems.append(
                "notifications need a listen_dsn (a direct DSN of the server) behind a "
                "transaction pooler, which cannot LISTEN; or set notifications=False"
            )
        if self.transaction_pooler and not self.durable_commits:
            problems.append(
                "durable_commits=False is a session setting, which a transaction pooler does not "
                "keep; set synchronous_commit on the server's database or role instead"
            )
        if self.listen_dsn is not None:
            problems.extend(_problems_of(self.listen_dsn, "StoreConfig.listen_dsn"))
        if not 0 <= self.pool_min_size <= self.pool_max_size:
            problems.append(
                f"pool_min_size must be 0..pool_max_size ({self.pool_max_size}), "
                f"got {self.pool_min_size}"
            )
        if not 1 <= self.max_open_scans < self.pool_max_size:
            problems.append(
                f"max_open_scans must be 1..{self.pool_max_size - 1} (each holds a pool "
                f"connection and one must stay free), got {self.max_open_scans}"
            )
        if problems:
            raise ConfigurationError(problems)


def default_data_dir(environ: Mapping[str, str] = os.environ) -> Path:
    """``$XDG_DATA_HOME/zlink_trio/postgres``, or ``~/.local/share/zlink_trio/postgres``."""
    base = environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "zlink_trio" / "postgres"


def chosen_dsn(config: StoreConfig, environ: Mapping[str, str] = os.environ) -> str | None:
    """The checked DSN to use, or ``None`` to start the embedded server."""
    if config.dsn is not None:
        return check_dsn(config.dsn, "StoreConfig.dsn")
    if environ.get(DSN_VARIABLE):
        return check_dsn(environ[DSN_VARIABLE], DSN_VARIABLE)
    return None


def check_dsn(dsn: str, where: str) -> str:
    """``dsn`` unchanged when it is a usable ``postgresql://`` URL; else ``ConfigurationError``
    naming ``where`` it came from and what is wrong (never the password)."""
    problems = _problems_of(dsn, where)
    if problems:
        raise ConfigurationError(problems)
    return dsn


def _problems_of(dsn: str, where: str) -> list[str]:
    try:
        parts = urlsplit(dsn)
        port = parts.port
    except ValueError as error:
        return [f"{where} is not a valid URL: {error}"]
    problems = []
    if parts.scheme not in ("postgresql", "postgres"):
        problems.append(
            f"{where} must start with postgresql:// or postgres://, got {parts.scheme or 'no'} "
            "scheme"
        )
    if port == 0:
        problems.append(f"{where} names port 0")
    return problems


def describe_dsn(dsn: str) -> str:
    """Where ``dsn`` points, for messages: host, port and database, never the password."""
    try:
        parts = urlsplit(dsn)
        port = parts.port
    except ValueError:
        return "an unparsable DSN"
    if parts.scheme not in ("postgresql", "postgres"):
        return "a DSN that is not a postgresql:// URL"
    host = parts.hostname or ""
    if not host:
        query = dict(item.partition("=")[::2] for item in parts.query.split("&") if item)
        host = query.get("host", "the default host")
    database = parts.path.lstrip("/") or "the default database"
    return f"{host}:{port or 5432}/{database}"
