"""SpotAuthority on its own against the real store (authority.py, Rules 1-6): the key layout, the
one winner of a claim, generations that only grow, takeover and reclaim of a dead owner's records,
and settling a claim of unknown outcome. No host runs: the records of other nodes are written here
as those nodes would write them.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable

import attrs
import cbor2
import pytest

from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Delete,
    Expired,
    Found,
    IfMissing,
    LocationStore,
    Missing,
    Put,
    ScanPage,
    StoreConfig,
    Stores,
    open_stores,
)
from zlink_trio._runtime.ownership.authority import (
    Claim,
    GenerationCounter,
    Held,
    SpotAuthority,
    SpotRecord,
)
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio.ids import (
    ActorId,
    MeshName,
    NodeGeneration,
    NodeRid,
    ObjectGeneration,
    SpotId,
    SpotKind,
    StableTypeName,
)

ROOM = StableTypeName("units.Room")


@pytest.fixture
async def stores(store_dsn: str) -> AsyncIterator[Stores]:
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as opened:
        yield opened


@pytest.fixture
def mesh() -> MeshName:
    """A mesh no other test uses."""
    return MeshName(f"t-{uuid.uuid4().hex[:12]}")


class Node:
    """One node run's authority in ``mesh`` (a run is a rid and a generation)."""

    def __init__(self, store: LocationStore, mesh: MeshName, rid: str) -> None:
        self.rid = NodeRid(rid)
        self.generation = NodeGeneration.new()
        self.authority = SpotAuthority(store, mesh, self.rid, self.generation)

    async def publish(self, store: LocationStore, mesh: MeshName) -> None:
        """Write this run's node record, as its membership would: the run is live."""
        key = f"m/{mesh.value}/node/{self.rid.value}"
        record = NodeRecord(self.rid, self.generation).encode()
        assert isinstance(await store.write(Batch([], [Put(key, record)])), Applied)


async def found(store: LocationStore, key: str) -> Found:
    record = await store.read(key)
    assert isinstance(record, Found), key
    return record


async def claimed(node: Node, target: SpotId | ActorId, kind: SpotKind = SpotKind.USER) -> Claim:
    outcome = await node.authority.claim(target, kind, ROOM)
    assert isinstance(outcome, Claim)
    return outcome


class Interposed:
    """The store with hooks: ``before_write`` runs once before the next write (another node
    acting between a claim's reads and its write), ``page`` caps the scan page size, and
    ``expire`` scans answer ``Expired`` (the snapshot was dropped) before the real ones."""

    def __init__(self, store: LocationStore) -> None:
        self.store = store
        self.before_write: Callable[[], Awaitable[None]] | None = None
        self.page: int | None = None
        self.expire: list[bool] = []
        self.scans: list[tuple[str, str | None]] = []
        self.calls: list[str] = []
        """The store statements asked for: "read" or "write", in order."""

    async def read(self, key: str) -> Missing | Found:
        self.calls.append("read")
        return await self.store.read(key)

    async def write(self, batch: Batch) -> Applied | Conflict:
        self.calls.append("write")
        hook, self.before_write = self.before_write, None
        if hook is not None:
            await hook()
        return await self.store.write(batch)

    async def scan(self, prefix: str, limit: int, cursor: str | None = None) -> ScanPage | Expired:
        self.scans.append((prefix, cursor))
        if self.expire and self.expire.pop(0):
            return Expired()
        return await self.store.scan(prefix, self.page or limit, cursor)


def interposed(stores: Stores, mesh: MeshName, rid: str) -> tuple[Node, Interposed]:
    wrapper = Interposed(stores.location)
    node = Node(stores.location, mesh, rid)
    node.authority = SpotAuthority(wrapper, mesh, node.rid, node.generation)  # type: ignore[arg-type]  # duck-typed store
    return node, wrapper


# --- the record ----------------------------------------------------------------------------------


