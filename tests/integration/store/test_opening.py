"""Opening the store: DSN choice, schema versions, start-up bounds, the embedded default
(specs/store.md, STORE-10, STORE-28..STORE-34)."""

from __future__ import annotations

import ast
import threading
from datetime import timedelta
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import pytest
import trio
import trio.testing
from sqlalchemy import bindparam, select, update

import zlink_trio._integration.store as store_package
from zlink_trio._integration.store import (
    DSN_VARIABLE,
    Applied,
    Batch,
    EmbeddedPostgres,
    Found,
    Put,
    StoreConfig,
    default_data_dir,
    open_stores,
)
from zlink_trio._integration.store import embedded as embedded_module
from zlink_trio._integration.store.bridge import Database
from zlink_trio._integration.store.schema import schema_version
from zlink_trio._integration.store.statements import Statement
from zlink_trio.errors import ConfigurationError, ErrorKind, ZLinkError

_VERSION_ROWS = Statement.compile(select(schema_version.c.component, schema_version.c.version))
_STAMP = Statement.compile(update(schema_version).values(version=bindparam("version")))


def _with_path(dsn: str, **changes: str) -> str:
    return urlunsplit(urlsplit(dsn)._replace(**changes))


@pytest.mark.spec("STORE-10")
def test_only_the_bridge_module_imports_asyncio() -> None:
    """asyncio and trio_asyncio are imported by the bridge (bridge.py, lending.py and aio.py, its
    asyncio half) and by no other store module; only the bridge's Trio side imports aio.py."""
    importers, of_aio = set(), set()
    for path in Path(store_package.__file__).parent.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if any(name.split(".")[0] in ("asyncio", "trio_asyncio") for name in names):
                importers.add(path.name)
            if any(name.endswith("store.aio") for name in names):
                of_aio.add(path.name)
    assert {"bridge.py", "lending.py", "aio.py"} == importers
    assert {"bridge.py", "lending.py"} == of_aio


@pytest.mark.spec("STORE-30")
@pytest.mark.parametrize(
    ("dsn", "named"),
    [
        ("mysql://user@localhost/db", "postgresql://"),
        ("postgresql://user@localhost:99999/db", "StoreConfig.dsn"),
        ("postgresql://user@localhost:0/db", "port 0"),
    ],
)
async def test_a_malformed_dsn_is_a_configuration_error(dsn: str, named: str) -> None:
    """A DSN that is not a usable postgresql:// URL fails before anything connects."""
    with pytest.raises(ConfigurationError, match=named):
        async with open_stores(StoreConfig(dsn=dsn), environ={}):
            pass


@pytest.mark.spec("STORE-30")
async def test_a_malformed_dsn_in_the_environment_names_the_variable() -> None:
    """ZLINK_STORE_DSN is used when no DSN is configured, and blamed when it is wrong."""
    with pytest.raises(ConfigurationError, match=DSN_VARIABLE):
        async with open_stores(StoreConfig(), environ={DSN_VARIABLE: "redis://localhost"}):
            pass


@pytest.mark.spec("STORE-30")
async def test_the_environment_dsn_is_used_when_none_is_configured(store_dsn: str) -> None:
    """With ZLINK_STORE_DSN set and no StoreConfig.dsn, the store uses that server."""
    async with open_stores(StoreConfig(), environ={DSN_VARIABLE: store_dsn}) as stores:
        assert store_dsn == stores.dsn


@pytest.mark.spec("STORE-30")
@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"path": "/no_such_database"}, "InvalidCatalogName"),
        ({"netloc": "no_such_role:@"}, "InvalidAuthorizationSpecification"),
    ],
)
async def test_a_dsn_the_server_rejects_is_a_configuration_error(
    store_dsn: str, change: dict[str, str], named: str
) -> None:
    """An unknown database or role is a ConfigurationError naming the rejection."""
    with pytest.raises(ConfigurationError, match=named):
        async with open_stores(StoreConfig(dsn=_with_path(store_dsn, **change)), environ={}):
            pass


