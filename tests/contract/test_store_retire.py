"""``zlink-trio store retire`` (specs/inspect.md RETIRE-1..RETIRE-3; DEC-21)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Awaitable, Callable

import cbor2
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
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
from zlink_trio._retire import RetireError, retire
from zlink_trio._runtime.ownership.authority import Claim, SpotAuthority, SpotRecord
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio.ids import (
    ActorId,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    SpotKind,
    StableTypeName,
)

app = zl.Application()


@app.user_spot("retire.Room")
class Room(NoMembers):
    pass


@app.actor("retire.User")
class User(zl.Actor):
    pass


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def _value(stores: Stores, key: str) -> object:
    """What ``key`` holds, decoded from CBOR; ``None`` when it is missing."""
    found = await stores.location.read(key)
    return cbor2.loads(found.value) if isinstance(found, Found) else None


def values(store_dsn: str, *keys: str) -> list[object]:
    async def read() -> list[object]:
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            return [await _value(stores, key) for key in keys]

    return trio.run(read)


def in_a_thread(afn: Callable[[], Awaitable[None]]) -> None:
    """Run ``afn`` to the end in a Trio loop of its own, from synchronous code that may itself
    run inside another Trio loop (the retire command's ``say``), and raise what it raised."""
    failures: list[BaseException] = []

    def main() -> None:
        try:
            trio.run(afn)
        except BaseException as error:  # re-raised in the caller's thread
            failures.append(error)

    thread = threading.Thread(target=main)
    thread.start()
    thread.join()
    if failures:
        raise failures[0]


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
    in the plain int form (meshes unknown) stay."""
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


@pytest.mark.spec("RETIRE-2", "RETIRE-3", "DEC-21", "ID-6.12")
def test_an_actor_counter_goes_with_the_last_mesh_that_used_it(
    store_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An Actor id created in mesh A and, once its record went with A's host, in mesh B gets the
    next generation and a counter listing both. Retiring A deletes the counter of an id only A
    used, rewrites the shared one without A, deletes the Actor record naming A and keeps a plain
    int counter (meshes unknown) although that record named A; retiring B then deletes the shared
    counter, and the plain one still stays."""
    first, second = fresh("retire-a"), fresh("retire-b")
    shared, alone, plain = fresh("shared"), fresh("alone"), fresh("plain")
    counter = {name: f"actor-generation/{name}" for name in (shared, alone, plain)}
    generations: list[int] = []

    async def create_in(mesh: str, *actor_ids: str) -> None:
        async with zl.open_host(app, zl.HostConfig(mesh=mesh, store_dsn=store_dsn)) as host:
            for actor_id in actor_ids:
                result = await host.actors.create(actor_id, "retire.User").submit()
                assert result.actor_ref is not None
                generations.append(result.actor_ref.object_generation.value)

    async def plain_counter_with_a_record_of_a() -> None:
        dead = SpotRecord(
            NodeRid("gone"),
            NodeGeneration.new(),
            ObjectGeneration(5),
            SpotKind.INVALID,
            StableTypeName("retire.User"),
            "ready",
            MeshName(first),
        )
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            await _put(stores, f"actor/{plain}", dead.encode())
            await _put(stores, counter[plain], cbor2.dumps(5))

    trio.run(create_in, first, shared, alone)
    trio.run(create_in, second, shared)
    trio.run(plain_counter_with_a_record_of_a)
    assert [1, 1, 2] == generations
    both = sorted([first, second])
    assert [{"g": 2, "meshes": both}, {"g": 1, "meshes": [first]}, 5] == values(
        store_dsn, counter[shared], counter[alone], counter[plain]
    )

    retire_first = ["store", "retire", "--mesh", first, "--dsn", store_dsn, "--silence", "0.5"]
    assert 0 == main(retire_first)
    out = capsys.readouterr().out
    assert "1 Actor record(s) naming it and 1 Actor counter(s) only it used" in out
    assert "rewriting 1 Actor counter(s) other meshes use too" in out
    assert "rewrote 1/1" in out
    assert "1 Actor record(s), 1 Actor counter(s) deleted, 1 rewritten" in out.splitlines()[-1]
    assert [{"g": 2, "meshes": [second]}, None, 5, None] == values(
        store_dsn, counter[shared], counter[alone], counter[plain], f"actor/{plain}"
    )

    retire_second = ["store", "retire", "--mesh", second, "--dsn", store_dsn, "--silence", "0.5"]
    assert 0 == main(retire_second)
    out = capsys.readouterr().out
    assert "0 Actor record(s), 1 Actor counter(s) deleted, 0 rewritten" in out.splitlines()[-1]
    assert [None, 5] == values(store_dsn, counter[shared], counter[plain])


@pytest.mark.spec("RETIRE-2", "DEC-21", "ID-6.12")
@pytest.mark.parametrize("also", [False, True], ids=["only-the-retired-mesh", "two-meshes"])
def test_a_claim_racing_the_retirement_keeps_its_counter(store_dsn: str, also: bool) -> None:
    """An Actor counter listing the retired mesh (alone, or with another) is claimed from a
    third mesh after the retirement read it and before it writes: the retirement stops with
    "changed while retiring" and the counter keeps the claim's generation and mesh. Run again,
    it rewrites the counter without the retired mesh, and the next claim grows from there."""
    retired, other, claimer = fresh("retire-r"), fresh("retire-o"), fresh("retire-c")
    actor = ActorId(fresh("raced"))
    key = f"actor-generation/{actor.value}"
    listed = sorted([retired, other] if also else [retired])
    claims: list[Claim] = []

    async def claim_from_the_third_mesh() -> None:
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            node = SpotAuthority(
                stores.location, MeshName(claimer), NodeRid("claimer"), NodeGeneration.new()
            )
            claim = await node.claim(actor, SpotKind.INVALID, StableTypeName("retire.User"))
            assert isinstance(claim, Claim)
            assert await node.release(claim)
            claims.append(claim)

    async def prepare() -> None:
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            await _put(stores, key, cbor2.dumps({"g": 3, "meshes": listed}))

    def say(text: str) -> None:
        if text.startswith("deleting"):
            in_a_thread(claim_from_the_third_mesh)

    trio.run(prepare)
    with pytest.raises(RetireError, match=f"{key} changed while retiring"):
        retire(store_dsn, MeshName(retired), 0.5, say)
    assert [ObjectGeneration(4)] == [claim.record.generation for claim in claims]
    after_race = sorted([*listed, claimer])
    assert [{"g": 4, "meshes": after_race}] == values(store_dsn, key)

    counted = retire(store_dsn, MeshName(retired), 0.5, lambda _text: None)
    assert (0, 1) == (counted["actor counters deleted"], counted["actor counters rewritten"])
    after_retirement = sorted(set(after_race) - {retired})
    assert [{"g": 4, "meshes": after_retirement}] == values(store_dsn, key)
    in_a_thread(claim_from_the_third_mesh)
    assert ObjectGeneration(5) == claims[-1].record.generation


@pytest.mark.spec("RETIRE-2", "DEC-21")
def test_an_actor_record_taken_over_while_retiring_is_kept(store_dsn: str) -> None:
    """An Actor record naming the retired mesh, whose owner is gone, is taken over from another
    mesh after the retirement read it and before it deletes: the retirement stops with "changed
    while retiring", and the live record of the other mesh and its counter stay. The counter is
    in the plain int form, which retire keeps, so only the record's own version protects it."""
    retired, taker = fresh("retire-r"), fresh("retire-t")
    actor = ActorId(fresh("taken"))
    record_key, counter_key = f"actor/{actor.value}", f"actor-generation/{actor.value}"
    taken: list[Claim] = []

    async def prepare() -> None:
        dead = SpotRecord(
            NodeRid("gone"),
            NodeGeneration.new(),
            ObjectGeneration(3),
            SpotKind.INVALID,
            StableTypeName("retire.User"),
            "ready",
            MeshName(retired),
        )
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            await _put(stores, record_key, dead.encode())
            await _put(stores, counter_key, cbor2.dumps(3))

    async def take_over() -> None:
        async with open_stores(StoreConfig(dsn=store_dsn, notifications=False)) as stores:
            node = SpotAuthority(
                stores.location, MeshName(taker), NodeRid("taker"), NodeGeneration.new()
            )
            node.check_liveness = True  # as once membership runs: "gone" has no node record
            claim = await node.claim(actor, SpotKind.INVALID, StableTypeName("retire.User"))
            assert isinstance(claim, Claim)
            taken.append(claim)

    def say(text: str) -> None:
        if text.startswith("deleting"):
            in_a_thread(take_over)

    trio.run(prepare)
    with pytest.raises(RetireError, match=f"{record_key} changed while retiring"):
        retire(store_dsn, MeshName(retired), 0.5, say)
    [claim] = taken
    assert ObjectGeneration(4) == claim.record.generation
    record, counter = values(store_dsn, record_key, counter_key)
    assert isinstance(record, dict)
    assert (taker, "taker", 4) == (record["mesh"], record["owner"], record["generation"])
    assert 4 == counter