def test_a_record_is_the_documented_cbor_map_and_decodes_back() -> None:
    """The stored map has the documented fields; ``mesh`` only when one is set (Actor records)."""
    spot = SpotRecord(
        NodeRid("alpha"),
        NodeGeneration(7),
        ObjectGeneration(3),
        SpotKind.INSTANCE,
        ROOM,
        "ready",
    )
    assert {
        "owner": "alpha",
        "owner_generation": 7,
        "generation": 3,
        "kind": 3,
        "type": "units.Room",
        "state": "ready",
    } == cbor2.loads(spot.encode())
    assert spot == SpotRecord.decode(spot.encode())
    actor = SpotRecord(
        NodeRid("beta"),
        NodeGeneration(8),
        ObjectGeneration(1),
        SpotKind.INVALID,
        ROOM,
        "activating",
        MeshName("east"),
    )
    assert "east" == cbor2.loads(actor.encode())["mesh"]
    assert actor == SpotRecord.decode(actor.encode())


# --- claims (Rules 1 and 2) ----------------------------------------------------------------------


@pytest.mark.spec("ID-6.12")
async def test_a_claim_writes_the_record_and_the_counter_and_the_next_one_grows(
    stores: Stores, mesh: MeshName, caplog: pytest.LogCaptureFixture
) -> None:
    """A first claim writes an activating record owned by this run with generation 1 and the
    counter 1 under the mesh's keys; once released, the id claimed again gets generation 2
    and the counter stays; releasing the first incarnation again is refused and logged."""
    alpha = Node(stores.location, mesh, "alpha")
    store = stores.location
    spot = SpotId("room-1")
    first = await claimed(alpha, spot)
    expected = SpotRecord(
        alpha.rid,
        alpha.generation,
        ObjectGeneration(1),
        SpotKind.USER,
        ROOM,
        "activating",
        mesh,
    )
    assert Claim(spot, expected, first.version) == first
    record = await found(store, f"m/{mesh.value}/spot/room-1")
    assert first.version == record.version
    assert expected == SpotRecord.decode(record.value)
    assert expected == await alpha.authority.read(spot)
    counter = await found(store, f"m/{mesh.value}/generation/room-1")
    assert 1 == cbor2.loads(counter.value)

    assert await alpha.authority.release(first) is True
    assert await alpha.authority.read(spot) is None
    assert 1 == cbor2.loads((await found(store, f"m/{mesh.value}/generation/room-1")).value)
    second = await claimed(alpha, spot)
    assert ObjectGeneration(2) == second.record.generation
    assert 2 == cbor2.loads((await found(store, f"m/{mesh.value}/generation/room-1")).value)
    with caplog.at_level(logging.WARNING, logger="zlink_trio.runtime.authority"):
        assert await alpha.authority.release(first) is False  # the first incarnation's version
    assert ["authority record of room-1 was not ours any more"] == caplog.messages
    assert second.record == await alpha.authority.read(spot)


@pytest.mark.spec("DEC-21")
async def test_an_actor_claim_uses_the_store_wide_actor_keys(
    stores: Stores, mesh: MeshName
) -> None:
    """Actor ids are unique across the store: their record and counter carry no mesh prefix,
    the record names the owner's mesh and the counter lists it next to the last generation."""
    alpha = Node(stores.location, mesh, "alpha")
    actor = ActorId(f"actor-{uuid.uuid4().hex[:8]}")
    claim = await claimed(alpha, actor, SpotKind.INVALID)
    record = await found(stores.location, f"actor/{actor.value}")
    assert claim.version == record.version
    assert mesh == SpotRecord.decode(record.value).mesh
    counter = await found(stores.location, f"actor-generation/{actor.value}")
    assert {"g": 1, "meshes": [mesh.value]} == cbor2.loads(counter.value)
    assert isinstance(await stores.location.read(f"m/{mesh.value}/spot/{actor.value}"), Missing)