@pytest.mark.spec("STORE-30")
@pytest.mark.parametrize(
    "settings",
    [{"pool_min_size": 5, "pool_max_size": 4}, {"max_open_scans": 4, "pool_max_size": 4}],
)
def test_contradicting_sizes_are_a_configuration_error(settings: dict[str, int]) -> None:
    """A pool smaller than its minimum or than the scans it must hold is refused."""
    with pytest.raises(ConfigurationError):
        StoreConfig(**settings)  # type: ignore[arg-type]  # the sizes are the point


@pytest.mark.spec("STORE-31")
async def test_a_server_that_never_answers_fails_start_up_in_time() -> None:
    """A listener that accepts and stays silent ends start-up with UNAVAILABLE, no hang."""
    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    port = listeners[0].socket.getsockname()[1]
    async with trio.open_nursery() as nursery:
        nursery.start_soon(trio.serve_listeners, _hold_forever, listeners)
        config = StoreConfig(dsn=f"postgresql://u@127.0.0.1:{port}/db", startup_timeout=0.5)
        with trio.fail_after(5), pytest.raises(ZLinkError) as caught:
            async with open_stores(config, environ={}):
                pass
        nursery.cancel_scope.cancel()
    assert ErrorKind.UNAVAILABLE == caught.value.kind


@pytest.mark.spec("STORE-31")
async def test_no_server_at_the_address_fails_start_up_as_unavailable(tmp_path: Path) -> None:
    """A socket folder with no server in it gives UNAVAILABLE naming the address."""
    config = StoreConfig(dsn=f"postgresql://u@/db?host={tmp_path}", startup_timeout=5)
    with trio.fail_after(10), pytest.raises(ZLinkError) as caught:
        async with open_stores(config, environ={}):
            pass
    assert ErrorKind.UNAVAILABLE == caught.value.kind
    assert str(tmp_path) in caught.value.message


async def _hold_forever(stream: trio.SocketStream) -> None:
    await trio.sleep_forever()


@pytest.mark.spec("STORE-28", "DEC-10")
async def test_opening_concurrently_creates_the_schema_once(store_dsn: str) -> None:
    """Several stores opening at once all start, and one layout version is recorded."""
    config = StoreConfig(dsn=store_dsn)
    async with open_stores(config, environ={}) as one, open_stores(config, environ={}) as two:
        rows = await one.database.fetch(_VERSION_ROWS, {})
        assert isinstance(await two.location.now(), type(await one.location.now()))
    assert [("zlink_store", 1)] == [tuple(row) for row in rows]


@pytest.mark.spec("STORE-28", "DEC-10")
async def test_first_opens_racing_on_an_empty_database_create_the_schema_once(
    pg_folder: Path,
) -> None:
    """Four stores opening together on a server with no tables yet all start, and one layout
    version is recorded (the creation is serialised, not raced)."""
    server = EmbeddedPostgres(pg_folder / "fresh")
    dsn = await server.start(60)
    try:
        config = StoreConfig(dsn=dsn, pool_min_size=1, pool_max_size=3)
        go = trio.Event()
        opened: list[int] = []

        async def open_one(number: int) -> None:
            await go.wait()
            async with open_stores(config, environ={}) as stores:
                await stores.location.now()
                opened.append(number)

        async with trio.open_nursery() as nursery:
            for number in range(4):
                nursery.start_soon(open_one, number)
            await trio.testing.wait_all_tasks_blocked()
            go.set()
        async with open_stores(config, environ={}) as stores:
            rows = await stores.database.fetch(_VERSION_ROWS, {})
    finally:
        await server.stop(60)
    assert [0, 1, 2, 3] == sorted(opened)
    assert [("zlink_store", 1)] == [tuple(row) for row in rows]


@pytest.mark.spec("STORE-29")
async def test_a_newer_schema_version_stops_start_up(store_dsn: str) -> None:
    """A database stamped with a newer layout is refused and the stamp is left alone."""
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        await _stamp(stores.database, 99)
        try:
            with pytest.raises(ConfigurationError, match="schema version 99"):
                async with open_stores(StoreConfig(dsn=store_dsn), environ={}):
                    pass
            rows = await stores.database.fetch(_VERSION_ROWS, {})
        finally:
            await _stamp(stores.database, 1)
    assert [("zlink_store", 99)] == [tuple(row) for row in rows]


