"""``zlink-trio store retire`` (specs/inspect.md RETIRE-1..RETIRE-3; DEC-21)."""

from __future__ import annotations

import uuid

import cbor2
import pytest
import trio

import zlink_trio as zl
from zlink_trio.__main__ import main
from zlink_trio._integration.store import (
    Applied,
    Batch,
    Found,
    IfMissing,
    Put,
    StoreConfig,
    Stores,
    open_stores,
)
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio.ids import NodeGeneration, NodeRid

app = zl.Application()


@app.user_spot("retire.Room")
class Room(zl.Spot):
    pass


async def _keys(stores: Stores, prefix: str) -> list[str]:
    page = await stores.location.scan(prefix, 1000)
    assert not isinstance(page, type(None))
    return [record.key for record in getattr(page, "records", ())]


async def _put(stores: Stores, key: str, value: bytes) -> None:
    written = await stores.location.write(Batch([IfMissing(key)], [Put(key, value)]))
    assert isinstance(written, Applied)


@pytest.mark.spec("RETIRE-1")
def test_a_mesh_with_a_live_node_is_not_retired(
    store_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A node that renews while the command watches makes it delete nothing and exit 1."""
    mesh = f"retire-{uuid.uuid4().hex[:8]}"

    async def scenario() -> tuple[int, list[str]]:
        config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, node_lease=1.0)
        async with zl.open_host(app, config) as host:
            await host.spots.get_or_create("room-1", "retire.Room").submit()
            argv = ["store", "retire", "--mesh", mesh, "--dsn", store_dsn, "--silence", "1.5"]
            status = await trio.to_thread.run_sync(main, argv)
            async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
                left = await _keys(stores, f"m/{mesh}/")
            await host.shutdown()
        return status, left

    status, left = trio.run(scenario)
    assert 1 == status
    assert "live nodes" in capsys.readouterr().err
    assert f"m/{mesh}/spot/room-1" in left


@pytest.mark.spec("RETIRE-1", "RETIRE-2", "RETIRE-3")
def test_a_dead_mesh_is_retired_with_its_counters_and_nothing_else(
    store_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A mesh whose host shut down and whose killed node left its record behind: every key of
    the mesh goes (the silent node record, counters), another mesh's keys and an Actor counter
    without a record stay."""
    mesh = f"retire-{uuid.uuid4().hex[:8]}"
    other = f"retire-{uuid.uuid4().hex[:8]}"
    actor_counter = f"actor-generation/retire-{uuid.uuid4().hex[:8]}"

    async def prepare() -> None:
        config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn)
        async with zl.open_host(app, config) as host:
            for number in range(3):
                await host.spots.get_or_create(f"room-{number}", "retire.Room").submit()
        killed = NodeRecord(NodeRid("killed"), NodeGeneration.new())
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            await _put(stores, f"m/{mesh}/node/killed", killed.encode())
            await _put(stores, f"m/{other}/generation/room-0", cbor2.dumps(1))
            await _put(stores, actor_counter, cbor2.dumps(1))

    async def look() -> tuple[list[str], list[str], bool]:
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            mine = await _keys(stores, f"m/{mesh}/")
            theirs = await _keys(stores, f"m/{other}/")
            kept = isinstance(await stores.location.read(actor_counter), Found)
        return mine, theirs, kept

    trio.run(prepare)
    before, _, _ = trio.run(look)
    assert f"m/{mesh}/generation/room-2" in before
    assert f"m/{mesh}/node/killed" in before
    argv = ["store", "retire", "--mesh", mesh, "--dsn", store_dsn, "--silence", "0.5"]
    assert 0 == main(argv)
    out = capsys.readouterr().out
    assert "1 node record(s) found" in out
    assert f"deleted {len(before)}/{len(before)}" in out
    mine, theirs, kept = trio.run(look)
    assert [] == mine
    assert [f"m/{other}/generation/room-0"] == theirs
    assert kept
    assert 0 == main(argv)  # nothing left: retires again with zero counts
    assert "0 key(s) under the mesh" in capsys.readouterr().out