@pytest.mark.spec("ID-6.12", "DEC-21")
async def test_an_actor_id_claimed_again_in_another_mesh_grows_and_lists_both_meshes(
    stores: Stores, mesh: MeshName
) -> None:
    """An Actor id released in one mesh and claimed in another gets the next generation, and
    the counter lists both meshes; a claim of the first mesh racing a claim of the second (its
    write conflicts on the counter) retries with the generation after it and keeps both."""
    other = MeshName(f"t-{uuid.uuid4().hex[:12]}")
    alpha, wrapper = interposed(stores, mesh, "alpha")
    beta = Node(stores.location, other, "beta")
    actor = ActorId(f"actor-{uuid.uuid4().hex[:8]}")
    key = f"actor-generation/{actor.value}"
    assert await alpha.authority.release(await claimed(alpha, actor, SpotKind.INVALID))
    second = await claimed(beta, actor, SpotKind.INVALID)
    assert ObjectGeneration(2) == second.record.generation
    both = sorted([mesh.value, other.value])
    assert {"g": 2, "meshes": both} == cbor2.loads((await found(stores.location, key)).value)
    assert await beta.authority.release(second)

    async def beta_comes_and_goes() -> None:
        assert await beta.authority.release(await claimed(beta, actor, SpotKind.INVALID))

    wrapper.before_write = beta_comes_and_goes
    fourth = await claimed(alpha, actor, SpotKind.INVALID)
    assert ObjectGeneration(4) == fourth.record.generation
    assert {"g": 4, "meshes": both} == cbor2.loads((await found(stores.location, key)).value)


@pytest.mark.spec("ID-6.12", "DEC-21")
async def test_a_plain_actor_counter_keeps_its_form_and_grows(
    stores: Stores, mesh: MeshName
) -> None:
    """A counter in the plain int form (written before counters listed their meshes) has
    unknown meshes: a claim gives the generation after it and writes a plain int again, so no
    mesh is ever taken for its only user."""
    alpha = Node(stores.location, mesh, "alpha")
    actor = ActorId(f"actor-{uuid.uuid4().hex[:8]}")
    key = f"actor-generation/{actor.value}"
    written = await stores.location.write(Batch([IfMissing(key)], [Put(key, cbor2.dumps(6))]))
    assert isinstance(written, Applied)
    claim = await claimed(alpha, actor, SpotKind.INVALID)
    assert ObjectGeneration(7) == claim.record.generation
    assert 7 == cbor2.loads((await found(stores.location, key)).value)


@pytest.mark.spec("DEC-21")
@pytest.mark.parametrize(
    "value",
    [
        cbor2.dumps(-1),
        cbor2.dumps(True),
        cbor2.dumps("3"),
        cbor2.dumps({"g": 3}),
        cbor2.dumps({"g": 3, "meshes": "east"}),
        cbor2.dumps({"g": 3, "meshes": [7]}),
        cbor2.dumps({"g": "3", "meshes": ["east"]}),
        cbor2.dumps({"meshes": ["east"]}),
    ],
)
def test_a_counter_of_another_shape_does_not_decode(value: bytes) -> None:
    """Only the two documented forms decode: a bad writer's counter is never read as a
    generation or a set of meshes."""
    with pytest.raises(ValueError):
        GenerationCounter.decode(value)


def test_the_two_counter_forms_decode_and_encode_back() -> None:
    """A plain int has unknown meshes and stays plain; a map gives its generation and meshes."""
    plain = GenerationCounter.decode(cbor2.dumps(5))
    assert GenerationCounter(5, None) == plain
    assert 5 == cbor2.loads(plain.encode())
    listed = GenerationCounter.decode(cbor2.dumps({"g": 5, "meshes": ["west", "east"]}))
    assert GenerationCounter(5, frozenset({MeshName("east"), MeshName("west")})) == listed
    assert {"g": 5, "meshes": ["east", "west"]} == cbor2.loads(listed.encode())