@pytest.mark.spec("STORE-33")
def test_the_default_data_folder_follows_xdg() -> None:
    """XDG_DATA_HOME when set, else ~/.local/share, then zlink_trio/postgres."""
    assert Path("/x/zlink_trio/postgres") == default_data_dir({"XDG_DATA_HOME": "/x"})
    expected = Path.home() / ".local" / "share" / "zlink_trio" / "postgres"
    assert expected == default_data_dir({})


@pytest.mark.spec("STORE-33")
async def test_without_a_dsn_an_embedded_server_keeps_the_data(pg_folder: Path) -> None:
    """No DSN: a private server starts in data_dir, stops on close, and has the data next time."""
    tmp_path = pg_folder
    config = StoreConfig(data_dir=tmp_path / "pg", startup_timeout=60)
    async with open_stores(config, environ={}) as stores:
        assert str(tmp_path / "pg") in stores.dsn
        applied = await stores.location.write(Batch([], [Put("durable", b"kept")]))
        await stores.relocation.put("root", b"recovery", timedelta(hours=1))
    assert isinstance(applied, Applied)
    assert not (tmp_path / "pg" / "postmaster.pid").exists()
    async with open_stores(config, environ={}) as stores:
        found = await stores.location.read("durable")
    assert Found(b"kept", applied.versions[0], None, found.store_now) == found


@pytest.mark.spec("STORE-34")
async def test_an_unusable_data_folder_is_a_configuration_error(tmp_path: Path) -> None:
    """A data folder under a regular file cannot be made: ConfigurationError, nothing started."""
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ConfigurationError, match="data folder"):
        async with open_stores(StoreConfig(data_dir=blocker / "sub" / "pg"), environ={}):
            pass


@pytest.mark.spec("STORE-34")
async def test_an_embedded_start_past_startup_timeout_is_unavailable_naming_the_log(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server that is not ready within startup_timeout ends opening with UNAVAILABLE, in
    time, and the message names the server log (the package's start is held until released)."""
    release = threading.Event()

    class _SlowPackage:
        @staticmethod
        def PostgresServer(data_dir: Path, cleanup_mode: str | None) -> object:
            release.wait(30)
            raise OSError("released by the test")

    monkeypatch.setattr(embedded_module, "_package", lambda: _SlowPackage)
    config = StoreConfig(data_dir=tmp_path / "pg", startup_timeout=0.3)
    start = trio.current_time()
    try:
        with trio.fail_after(10), pytest.raises(ZLinkError) as caught:
            async with open_stores(config, environ={}):
                pass
    finally:
        release.set()
    assert ErrorKind.UNAVAILABLE == caught.value.kind
    assert str(tmp_path / "pg" / "log") in caught.value.message
    assert trio.current_time() - start < 5


from sqlalchemy import bindparam, select, update  # noqa: E402  # test-only helper


async def _stamp(database: Database, version: int) -> None:
    await database.fetch(_STAMP, {"version": version})


_SYNCHRONOUS_COMMIT = Statement("SELECT current_setting('synchronous_commit') AS setting", ())


@pytest.mark.spec("STORE-42", "KIT-8")
async def test_commits_wait_for_the_disk_unless_the_store_is_for_tests(store_dsn: str) -> None:
    """A store's sessions commit durably by default; ``durable_commits=False`` (the testing
    kit's shared pool) turns PostgreSQL's ``synchronous_commit`` off for its sessions only."""
    from zlink_trio.testing import open_test_stores

    async def setting(stores: store_package.Stores) -> list[str]:
        # Two at once: both of the pool's connections, not the same one twice.
        rows: list[str] = []

        async def one() -> None:
            row = await stores.database.fetch_one(_SYNCHRONOUS_COMMIT, {})
            rows.append(row["setting"])

        async with trio.open_nursery() as nursery:
            nursery.start_soon(one)
            nursery.start_soon(one)
        return rows

    async with store_package.open_stores(StoreConfig(dsn=store_dsn), environ={}) as durable:
        assert ["on", "on"] == await setting(durable)
        async with open_test_stores(store_dsn) as for_tests:
            assert ["off", "off"] == await setting(for_tests)
        assert ["on", "on"] == await setting(durable)
