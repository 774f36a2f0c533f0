"""The store through a real PgBouncer in transaction mode in front of the test server
(specs/store.md STORE-48). Skipped when no ``pgbouncer`` binary is installed."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit, urlunsplit

import pytest
import trio

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Changed,
    Found,
    IfMissing,
    Put,
    ScanPage,
    StoreConfig,
    Stores,
    open_stores,
)
from zlink_trio._integration.store.bridge import open_database
from zlink_trio._integration.store.statements import Statement
from zlink_trio.errors import ConfigurationError

TIMEOUT = 10.0
_BINARY = shutil.which("pgbouncer") or shutil.which("pgbouncer", path="/usr/sbin:/usr/local/sbin")

pytestmark = pytest.mark.skipif(
    _BINARY is None, reason="no pgbouncer binary (Debian: apt-get install pgbouncer)"
)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
async def database_name(store_dsn: str) -> AsyncIterator[str]:
    """A fresh database whose every transaction is SERIALIZABLE by the server's own default."""
    name = f"zl_bouncer_{uuid.uuid4().hex[:12]}"
    async with open_database(
        store_dsn, min_size=1, max_size=2, operation_timeout=TIMEOUT, startup_timeout=30
    ) as admin:
        await admin.fetch(Statement(f"CREATE DATABASE {name}", ()), {})
        await admin.fetch(
            Statement(
                f"ALTER DATABASE {name} SET default_transaction_isolation = 'serializable'", ()
            ),
            {},
        )
        try:
            yield name
        finally:
            await admin.fetch(Statement(f"DROP DATABASE {name} WITH (FORCE)", ()), {})


@pytest.fixture
def bouncer(store_dsn: str) -> Iterator[str]:
    """A PgBouncer in transaction mode with two server connections a database, in front of the
    test server; yields its DSN template (``{database}`` to fill in)."""
    parts = urlsplit(store_dsn)
    socket_dir = parse_qs(parts.query).get("host", [parts.hostname or "127.0.0.1"])[0]
    user = parts.username or "postgres"
    port = _free_port()
    folder = Path(tempfile.mkdtemp(prefix="zlink-bouncer-"))
    folder.chmod(0o755)
    config = folder / "pgbouncer.ini"
    config.write_text(
        "[databases]\n"
        f"* = host={socket_dir} port={parts.port or 5432} user={user}\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        "auth_type = any\npool_mode = transaction\ndefault_pool_size = 2\n"
        f"logfile = {folder / 'pgbouncer.log'}\npidfile = {folder / 'pgbouncer.pid'}\n",
        encoding="utf-8",
    )
    config.chmod(0o644)
    command = [str(_BINARY), str(config)]
    if os.geteuid() == 0:  # PgBouncer refuses to run as root; the server's owner can reach it
        owner = Path(socket_dir).owner()
        shutil.chown(folder, owner)
        command[1:1] = ["-u", owner]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait_listening(port, process, folder)
        yield f"postgresql://{user}@127.0.0.1:{port}/{{database}}"
    finally:
        process.terminate()
        process.wait(TIMEOUT)
        shutil.rmtree(folder, ignore_errors=True)


def _wait_listening(port: int, process: subprocess.Popen[bytes], folder: Path) -> None:
    """Until PgBouncer accepts connections on ``port`` (polled: a process has no event)."""
    deadline = time.monotonic() + TIMEOUT
    while time.monotonic() < deadline:
        if process.poll() is not None:
            log = folder / "pgbouncer.log"
            said = log.read_text(errors="replace") if log.exists() else "no log"
            raise AssertionError(f"pgbouncer ended with {process.returncode}: {said}")
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.02)
    raise AssertionError("pgbouncer did not listen in time")


def _config(bouncer: str, database: str, **options: Any) -> StoreConfig:
    return StoreConfig(dsn=bouncer.format(database=database), transaction_pooler=True, **options)


@pytest.mark.spec("STORE-48")
async def test_reads_batches_and_scans_work_through_pgbouncer_in_transaction_mode(
    bouncer: str, database_name: str
) -> None:
    """Through PgBouncer (transaction mode, two server connections): concurrent conditional
    batches, reads and a scan of several pages, all right, on more client connections than
    server ones, so transactions move between server connections."""
    config = _config(bouncer, database_name, notifications=False, pool_max_size=6)
    async with open_stores(config, environ={}) as stores:
        results: dict[int, object] = {}

        async def claim(number: int) -> None:
            key = f"k/{number:03}"
            batch = Batch([IfMissing(key)], [Put(key, b"v%d" % number)])
            results[number] = await stores.location.write(batch)
            assert isinstance(await stores.location.read(key), Found)

        for _ in range(3):  # more than once: every statement on a connection that ran others
            async with trio.open_nursery() as nursery:
                for number in range(40):
                    nursery.start_soon(claim, number)
        assert 40 == len(results)
        keys = await _scan_keys(stores)
        assert [f"k/{number:03}" for number in range(40)] == keys


async def _scan_keys(stores: Stores) -> list[str]:
    keys: list[str] = []
    cursor: str | None = None
    while True:
        page = await stores.location.scan("k/", 7, cursor)
        assert isinstance(page, ScanPage)
        keys.extend(record.key for record in page.records)
        if page.cursor is None:
            return keys
        cursor = page.cursor


@pytest.mark.spec("STORE-48")
async def test_notifications_through_pgbouncer_listen_on_the_direct_dsn(
    bouncer: str, database_name: str, store_dsn: str
) -> None:
    """Behind PgBouncer the feed listens on ``listen_dsn``, a direct connection to the server,
    and hears the batches written through PgBouncer."""
    direct = urlunsplit(urlsplit(store_dsn)._replace(path=f"/{database_name}"))
    config = _config(bouncer, database_name, listen_dsn=direct)
    async with open_stores(config, environ={}) as stores:
        with stores.location.changes() as feed:
            assert isinstance(await stores.location.write(Batch([], [Put("n", b"1")])), Applied)
            with trio.fail_after(TIMEOUT):
                async for event in feed:
                    if isinstance(event, Changed) and "n" in event.keys:
                        break


@pytest.mark.spec("STORE-48")
async def test_a_pooled_server_that_is_not_serializable_by_default_is_refused(
    bouncer: str, store_dsn: str
) -> None:
    """Behind a pooler the store cannot set SERIALIZABLE itself: a database without that
    default stops start-up with a ConfigurationError that says what to set."""
    database = urlsplit(store_dsn).path.lstrip("/") or "postgres"
    config = _config(bouncer, database, notifications=False)
    with pytest.raises(ConfigurationError, match="default_transaction_isolation"):
        async with open_stores(config, environ={}):
            pass


@pytest.mark.spec("STORE-48")
def test_a_pooler_without_a_way_to_listen_is_a_configuration_error() -> None:
    """LISTEN needs a direct DSN behind a pooler, and durable_commits=False a session setting
    it does not keep: both are refused when the config is made."""
    with pytest.raises(ConfigurationError, match="listen_dsn"):
        StoreConfig(dsn="postgresql://pooler/db", transaction_pooler=True)
    with pytest.raises(ConfigurationError, match="durable_commits"):
        StoreConfig(
            dsn="postgresql://pooler/db",
            transaction_pooler=True,
            notifications=False,
            durable_commits=False,
        )