@pytest.mark.spec("SPOT-15")
async def test_a_held_id_is_reported_with_its_holder(stores: Stores, mesh: MeshName) -> None:
    """A second run claiming a held id gets the holder's record and writes nothing."""
    alpha = Node(stores.location, mesh, "alpha")
    beta = Node(stores.location, mesh, "beta")
    spot = SpotId("room-2")
    claim = await claimed(alpha, spot)
    assert Held(claim.record) == await beta.authority.claim(spot, SpotKind.USER, ROOM)
    record = await found(stores.location, f"m/{mesh.value}/spot/room-2")
    assert claim.version == record.version
    assert 1 == cbor2.loads(
        (await found(stores.location, f"m/{mesh.value}/generation/room-2")).value
    )


@pytest.mark.spec("SPOT-15")
async def test_a_claim_that_loses_the_write_reads_again_and_sees_the_winner(
    stores: Stores, mesh: MeshName
) -> None:
    """Another run claims between this claim's reads and its write: this claim's batch
    conflicts, and reading again it reports the winner."""
    alpha, wrapper = interposed(stores, mesh, "alpha")
    beta = Node(stores.location, mesh, "beta")
    spot = SpotId("room-3")
    won: list[Claim] = []

    async def beta_first() -> None:
        won.append(await claimed(beta, spot))

    wrapper.before_write = beta_first
    outcome = await alpha.authority.claim(spot, SpotKind.USER, ROOM)
    assert 1 == len(won)
    assert Held(won[0].record) == outcome
    record = await found(stores.location, f"m/{mesh.value}/spot/room-3")
    assert won[0].version == record.version


@pytest.mark.spec("SPOT-93")
async def test_a_claim_is_one_statement_unless_its_guess_was_wrong(
    stores: Stores, mesh: MeshName
) -> None:
    """A new id: one write. The same id again on the same run after its record went: one write
    (the run remembers the counter it wrote). On another run, whose guess of the counter is
    wrong: two writes, the second built on what the first one's Conflict carried. A held id: one
    write, answered Held."""
    alpha, alpha_store = interposed(stores, mesh, "alpha")
    beta, beta_store = interposed(stores, mesh, "beta")
    spot = SpotId("room-9")
    key = f"m/{mesh.value}/spot/room-9"
    first = await claimed(alpha, spot)
    assert ["write"] == alpha_store.calls
    assert isinstance(await stores.location.write(Batch([], [Delete(key)])), Applied)
    alpha_store.calls.clear()
    second = await claimed(alpha, spot)
    assert ["write"] == alpha_store.calls
    assert ObjectGeneration(2) == second.record.generation
    assert isinstance(await beta.authority.claim(spot, SpotKind.USER, ROOM), Held)
    assert ["write"] == beta_store.calls
    assert isinstance(await stores.location.write(Batch([], [Delete(key)])), Applied)
    beta_store.calls.clear()
    third = await claimed(beta, spot)
    assert ["write", "write"] == beta_store.calls
    assert ObjectGeneration(3) == third.record.generation
    assert first.record.generation < second.record.generation < third.record.generation


@pytest.mark.spec("ID-6.12")
async def test_a_claim_whose_counter_moved_meanwhile_retries_with_the_next_generation(
    stores: Stores, mesh: MeshName
) -> None:
    """Another run claims and releases between this claim's reads and its write: the counter's
    version changed, so the write conflicts, and the retry claims generation 3."""
    alpha, wrapper = interposed(stores, mesh, "alpha")
    beta = Node(stores.location, mesh, "beta")
    spot = SpotId("room-4")
    assert await alpha.authority.release(await claimed(alpha, spot))

    async def beta_comes_and_goes() -> None:
        assert await beta.authority.release(await claimed(beta, spot))

    wrapper.before_write = beta_comes_and_goes
    claim = await claimed(alpha, spot)
    assert ObjectGeneration(3) == claim.record.generation
    assert alpha.rid == claim.record.owner
    assert claim.version == (await found(stores.location, f"m/{mesh.value}/spot/room-4")).version
    assert 3 == cbor2.loads(
        (await found(stores.location, f"m/{mesh.value}/generation/room-4")).value
    )


# --- liveness and takeover (Rule 5) --------------------------------------------------------------


