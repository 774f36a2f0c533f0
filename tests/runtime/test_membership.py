"""Node membership through the Location Store (membership.py; specs/mesh.md, MESH-*).

Every test runs against the session's real PostgreSQL in a mesh of its own. Where a test must
show that notifications (not polling) or the observed expiry (not polling) did the work, the
observer polls far less often than the test's time limit.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import timedelta
from typing import Any, cast

import cbor2
import pytest
import trio
import trio.testing

from tests.integration.store.test_location_batch_units import changed_until
from zlink_trio._integration.store import (
    Applied,
    Batch,
    Changed,
    ChangeSubscription,
    Conflict,
    Delete,
    Expired,
    Found,
    IfVersion,
    Missing,
    Put,
    Resync,
    ScanPage,
    StoreConfig,
    Stores,
    open_stores,
)
from zlink_trio._runtime.ownership import peer_watch
from zlink_trio._runtime.ownership.membership import Membership
from zlink_trio._runtime.ownership.node_record import (
    DRAINING,
    NodeRecord,
    PeerChanged,
    PeerDown,
    PeerEvent,
    PeerUp,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, StableTypeName

LOGGER = "zlink_trio.runtime.membership"
SLOW_POLL = 60.0
"""A poll interval far beyond every time limit below: what arrives in time was not polled."""


@pytest.fixture
async def stores(store_dsn: str) -> AsyncIterator[Stores]:
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as opened:
        yield opened


@pytest.fixture
def mesh() -> MeshName:
    """A mesh no other test uses."""
    return MeshName(f"t-{uuid.uuid4().hex[:12]}")


def node(name: str, **fields: Any) -> NodeRecord:
    return NodeRecord(NodeRid(name), NodeGeneration.new(), **fields)


def key_of(mesh: MeshName, rid: NodeRid | str) -> str:
    return f"m/{mesh.value}/node/{rid}"


async def start(nursery: trio.Nursery, membership: Membership) -> trio.CancelScope:
    """Run ``membership`` in ``nursery`` until it has published; cancel the scope to stop it."""
    scope = trio.CancelScope()

    async def runner(task_status: trio.TaskStatus[None]) -> None:
        with scope:
            await membership.run(task_status=task_status)

    await nursery.start(runner)
    return scope


async def next_event(events: trio.MemoryReceiveChannel[PeerEvent], within: float = 10) -> PeerEvent:
    with trio.fail_after(within):
        return await events.receive()


async def next_of(
    events: trio.MemoryReceiveChannel[PeerEvent], rid: str, within: float = 10
) -> PeerEvent:
    """The next event about peer ``rid`` (others of the test's mesh are skipped)."""
    with trio.fail_after(within):
        while True:
            event = await events.receive()
            about = event.record.rid if isinstance(event, PeerUp | PeerChanged) else event.rid
            if about.value == rid:
                return event


async def put(stores: Stores, key: str, value: bytes, retention: float | None) -> Applied:
    """Write ``value`` at ``key`` as another process would (a peer this test plays)."""
    held = timedelta(seconds=retention) if retention is not None else None
    written = await stores.location.write(Batch([], [Put(key, value, held)]))
    assert isinstance(written, Applied)
    return written


# --- the record ----------------------------------------------------------------------------------


@pytest.mark.spec("MESH-1", "MESH-3")
async def test_the_record_is_stored_under_the_node_key_with_a_renewed_lease(
    stores: Stores, mesh: MeshName
) -> None:
    """The run's record sits at m/<mesh>/node/<rid> as a CBOR map without an expiry, and each
    renewal writes a new version of it."""
    record = node(
        "alpha",
        application_endpoint="tcp://127.0.0.1:5555",
        completion_endpoint="tcp://127.0.0.1:5556",
        types=[StableTypeName("chat.Room"), StableTypeName("chat.Lobby")],
        max_message_bytes=65536,
        application_version="4.2",
    )
    alpha = Membership(stores.location, mesh, record, lease=5.0, renew_every=0.2)
    key = key_of(mesh, "alpha")
    async with trio.open_nursery() as nursery:
        scope = await start(nursery, alpha)
        first = await stores.location.read(key)
        assert isinstance(first, Found)
        assert record == NodeRecord.decode(first.value)
        assert {
            "rid": "alpha",
            "generation": record.generation.value,
            "application": "tcp://127.0.0.1:5555",
            "completion": "tcp://127.0.0.1:5556",
            "state": "serving",
            "types": ["chat.Room", "chat.Lobby"],
            "load": 0,
            "max_message": 65536,
            "app_version": "4.2",
        } == cbor2.loads(first.value)
        assert first.expires_at is None  # silence, judged by peers, ends it (MESH-6)
        with trio.fail_after(10):
            await alpha._own._landed.wait()  # the next renewal (quiet: MESH-25)
        renewed = await stores.location.read(key)
        assert isinstance(renewed, Found)
        assert renewed.expires_at is None
        assert renewed.version > first.version
        assert record == NodeRecord.decode(renewed.value)
        scope.cancel()


@pytest.mark.spec("MESH-2")
def test_a_record_round_trips_and_ignores_fields_it_does_not_know() -> None:
    """decode(encode(r)) == r, and a map with extra keys still decodes (a later version)."""
    record = node(
        "a", state=DRAINING, types=[StableTypeName("x.Y")], load=12, max_message_bytes=2048
    )
    assert record == NodeRecord.decode(record.encode())
    extended = dict(cbor2.loads(record.encode()), zone="eu-1")
    assert record == NodeRecord.decode(cbor2.dumps(extended))


GOOD = {
    "rid": "n1",
    "generation": 7,
    "application": "",
    "completion": "",
    "state": "serving",
    "types": [],
    "load": 0,
}


@pytest.mark.spec("MESH-2")
@pytest.mark.parametrize(
    "raw",
    [
        b"",
        b"\xff\x00",
        cbor2.dumps([1, 2]),
        cbor2.dumps({k: v for k, v in GOOD.items() if k != "load"}),
        cbor2.dumps(dict(GOOD, rid="")),
        cbor2.dumps(dict(GOOD, rid=5)),
        cbor2.dumps(dict(GOOD, generation=0)),
        cbor2.dumps(dict(GOOD, generation="7")),
        cbor2.dumps(dict(GOOD, state="gone")),
        cbor2.dumps(dict(GOOD, types="x.Y")),
        cbor2.dumps(dict(GOOD, types=[3])),
        cbor2.dumps(dict(GOOD, load=-1)),
        cbor2.dumps(dict(GOOD, application=None)),
        cbor2.dumps(dict(GOOD, max_message="4096")),
        cbor2.dumps(dict(GOOD, max_message=0)),
        cbor2.dumps(dict(GOOD, max_message=True)),
        cbor2.dumps(dict(GOOD, app_version=3)),
        cbor2.dumps(dict(GOOD, app_version="3.x")),
    ],
)
def test_decode_refuses_malformed_bytes_with_value_error(raw: bytes) -> None:
    """Bytes that are not a complete, well-typed node record raise ValueError; a record without
    the optional fields (an older run's) decodes, its message limit unknown."""
    old = NodeRecord.decode(cbor2.dumps(GOOD))
    assert (NodeRid("n1"), None, "") == (old.rid, old.max_message_bytes, old.curve_key)
    assert "0" == old.application_version
    with pytest.raises(ValueError):
        NodeRecord.decode(raw)


@pytest.mark.spec("MESH-24")
def test_a_record_carries_the_application_version_as_configured() -> None:
    """The version is stored as written ("2.0" stays "2.0"), a record without one (an older
    run's) is version "0", and a record or a value with a malformed version is refused."""
    for version in ("2.10.1", "2.0", "0"):
        record = node("a", application_version=version)
        assert version == cbor2.loads(record.encode())["app_version"]
        assert version == NodeRecord.decode(record.encode()).application_version
    assert "0" == node("a").application_version
    assert "0" == NodeRecord.decode(cbor2.dumps(GOOD)).application_version
    for bad in ("", "1.x", "01", "1..2", "-1", "\u0663", "1" * 65):
        with pytest.raises(ValueError):
            node("a", application_version=bad)
        with pytest.raises(ValueError):
            NodeRecord.decode(cbor2.dumps(dict(GOOD, app_version=bad)))
    with pytest.raises(TypeError):
        node("a", application_version=2)
    with pytest.raises(ValueError):
        NodeRecord.decode(cbor2.dumps(dict(GOOD, app_version=2)))


# --- discovery -----------------------------------------------------------------------------------


@pytest.mark.spec("MESH-4")
async def test_two_nodes_discover_each_other_through_the_store(
    stores: Stores, mesh: MeshName
) -> None:
    """Each run lists the other (never itself) soon after it publishes, and a subscriber sees
    PeerUp; with polling far off, the hints of the change feed did it."""
    a = Membership(stores.location, mesh, node("a"), lease=10.0, poll_every=SLOW_POLL)
    b = Membership(
        stores.location,
        mesh,
        node("b", application_endpoint="tcp://127.0.0.1:7001", types=[StableTypeName("t.S")]),
        lease=10.0,
        poll_every=SLOW_POLL,
    )
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        events = a.subscribe()
        await start(nursery, b)
        with trio.fail_after(5):
            assert b.record == await a.wait_for_peer(b.rid)
            assert a.record == await b.wait_for_peer(a.rid, a.generation)
        assert PeerUp(b.record) == await next_event(events)
        assert {b.rid: b.record} == a.peers()
        assert {a.rid: a.record} == b.peers()
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-4")
async def test_nodes_of_another_mesh_are_not_peers(stores: Stores, mesh: MeshName) -> None:
    """A run in another mesh on the same store never appears among the peers."""
    other = MeshName(f"{mesh.value}-other")
    a = Membership(stores.location, mesh, node("a"), lease=10.0)
    stranger = Membership(stores.location, other, node("s"), lease=10.0)
    b = Membership(stores.location, mesh, node("b"), lease=10.0)
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        await start(nursery, stranger)
        await start(nursery, b)
        with trio.fail_after(5):
            await a.wait_for_peer(b.rid)
        assert {b.rid} == set(a.peers())
        assert {} == stranger.peers()
        nursery.cancel_scope.cancel()


class _NoHints:
    """A change subscription that says only what the test puts in (nothing by default):
    discovery by polling alone."""

    def __init__(self) -> None:
        self.send, self._receive = trio.open_memory_channel[Changed | Resync](10)

    def __enter__(self) -> _NoHints:
        return self

    def __exit__(self, *_exc: object) -> None:
        return None

    async def __anext__(self) -> Changed | Resync:
        return await self._receive.receive()


class DeafStore:
    """The real Location Store whose change feed is silent; it counts the scans (polls). Passed
    where the membership takes its ``LocationStore``: the fault around the real store, with no
    interface in the runtime for it (specs/boundaries.md BND-1.12)."""

    def __init__(self, stores: Stores) -> None:
        self._real = stores.location
        self.scanned = 0
        self._scan = trio.Event()
        self.hints = _NoHints()

    async def scans(self, count: int) -> None:
        while self.scanned < count:
            await self._scan.wait()

    async def read(self, key: str) -> Missing | Found:
        return await self._real.read(key)

    async def write(self, batch: Batch) -> Applied | Conflict:
        return await self._real.write(batch)

    async def scan(self, prefix: str, limit: int, cursor: str | None = None) -> ScanPage | Expired:
        page = await self._real.scan(prefix, limit, cursor)
        self.scanned += 1
        self._scan.set()
        self._scan = trio.Event()
        return page

    def changes(self) -> ChangeSubscription:
        return cast(ChangeSubscription, self.hints)


@pytest.mark.spec("MESH-4")
async def test_polling_alone_discovers_a_peer_that_started_later(
    stores: Stores, mesh: MeshName
) -> None:
    """With no change hints at all, a run still lists a peer that published after its own
    first scans (the one at start and two polls), at a later poll."""
    deaf = DeafStore(stores)
    a = Membership(deaf, mesh, node("a"), lease=10.0, poll_every=0.2)
    b = Membership(stores.location, mesh, node("b"), lease=10.0)
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        with trio.fail_after(5):
            await deaf.scans(3)
        assert {} == a.peers()
        await start(nursery, b)
        with trio.fail_after(5):
            await a.wait_for_peer(b.rid)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-5")
async def test_a_stopped_node_withdraws_and_peers_see_it_down_promptly(
    stores: Stores, mesh: MeshName
) -> None:
    """Cancelling a run deletes its record, and a peer gets PeerDown long before the lease or a
    poll could have told it."""
    a = Membership(stores.location, mesh, node("a"), lease=30.0, poll_every=SLOW_POLL)
    b = Membership(stores.location, mesh, node("b"), lease=30.0, poll_every=SLOW_POLL)
    async with trio.open_nursery() as nursery:
        stop_a = await start(nursery, a)
        await start(nursery, b)
        with trio.fail_after(5):
            await b.wait_for_peer(a.rid)
        events = b.subscribe()
        assert PeerUp(a.record) == await next_event(events)
        stop_a.cancel()
        assert PeerDown(a.rid, a.generation) == await next_event(events, within=5)
        assert {} == b.peers()
        assert isinstance(await stores.location.read(key_of(mesh, "a")), Missing)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-6")
async def test_a_silent_run_is_removed_and_down_after_lease_and_margin(
    stores: Stores, mesh: MeshName
) -> None:
    """A killed host (a record nobody renews) is removed and PeerDown once the watcher saw it
    unchanged for lease + margin on the database clock, though neither a poll nor a
    notification came in the meantime; a run that keeps renewing is never removed."""
    observer = Membership(stores.location, mesh, node("obs"), lease=1.0, poll_every=SLOW_POLL)
    alive = Membership(stores.location, mesh, node("alive"), lease=1.0, renew_every=0.2)
    ghost = node("ghost")
    async with trio.open_nursery() as nursery:
        await start(nursery, observer)
        events = observer.subscribe()
        written = await put(stores, key_of(mesh, "ghost"), ghost.encode(), retention=None)
        assert PeerUp(ghost) == await next_event(events, within=5)
        await start(nursery, alive)
        assert PeerUp(alive.record) == await next_event(events, within=5)
        assert PeerDown(ghost.rid, ghost.generation) == await next_event(events, within=15)
        removed = await stores.location.now()
        assert written.store_now + timedelta(seconds=1.2) <= removed
        # ... and soon after: the watcher looked again when the silence ran out (no poll came).
        assert removed < written.store_now + timedelta(seconds=3.0)
        assert isinstance(await stores.location.read(key_of(mesh, "ghost")), Missing)
        assert [alive.rid] == list(observer.peers())
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-6")
async def test_silence_counts_again_after_the_watcher_lost_sight_of_the_store(
    stores: Stores, mesh: MeshName
) -> None:
    """A store outage seen by the watcher (failed reads) is nobody's silence: a peer silent
    across it gets a whole lease + margin after the store came back before it is removed."""
    flaky = FlakyStore(stores)
    observer = Membership(flaky, mesh, node("obs"), lease=1.0, renew_every=0.2, poll_every=0.1)
    ghost = node("ghost")
    async with trio.open_nursery() as nursery:
        await start(nursery, observer)
        events = observer.subscribe()
        await put(stores, key_of(mesh, "ghost"), ghost.encode(), retention=None)
        assert PeerUp(ghost) == await next_event(events, within=5)
        flaky.failing = True
        await trio.sleep(2.0)  # longer than lease + margin: the outage itself
        flaky.failing = False
        back = await stores.location.now()
        assert PeerDown(ghost.rid, ghost.generation) == await next_event(events, within=15)
        assert await stores.location.now() >= back + timedelta(seconds=1.2)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-6")
async def test_silence_counts_again_after_a_resync(stores: Stores, mesh: MeshName) -> None:
    """A Resync (hints may have been lost) restarts every peer's silence: a peer silent before
    it is removed only lease + margin after the Resync, not after its last write."""
    deaf = DeafStore(stores)
    observer = Membership(deaf, mesh, node("obs"), lease=1.0, renew_every=0.2, poll_every=0.1)
    ghost = node("ghost")
    async with trio.open_nursery() as nursery:
        await start(nursery, observer)
        events = observer.subscribe()
        written = await put(stores, key_of(mesh, "ghost"), ghost.encode(), retention=None)
        assert PeerUp(ghost) == await next_event(events, within=5)
        while await stores.location.now() < written.store_now + timedelta(seconds=0.9):
            await deaf.scans(deaf.scanned + 1)
        resync = await stores.location.now()
        deaf.hints.send.send_nowait(Resync())
        assert PeerDown(ghost.rid, ghost.generation) == await next_event(events, within=15)
        assert await stores.location.now() >= resync + timedelta(seconds=1.2)
        nursery.cancel_scope.cancel()


# --- generations ---------------------------------------------------------------------------------


@pytest.mark.spec("MESH-7")
async def test_a_new_generation_is_down_of_the_old_then_up_of_the_new(
    stores: Stores, mesh: MeshName
) -> None:
    """A record replaced by another generation of the same RID gives PeerDown(old) and then
    PeerUp(new), never a PeerChanged merging the two."""
    observer = Membership(stores.location, mesh, node("obs"), lease=30.0, poll_every=SLOW_POLL)
    old = node("x")
    new = NodeRecord(old.rid, NodeGeneration.new())
    key = key_of(mesh, "x")
    async with trio.open_nursery() as nursery:
        await start(nursery, observer)
        events = observer.subscribe()
        first = await put(stores, key, old.encode(), retention=30.0)
        assert PeerUp(old) == await next_event(events)
        replaced = await stores.location.write(
            Batch(
                [IfVersion(key, first.versions[0])], [Put(key, new.encode(), timedelta(seconds=30))]
            )
        )
        assert isinstance(replaced, Applied)
        assert PeerDown(old.rid, old.generation) == await next_event(events)
        assert PeerUp(new) == await next_event(events)
        with trio.fail_after(5):
            assert new == await observer.wait_for_peer(old.rid, new.generation)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-8", "MESH-7")
async def test_a_restart_waits_for_the_killed_run_to_lapse(stores: Stores, mesh: MeshName) -> None:
    """A new run of a RID whose killed run left its record publishes only after it saw that
    record silent for lease + margin; peers see the old run down and then the new one up."""
    observer = Membership(stores.location, mesh, node("obs"), lease=30.0, poll_every=SLOW_POLL)
    killed = node("x")
    restarted = Membership(
        stores.location, mesh, NodeRecord(killed.rid, NodeGeneration.new()), lease=1.5
    )
    async with trio.open_nursery() as nursery:
        await start(nursery, observer)
        events = observer.subscribe()
        written = await put(stores, key_of(mesh, "x"), killed.encode(), retention=None)
        assert PeerUp(killed) == await next_event(events)
        with trio.fail_after(15):
            await start(nursery, restarted)
        assert await stores.location.now() >= written.store_now + timedelta(seconds=1.8)
        assert PeerDown(killed.rid, killed.generation) == await next_event(events)
        assert PeerUp(restarted.record) == await next_event(events)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-8")
async def test_a_second_run_of_a_live_rid_fails_with_already_exists(
    stores: Stores, mesh: MeshName
) -> None:
    """While the holder keeps renewing, a second run of its RID ends with ALREADY_EXISTS and
    leaves the holder's record alone."""
    holder = Membership(stores.location, mesh, node("x"), lease=2.0, renew_every=0.2)
    second = Membership(
        stores.location, mesh, NodeRecord(holder.rid, NodeGeneration.new()), lease=2.0
    )
    async with trio.open_nursery() as nursery:
        await start(nursery, holder)
        with trio.fail_after(10), pytest.raises(ZLinkError) as caught:
            await second.run()
        assert ErrorKind.ALREADY_EXISTS == caught.value.kind
        assert await second.is_live(holder.rid, holder.generation)
        found = await stores.location.read(key_of(mesh, "x"))
        assert isinstance(found, Found)
        assert holder.record == NodeRecord.decode(found.value)
        nursery.cancel_scope.cancel()


# --- renewal -------------------------------------------------------------------------------------


@pytest.mark.spec("MESH-9", "MESH-22")
async def test_a_renewal_that_finds_the_record_gone_loses_the_lease_for_good(
    stores: Stores, mesh: MeshName
) -> None:
    """Deleting a live run's record behind its back (what peers do to a silent run): the next
    renewal does not write it again, the fence closes for good and the run ends UNAVAILABLE."""
    a = Membership(stores.location, mesh, node("a"), lease=10.0, renew_every=0.3)
    key = key_of(mesh, "a")

    def unavailable(error: ZLinkError) -> bool:
        return error.kind == ErrorKind.UNAVAILABLE and "removed" in str(error)

    with (
        trio.fail_after(10),
        pytest.RaisesGroup(pytest.RaisesExc(ZLinkError, check=unavailable)),
    ):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            assert a.fence.serving
            while True:  # a renewal between the read and the delete changes the version
                before = await stores.location.read(key)
                assert isinstance(before, Found)
                deleted = await stores.location.write(
                    Batch([IfVersion(key, before.version)], [Delete(key)])
                )
                if isinstance(deleted, Applied):
                    break
    assert isinstance(await stores.location.read(key), Missing)
    assert a.fence.lost is not None
    assert not a.fence.serving


@pytest.mark.spec("MESH-10")
async def test_a_run_whose_rid_was_taken_over_stops_and_leaves_the_new_record(
    stores: Stores, mesh: MeshName
) -> None:
    """When a renewal finds another generation's record at its key, the run has lost its
    lease (UNAVAILABLE) and neither overwrites nor deletes that record."""
    a = Membership(stores.location, mesh, node("x"), lease=10.0, renew_every=0.2)
    usurper = NodeRecord(a.rid, NodeGeneration.new())
    key = key_of(mesh, "x")

    def lost(error: ZLinkError) -> bool:
        return error.kind == ErrorKind.UNAVAILABLE and "taken over" in str(error)

    with (
        trio.fail_after(10),
        pytest.RaisesGroup(pytest.RaisesExc(ZLinkError, check=lost)),
    ):
        async with trio.open_nursery() as nursery:
            await nursery.start(a.run)
            mine = await stores.location.read(key)
            assert isinstance(mine, Found)
            taken = await stores.location.write(
                Batch(
                    [IfVersion(key, mine.version)],
                    [Put(key, usurper.encode(), timedelta(seconds=30))],
                )
            )
            assert isinstance(taken, Applied)
    found = await stores.location.read(key)
    assert isinstance(found, Found)
    assert taken.versions[0] == found.version
    assert usurper == NodeRecord.decode(found.value)


class FlakyStore:
    """The real Location Store, failing with UNAVAILABLE while ``failing`` is set, and counting
    scans so a test can wait for polls; passed as ``DeafStore`` is."""

    def __init__(self, stores: Stores) -> None:
        self._real = stores.location
        self._failing = False
        self._era = 0
        self.failures = 0
        self.outage_felt = trio.Event()
        self.wrote_after_outage = trio.Event()
        self.scans = 0
        self._scanned = trio.Event()
        self.writes = 0
        """Writes asked for, counted as each call starts."""

    @property
    def failing(self) -> bool:
        return self._failing

    @failing.setter
    def failing(self, value: bool) -> None:
        self._failing = value
        self._era += 1

    def _check(self) -> int:
        if self._failing:
            self.failures += 1
            if self.failures >= 4:
                self.outage_felt.set()
            raise ZLinkError(ErrorKind.UNAVAILABLE, "test outage")
        return self._era

    async def read(self, key: str) -> Missing | Found:
        self._check()
        return await self._real.read(key)

    async def write(self, batch: Batch) -> Applied | Conflict:
        self.writes += 1
        era = self._check()
        written = await self._real.write(batch)
        if era == self._era and self.failures:
            self.wrote_after_outage.set()
        return written

    async def scan(self, prefix: str, limit: int, cursor: str | None = None) -> ScanPage | Expired:
        self._check()
        page = await self._real.scan(prefix, limit, cursor)
        self.scans += 1
        self._scanned.set()
        self._scanned = trio.Event()
        return page

    async def wait_scans(self, more: int) -> None:
        target = self.scans + more
        while self.scans < target:
            await self._scanned.wait()

    def changes(self) -> ChangeSubscription:
        return self._real.changes()


@pytest.mark.spec("MESH-11")
async def test_a_store_outage_is_retried_and_leaves_the_last_observation(
    stores: Stores, mesh: MeshName
) -> None:
    """While every store call fails, the run keeps going and keeps its peers; afterwards it
    renews its record again and sees changes again."""
    flaky = FlakyStore(stores)
    a = Membership(flaky, mesh, node("a"), lease=10.0, renew_every=0.1, poll_every=0.1)
    peer = Membership(stores.location, mesh, node("p"), lease=10.0)
    async with trio.open_nursery() as nursery:
        stop_peer = await start(nursery, peer)
        await start(nursery, a)
        with trio.fail_after(5):
            await a.wait_for_peer(peer.rid)
        events = a.subscribe()
        assert PeerUp(peer.record) == await next_event(events)
        flaky.failing = True
        with trio.fail_after(10):
            await flaky.outage_felt.wait()
        assert {peer.rid: peer.record} == a.peers()
        flaky.failing = False
        with trio.fail_after(10):
            await flaky.wrote_after_outage.wait()
        assert await a.is_live(a.rid, a.generation)
        stop_peer.cancel()
        assert PeerDown(peer.rid, peer.generation) == await next_event(events)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-14")
async def test_update_writes_state_at_once_and_load_with_the_next_renewal(
    stores: Stores, mesh: MeshName
) -> None:
    """A state change reaches peers well before the next renewal is due; a load change is not
    written until that renewal, then peers see it as PeerChanged."""
    a = Membership(stores.location, mesh, node("a"), lease=10.0, renew_every=3.0)
    observer = Membership(stores.location, mesh, node("obs"), lease=30.0, poll_every=SLOW_POLL)
    # The renewal that carries the load is quiet (MESH-25): a peer sees it when it polls.
    poller = Membership(stores.location, mesh, node("poller"), lease=30.0, poll_every=0.5)
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        await start(nursery, observer)
        await start(nursery, poller)
        events, polled = observer.subscribe(), poller.subscribe()
        assert PeerUp(a.record) == await next_of(events, "a")
        assert PeerUp(a.record) == await next_of(polled, "a")
        a.update(state=DRAINING)
        changed = await next_of(events, "a", within=1.5)
        assert PeerChanged(a.record) == changed
        assert DRAINING == a.record.state
        assert PeerChanged(a.record) == await next_of(polled, "a")
        a.update(load=7)
        found = await stores.location.read(key_of(mesh, "a"))
        assert isinstance(found, Found)
        assert 0 == NodeRecord.decode(found.value).load
        changed = await next_of(polled, "a")
        assert isinstance(changed, PeerChanged)
        assert 7 == changed.record.load
        assert DRAINING == changed.record.state
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-25")
async def test_a_renewal_is_quiet_and_an_urgent_change_is_not(
    stores: Stores, mesh: MeshName
) -> None:
    """Between two keys the test writes, the run renews its record twice (a new load in the
    second): the feed names the record for neither. A state change after them is hinted."""
    a = Membership(stores.location, mesh, node("a"), lease=5.0, renew_every=0.1)
    key, prefix = key_of(mesh, "a"), f"m/{mesh.value}/"
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        with stores.location.changes() as feed:
            await put(stores, prefix + "before", b"1", None)
            await changed_until(feed, prefix + "before", prefix)
            first = await stores.location.read(key)
            with trio.fail_after(10):
                await a._own._landed.wait()
                a.update(load=3)
                await a._own._landed.wait()
            renewed = await stores.location.read(key)
            assert isinstance(first, Found)
            assert isinstance(renewed, Found)
            assert renewed.version > first.version
            assert 3 == NodeRecord.decode(renewed.value).load
            await put(stores, prefix + "after", b"2", None)
            assert {prefix + "after"} == await changed_until(feed, prefix + "after", prefix)
            a.update(state=DRAINING)
            assert {key} == await changed_until(feed, key, prefix)
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-14")
async def test_each_write_reads_the_load_from_its_source(stores: Stores, mesh: MeshName) -> None:
    """With ``load_from``, the load a renewal publishes is the source's value when it is written:
    no ``update`` in between."""
    a = Membership(stores.location, mesh, node("a"), lease=5.0, renew_every=0.1)
    loads = iter(range(10, 1000))
    a.load_from(lambda: next(loads))
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        with trio.fail_after(10):
            await a._own._landed.wait()
        found = await stores.location.read(key_of(mesh, "a"))
        assert isinstance(found, Found)
        published = NodeRecord.decode(found.value).load
        assert 10 < published == a.record.load  # the first write read 10, a renewal read more
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-14")
async def test_a_change_before_the_first_write_costs_no_second_write(
    stores: Stores, mesh: MeshName
) -> None:
    """The host publishes its endpoints before the membership runs: the first write carries
    them, and the renewal loop does not write again at once for that change (a host start is
    one write of the record, not two); a later state change still goes out at once."""
    counting = FlakyStore(stores)
    a = Membership(counting, mesh, node("a"), lease=10.0, renew_every=3.0)
    a.update(application_endpoint="tcp://127.0.0.1:1", completion_endpoint="tcp://127.0.0.1:2")
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        # Every task now waits: the renewal loop on its prompt or timer, or a write in flight
        # (counted when it was asked for).
        await trio.testing.wait_all_tasks_blocked()
        assert 1 == counting.writes
        found = await stores.location.read(key_of(mesh, "a"))
        assert isinstance(found, Found)
        assert "tcp://127.0.0.1:1" == NodeRecord.decode(found.value).application_endpoint
        a.update(state=DRAINING)
        await trio.testing.wait_all_tasks_blocked()
        assert 2 == counting.writes
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-14")
def test_update_refuses_bad_values_and_keeps_the_record() -> None:
    """A bad load or state raises at the call and changes nothing."""
    record = node("a")
    membership = Membership(cast(Any, None), MeshName("m"), record)
    for bad, error in [
        ({"load": -1}, ValueError),
        ({"load": "1"}, TypeError),
        ({"state": "gone"}, ValueError),
        ({"application_endpoint": 5}, TypeError),
    ]:
        with pytest.raises(error):
            membership.update(**bad)
    assert record == membership.record


# --- liveness, bad records, subscribers, arguments ----------------------------------------------


@pytest.mark.spec("MESH-12")
async def test_is_live_reads_the_store_not_the_cache(stores: Stores, mesh: MeshName) -> None:
    """is_live is true exactly for the live record's RID and generation, and answers from the
    store even for a membership that never ran and caches nothing."""
    a = Membership(stores.location, mesh, node("a"), lease=10.0)
    asker = Membership(stores.location, mesh, node("asker"))
    await put(stores, key_of(mesh, "junk"), b"\xff\xfe", retention=30.0)
    async with trio.open_nursery() as nursery:
        await start(nursery, a)
        assert {} == asker.peers()
        assert await asker.is_live(a.rid, a.generation)
        assert not await asker.is_live(a.rid, NodeGeneration.new())
        assert not await asker.is_live(NodeRid("nobody"), a.generation)
        assert not await asker.is_live(NodeRid("junk"), a.generation)
        nursery.cancel_scope.cancel()
    # The nursery has waited for the run to end, withdrawal included.
    assert not await asker.is_live(a.rid, a.generation)


@pytest.mark.spec("MESH-12")
async def test_is_live_raises_unavailable_when_the_store_cannot_answer(
    stores: Stores, mesh: MeshName
) -> None:
    """Unknown is not dead: with the store failing, is_live raises UNAVAILABLE, never False."""
    flaky = FlakyStore(stores)
    asker = Membership(flaky, mesh, node("asker"))
    flaky.failing = True
    with pytest.raises(ZLinkError) as failed:
        await asker.is_live(NodeRid("a"), NodeGeneration.new())
    assert ErrorKind.UNAVAILABLE == failed.value.kind


@pytest.mark.spec("MESH-15")
async def test_records_that_do_not_decode_are_skipped_and_logged(
    stores: Stores, mesh: MeshName, caplog: pytest.LogCaptureFixture
) -> None:
    """Garbage, incomplete maps and a record naming another RID than its key are not peers and
    are logged once each; the watcher keeps working and a good record still comes up."""
    await put(stores, key_of(mesh, "junk"), b"\xff\xfe", retention=30.0)
    await put(stores, key_of(mesh, "partial"), cbor2.dumps({"rid": "partial"}), retention=30.0)
    await put(stores, key_of(mesh, "liar"), node("someone").encode(), retention=30.0)
    counting = FlakyStore(stores)
    observer = Membership(counting, mesh, node("obs"), lease=10.0, poll_every=0.1)
    good = node("good")
    with caplog.at_level(logging.WARNING, logger=LOGGER):
        async with trio.open_nursery() as nursery:
            await start(nursery, observer)
            events = observer.subscribe()
            await put(stores, key_of(mesh, "good"), good.encode(), retention=30.0)
            assert PeerUp(good) == await next_event(events)
            assert {good.rid: good} == observer.peers()
            # A later poll reads the same bad records again; they are not logged again.
            with trio.fail_after(10):
                await counting.wait_scans(3)
            await put(stores, key_of(mesh, "good"), b"\x00garbage", retention=30.0)
            assert PeerDown(good.rid, good.generation) == await next_event(events)
            nursery.cancel_scope.cancel()
    skipped = [r.getMessage() for r in caplog.records if r.name == LOGGER]
    for name in ("junk", "partial", "liar", "good"):
        assert 1 == sum(key_of(mesh, name) in message for message in skipped), (name, skipped)


@pytest.mark.spec("MESH-13", "MESH-17")
async def test_a_subscriber_gets_a_snapshot_first_and_its_stream_ends_with_the_run(
    stores: Stores, mesh: MeshName
) -> None:
    """A late subscriber first gets PeerUp for every known peer; when the run ends the stream
    ends, peers() is empty, wait_for_peer fails SHUTTING_DOWN and run() cannot run again."""
    a = Membership(stores.location, mesh, node("a"), lease=10.0)
    b = Membership(stores.location, mesh, node("b"), lease=10.0)
    async with trio.open_nursery() as nursery:
        stop_a = await start(nursery, a)
        await start(nursery, b)
        with trio.fail_after(5):
            await a.wait_for_peer(b.rid)
        events = a.subscribe()
        assert PeerUp(b.record) == await next_event(events)
        stop_a.cancel()
        with trio.fail_after(5):
            async for event in events:
                pytest.fail(f"no event was due after the snapshot, got {event}")
        assert {} == a.peers()
        with trio.fail_after(5), pytest.raises(ZLinkError) as ended:
            await a.wait_for_peer(b.rid)
        assert ErrorKind.SHUTTING_DOWN == ended.value.kind
        with pytest.raises(ZLinkError) as again:
            await a.run()
        assert ErrorKind.INVALID_OPERATION == again.value.kind
        nursery.cancel_scope.cancel()


@pytest.mark.spec("MESH-13")
async def test_a_subscriber_that_falls_behind_is_dropped(
    stores: Stores, mesh: MeshName, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A subscriber more than the queue limit behind gets what was queued, then its stream
    ends; the membership and other subscribers carry on."""
    monkeypatch.setattr(peer_watch, "MAX_QUEUED_EVENTS", 2)
    observer = Membership(stores.location, mesh, node("obs"), lease=10.0, poll_every=SLOW_POLL)
    records = [node(f"p{i}") for i in range(3)]
    async with trio.open_nursery() as nursery:
        await start(nursery, observer)
        slow = observer.subscribe()
        await stores.location.write(
            Batch(
                [],
                [Put(key_of(mesh, r.rid), r.encode(), timedelta(seconds=30)) for r in records],
            )
        )
        with trio.fail_after(5):
            for record in records:
                await observer.wait_for_peer(record.rid)
        with trio.fail_after(5):
            received = [event async for event in slow]
        assert 2 == len(received)
        assert all(isinstance(e, PeerUp) and e.record in records for e in received)
        monkeypatch.setattr(peer_watch, "MAX_QUEUED_EVENTS", 100)
        fresh = observer.subscribe()
        snapshot = [await next_event(fresh) for _ in records]
        assert [PeerUp(r) for r in records] == snapshot
        assert set(observer.peers()) == {r.rid for r in records}
        nursery.cancel_scope.cancel()


def made(**options: Any) -> Callable[[], object]:
    """A maker of a Membership with ``options`` (never run, so it needs no store)."""
    return lambda: Membership(cast(Any, None), MeshName("m"), node("a"), **options)


@pytest.mark.spec("MESH-16")
@pytest.mark.parametrize(
    ("make", "error"),
    [
        (made(lease=0), ValueError),
        (made(lease=-1), ValueError),
        (made(lease=math.nan), ValueError),
        (made(lease=math.inf), ValueError),
        (made(lease=1e-9), ValueError),
        (made(lease="10"), TypeError),
        (made(lease=True), TypeError),
        (made(lease=3, renew_every=3), ValueError),
        (made(lease=3, renew_every=4), ValueError),
        (made(renew_every=0), ValueError),
        (made(renew_every=-1.0), ValueError),
        (made(poll_every=0), ValueError),
        (made(poll_every="1"), TypeError),
        (lambda: Membership(cast(Any, None), cast(Any, "m"), node("a")), TypeError),
        (lambda: Membership(cast(Any, None), MeshName("m"), cast(Any, "a")), TypeError),
        (lambda: NodeRecord(cast(Any, "a"), NodeGeneration.new()), TypeError),
        (lambda: NodeRecord(NodeRid("a"), cast(Any, 5)), TypeError),
        (lambda: node("a", state="gone"), ValueError),
        (lambda: node("a", load=-1), ValueError),
        (lambda: node("a", load=1.5), TypeError),
        (lambda: node("a", types="x.Y"), TypeError),
        (lambda: node("a", types=["x.Y"]), TypeError),
        (lambda: node("a", types=[StableTypeName("x.Y")] * 2), ValueError),
        (lambda: node("a", application_endpoint=None), TypeError),
        (lambda: node("a", application_version="1.x"), ValueError),
        (lambda: node("a", application_version=1), TypeError),
    ],
)
def test_bad_arguments_are_refused_when_made(
    make: Callable[[], object], error: type[Exception]
) -> None:
    """A lease that is not a positive finite number, a renewal not shorter than the lease, a
    wrong identifier type or a bad record field raises at construction."""
    with pytest.raises(error):
        make()


@pytest.mark.spec("MESH-3")
def test_by_default_a_run_renews_at_a_third_of_its_lease_and_polls_at_half() -> None:
    """The defaults: ``renew_every`` is lease/3 and ``poll_every`` lease/2."""
    membership = made(lease=9.0)()
    assert isinstance(membership, Membership)
    assert 3.0 == membership._renew_every
    assert 4.5 == membership._poll_every