async def test_without_liveness_checks_a_dead_owners_record_is_held(
    stores: Stores, mesh: MeshName
) -> None:
    """Before membership runs, nobody is taken for dead: the record is held."""
    dead = Node(stores.location, mesh, "dead")
    alpha = Node(stores.location, mesh, "alpha")
    spot = SpotId("room-5")
    claim = await claimed(dead, spot)
    assert Held(claim.record) == await alpha.authority.claim(spot, SpotKind.USER, ROOM)
    assert await alpha.authority.is_stale(claim.record) is False


@pytest.mark.spec("GLOBAL-6")
async def test_a_record_of_an_owner_without_a_live_node_record_is_taken_over(
    stores: Stores, mesh: MeshName, caplog: pytest.LogCaptureFixture
) -> None:
    """With liveness checks on, a record whose owner run has no node record, a node record of
    another generation (also an earlier run of this node's own rid), or one that does not
    decode, is taken over with the next generation, and the takeover is logged; a record of a
    live owner run is held."""
    caplog.set_level(logging.INFO, logger="zlink_trio.runtime.authority")
    store = stores.location
    earlier = Node(store, mesh, "alpha")
    alpha = Node(store, mesh, "alpha")
    await alpha.publish(store, mesh)
    alpha.authority.check_liveness = True
    live = Node(store, mesh, "live")
    await live.publish(store, mesh)
    gone = Node(store, mesh, "gone")
    restarted = Node(store, mesh, "restarted")
    await Node(store, mesh, "restarted").publish(store, mesh)  # the same rid, a newer run
    garbled = Node(store, mesh, "garbled")
    key = f"m/{mesh.value}/node/garbled"
    assert isinstance(await store.write(Batch([], [Put(key, b"\xff")])), Applied)

    held = await claimed(live, SpotId("live-1"))
    assert Held(held.record) == await alpha.authority.claim(SpotId("live-1"), SpotKind.USER, ROOM)
    for owner in (gone, restarted, garbled, earlier):
        spot = SpotId(f"{owner.rid.value}-{owner.generation.value}")
        before = await claimed(owner, spot)
        assert await alpha.authority.is_stale(before.record) is True
        caplog.clear()
        claim = await claimed(alpha, spot)
        assert [f"taking over {spot} from {owner.rid}, which is not live"] == caplog.messages
        assert (alpha.rid, alpha.generation) == (claim.record.owner, claim.record.owner_generation)
        assert ObjectGeneration(2) == claim.record.generation
        record = await found(store, f"m/{mesh.value}/spot/{spot.value}")
        assert claim.version == record.version
        assert claim.record == SpotRecord.decode(record.value)


async def test_an_owner_is_judged_in_the_mesh_its_record_names(
    stores: Stores, mesh: MeshName
) -> None:
    """This run's own records are never stale, and a record naming another mesh is judged by
    the node record in that mesh, not in this one."""
    store = stores.location
    alpha = Node(store, mesh, "alpha")
    alpha.authority.check_liveness = True
    own = await claimed(alpha, SpotId("own-1"))  # alpha has published no node record
    assert await alpha.authority.is_stale(own.record) is False
    other = MeshName(f"{mesh.value}-other")
    beta = Node(store, other, "beta")
    await beta.publish(store, other)
    theirs = SpotRecord(
        beta.rid, beta.generation, ObjectGeneration(1), SpotKind.INVALID, ROOM, "ready", other
    )
    assert await alpha.authority.is_stale(theirs) is False
    assert await alpha.authority.is_stale(attrs.evolve(theirs, mesh=None)) is True
    await beta.publish(store, mesh)
    assert await alpha.authority.is_stale(attrs.evolve(theirs, mesh=None)) is False
    elsewhere = Node(store, mesh, "elsewhere")
    await elsewhere.publish(store, mesh)
    absent = SpotRecord(
        elsewhere.rid,
        elsewhere.generation,
        ObjectGeneration(1),
        SpotKind.INVALID,
        ROOM,
        "ready",
        other,
    )
    assert await alpha.authority.is_stale(absent) is True


# --- Ready, release, unknown outcomes (Rules 3 and 4) --------------------------------------------


async def test_mark_ready_writes_ready_on_the_claimed_version_only(
    stores: Stores, mesh: MeshName
) -> None:
    """Ready is written on the claim's version and returns the new version; when the record
    changed under its owner, it raises and writes nothing."""
    alpha = Node(stores.location, mesh, "alpha")
    spot = SpotId("ready-1")
    claim = await claimed(alpha, spot)
    ready = await alpha.authority.mark_ready(claim)
    record = await found(stores.location, f"m/{mesh.value}/spot/ready-1")
    assert ready.version == record.version
    assert ready.version != claim.version
    assert "ready" == SpotRecord.decode(record.value).state
    assert (
        Claim(
            spot,
            SpotRecord(
                alpha.rid, alpha.generation, ObjectGeneration(1), SpotKind.USER, ROOM, "ready", mesh
            ),
            record.version,
        )
        == ready
    )
    with pytest.raises(LookupError, match="ready-1"):
        await alpha.authority.mark_ready(claim)
    assert record.version == (await found(stores.location, f"m/{mesh.value}/spot/ready-1")).version


@pytest.mark.spec("SPOT-91")
async def test_forget_if_ours_deletes_only_a_record_this_run_wrote(
    stores: Stores, mesh: MeshName
) -> None:
    """After a claim of unknown outcome: this run's record is deleted whatever its version;
    another run's, also one of the same rid, is kept; a missing one is nothing to do."""
    store = stores.location
    alpha = Node(store, mesh, "alpha")
    again = Node(store, mesh, "alpha")  # the same rid, another run
    beta = Node(store, mesh, "beta")
    ours = await claimed(alpha, SpotId("f-1"))
    await alpha.authority.mark_ready(ours)  # a version the caller did not see
    await alpha.authority.forget_if_ours(SpotId("f-1"))
    assert await alpha.authority.read(SpotId("f-1")) is None
    for other in (again, beta):
        spot = SpotId(f"f-{other.rid.value}")
        theirs = await claimed(other, spot)
        await alpha.authority.forget_if_ours(spot)
        assert theirs.record == await alpha.authority.read(spot)
    await alpha.authority.forget_if_ours(SpotId("f-missing"))
    assert await alpha.authority.read(SpotId("f-missing")) is None


# --- reclaim (Rule 6) ----------------------------------------------------------------------------


async def reclaim_scene(stores: Stores, mesh: MeshName, janitor: Node) -> dict[str, Node]:
    """Records of a dead run (two Spots, one Actor), of another dead run (one Spot), of a live
    run (one Spot, one Actor), of the janitor (one Spot), an Actor of a dead run of another
    mesh, and a record that does not decode."""
    store = stores.location
    nodes = {
        "dead": Node(store, mesh, "dead"),
        "also": Node(store, mesh, "also"),
        "live": Node(store, mesh, "live"),
    }
    await nodes["live"].publish(store, mesh)
    for name, node in nodes.items():
        await claimed(node, SpotId(f"{name}-a"))
    await claimed(nodes["dead"], SpotId("dead-b"))
    tag = uuid.uuid4().hex[:8]
    await claimed(nodes["dead"], ActorId(f"{tag}-dead"), SpotKind.INVALID)
    await claimed(nodes["live"], ActorId(f"{tag}-live"), SpotKind.INVALID)
    await claimed(janitor, SpotId("janitor-a"))
    stranger = Node(store, MeshName(f"{mesh.value}-x"), "dead")
    await claimed(stranger, ActorId(f"{tag}-a-stranger"), SpotKind.INVALID)
    bad = f"m/{mesh.value}/spot/a-garbled"  # sorts first: skipping it keeps the rest
    assert isinstance(await store.write(Batch([IfMissing(bad)], [Put(bad, b"\x01")])), Applied)
    nodes["tag"] = Node(store, mesh, tag)  # carries the tag for the caller
    return nodes


async def left(stores: Stores, mesh: MeshName, tag: str) -> set[str]:
    """The Spot and Actor record keys of the scene still in the store."""
    keys: set[str] = set()
    for prefix in (f"m/{mesh.value}/spot/", f"actor/{tag}-"):
        page = await stores.location.scan(prefix, 100)
        assert isinstance(page, ScanPage)
        keys |= {record.key.split("/")[-1] for record in page.records}
    return keys


@pytest.mark.spec("GLOBAL-13")
@pytest.mark.parametrize("page", [1, None], ids=["one-per-page", "one-page"])
async def test_reclaim_deletes_what_one_dead_run_held_then_the_sweep_the_rest(
    stores: Stores, mesh: MeshName, page: int | None
) -> None:
    """``reclaim(owner)`` deletes the Spot and Actor records of that owner's dead run in this
    mesh and nothing else; the sweep (``None``) then deletes every other dead run's, keeping the
    live run's, the janitor's own, another mesh's and what does not decode. Pages are followed
    to the end (one record per page), and a record skipped on a page keeps none of the rest."""
    janitor, wrapper = interposed(stores, mesh, "janitor")
    janitor.authority.check_liveness = True
    wrapper.page = page
    scene = await reclaim_scene(stores, mesh, janitor)
    tag = scene["tag"].rid.value
    everything = {
        "dead-a", "dead-b", f"{tag}-dead", "also-a", "live-a", f"{tag}-live",
        "janitor-a", f"{tag}-a-stranger", "a-garbled",
    }  # fmt: skip
    assert everything == await left(stores, mesh, tag)
    assert 3 == await janitor.authority.reclaim(NodeRid("dead"))
    assert everything - {"dead-a", "dead-b", f"{tag}-dead"} == await left(stores, mesh, tag)
    assert 1 == await janitor.authority.reclaim(None)
    kept = {"live-a", f"{tag}-live", "janitor-a", f"{tag}-a-stranger", "a-garbled"}
    assert kept == await left(stores, mesh, tag)
    assert 0 == await janitor.authority.reclaim(None)


async def test_reclaim_without_liveness_checks_deletes_nothing(
    stores: Stores, mesh: MeshName
) -> None:
    """Before membership runs, no owner is taken for dead, so nothing is reclaimed."""
    janitor = Node(stores.location, mesh, "janitor")
    scene = await reclaim_scene(stores, mesh, janitor)
    before = await left(stores, mesh, scene["tag"].rid.value)
    assert 0 == await janitor.authority.reclaim(None)
    assert before == await left(stores, mesh, scene["tag"].rid.value)


async def test_reclaim_starts_a_scan_again_when_its_snapshot_expired_and_gives_up_after_three(
    stores: Stores, mesh: MeshName
) -> None:
    """An expired scan starts again from the first page; after three restarts of one prefix the
    reclaim moves on (the next sweep tries again)."""
    janitor, wrapper = interposed(stores, mesh, "janitor")
    janitor.authority.check_liveness = True
    wrapper.page = 1
    scene = await reclaim_scene(stores, mesh, janitor)
    tag = scene["tag"].rid.value
    spots = f"m/{mesh.value}/spot/"
    # Spots: one page, then expired: the scan starts again from the first page.
    wrapper.expire = [False, True]
    assert 3 == await janitor.authority.reclaim(NodeRid("dead"))
    assert (spots, None) == wrapper.scans[0]
    assert (spots, None) == wrapper.scans[2]
    assert (spots, None) not in wrapper.scans[3:]
    # Spots expire four times: given up; the Actors are still reclaimed.
    wrapper.scans.clear()
    wrapper.expire = [True, True, True, True]
    assert 0 == await janitor.authority.reclaim(NodeRid("also"))
    assert [(spots, None)] * 4 == wrapper.scans[:4]
    assert ("actor/", None) == wrapper.scans[4]
    assert "also-a" in await left(stores, mesh, tag)
    # Three restarts are still tried.
    wrapper.scans.clear()
    wrapper.expire = [True, True, True]
    assert 1 == await janitor.authority.reclaim(NodeRid("also"))
    assert "also-a" not in await left(stores, mesh, tag)
