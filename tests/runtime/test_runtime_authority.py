"""Spot authority records in the Location Store (authority.py; SHUT-7.3, CMP-9.8)."""

from __future__ import annotations

import uuid

import attrs
import cbor2
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Found,
    IfMissing,
    LocationStore,
    Missing,
    Put,
    StoreConfig,
    open_stores,
)
from zlink_trio._runtime.ownership.authority import SpotRecord
from zlink_trio._runtime.ownership.batches import RecordBatcher

app = zl.Application()
seen_in_closing: list[object] = []


@app.message("auth.Ask")
@attrs.frozen
class Ask:
    how: str


@app.message("auth.Answer")
@attrs.frozen
class Answer:
    text: str


class Probe:
    """What the Spots below report to the test."""

    def __init__(self) -> None:
        self.read_key: str | None = None
        self.dsn = ""
        self.held = trio.Event()
        self.release = trio.Event()
        self.outcomes: list[str] = []
        self.asked: list[tuple[int, str]] = []


probe = Probe()


@app.user_spot("auth.Room")
class Room(NoMembers):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        if probe.read_key is not None:
            async with open_stores(StoreConfig(dsn=probe.dsn), environ={}) as stores:
                seen_in_closing.append(await stores.location.read(probe.read_key))

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        generation = self.context.ref.object_generation.value
        probe.asked.append((generation, req.how))
        if req.how == "relay":
            try:
                return (
                    await self.context.route.request_to_spot(
                        "slow", Ask(f"hold{generation}"), reply_type=Answer
                    )
                    .instance_spot("auth.Slow")
                    .timeout(60)
                    .submit()
                )
            except trio.Cancelled:
                probe.outcomes.append(f"gen{generation}:cancelled")
                raise
        return Answer(f"gen{generation}")


@app.instance_spot("auth.Slow")
class Slow(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        probe.held.set()
        await probe.release.wait()
        return Answer(f"late:{req.how}")


def config(store_dsn: str, mesh: str, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=mesh, store_dsn=store_dsn, **values)  # type: ignore[arg-type]  # test values


@pytest.mark.spec("SHUT-7.3", "SHUT-4.1")
async def test_the_record_is_held_through_on_closing_and_released_after(store_dsn: str) -> None:
    """The authority record names this node while the Spot is Ready and during on_closing, and
    is deleted when the host has shut down; the generation counter stays."""
    global probe
    probe = Probe()
    mesh = f"t-{uuid.uuid4().hex[:8]}"
    key = f"m/{mesh}/spot/room-1"
    probe.read_key = key
    probe.dsn = store_dsn
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        async with zl.open_host(app, config(store_dsn, mesh)) as host:
            await host.spots.get_or_create("room-1", "auth.Room").submit()
            found = await stores.location.read(key)
            assert isinstance(found, Found)
            record = SpotRecord.decode(found.value)
            assert host.node_rid == record.owner
            assert host.node_generation == record.owner_generation
            assert zl.ObjectGeneration(1) == record.generation
            assert zl.SpotKind.USER == record.kind
            assert "ready" == record.state
        assert isinstance(seen_in_closing[-1], Found)
        assert isinstance(await stores.location.read(key), Missing)
        counter = await stores.location.read(f"m/{mesh}/generation/room-1")
        assert isinstance(counter, Found)
        assert 1 == cbor2.loads(counter.value)


@pytest.mark.spec("CMP-9.8", "CMP-17.8")
async def test_a_reply_to_the_previous_generation_never_reaches_the_new_one(
    store_dsn: str,
) -> None:
    """A request made by generation 1 whose reply comes after generation 1 closed and
    generation 2 was created is discarded; generation 2 never sees it."""
    global probe
    probe = Probe()
    mesh = f"t-{uuid.uuid4().hex[:8]}"
    async with zl.open_host(app, config(store_dsn, mesh, closing_timeout=0.2)) as host:
        first = await host.spots.get_or_create("room-3", "auth.Room").submit()
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def relay() -> None:
                    with pytest.raises(zl.ZLinkError):
                        await host.route.request_to_spot(
                            "room-3", Ask("relay"), reply_type=Answer
                        ).submit()

                nursery.start_soon(relay)
                await probe.held.wait()
                assert await host.spots.close(first.spot_ref) is True
        second = await host.spots.get_or_create("room-3", "auth.Room").submit()
        assert second.spot_ref.object_generation.value == 2
        probe.release.set()
        with trio.fail_after(10):
            reply = await host.route.request_to_spot(
                "room-3", Ask("plain"), reply_type=Answer
            ).submit()
        assert Answer("gen2") == reply
        assert 0 == host._node.dispatcher.in_flight
    assert ["gen1:cancelled"] == probe.outcomes
    assert [(1, "relay"), (2, "plain")] == probe.asked


@pytest.mark.spec("CMP-9.8", "CMP-17.8")
async def test_a_new_generation_waiting_on_the_same_target_gets_only_its_own_reply(
    store_dsn: str,
) -> None:
    """Generation 1 waits on a held request and is closed; generation 2 sends the same kind of
    request to the same target. The late reply to generation 1 is discarded, and generation 2
    gets the reply to its own request, not the previous activation's."""
    global probe
    probe = Probe()
    mesh = f"t-{uuid.uuid4().hex[:8]}"
    async with zl.open_host(app, config(store_dsn, mesh, closing_timeout=0.2)) as host:
        first = await host.spots.get_or_create("room-4", "auth.Room").submit()
        replies: list[Answer | zl.ErrorKind] = []

        async def relay() -> None:
            call = host.route.request_to_spot("room-4", Ask("relay"), reply_type=Answer)
            try:
                replies.append(await call.timeout(20).submit())
            except zl.ZLinkError as error:
                replies.append(error.kind)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay)
                await probe.held.wait()
                assert await host.spots.close(first.spot_ref) is True
            ended = replies.pop()  # generation 1's relay ended with its Spot
            assert isinstance(ended, zl.ErrorKind)
            second = await host.spots.get_or_create("room-4", "auth.Room").submit()
            assert 2 == second.spot_ref.object_generation.value
            async with trio.open_nursery() as nursery:
                nursery.start_soon(relay)
                await trio.testing.wait_all_tasks_blocked()
                assert [(1, "relay"), (2, "relay")] == probe.asked
                probe.release.set()
    assert [Answer("late:hold2")] == replies
    assert ["gen1:cancelled"] == probe.outcomes


@pytest.mark.spec("SHUT-4.15")
async def test_a_release_batch_with_a_record_not_ours_releases_the_others(store_dsn: str) -> None:
    """Releases queued together go in one batch; when one record is no longer at the version
    its releaser holds, the batch is settled record by record: the others are deleted, that one
    stays and its releaser hears False."""
    base = f"t/release-{uuid.uuid4().hex[:8]}/"
    keys = [f"{base}{name}" for name in ("a", "b", "c")]
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        store = stores.location
        versions = []
        for key in keys:
            written = await store.write(Batch([IfMissing(key)], [Put(key, b"x")]))
            assert isinstance(written, Applied)
            versions.append(written.versions[0])
        batcher = RecordBatcher(store)
        results: dict[str, bool] = {}

        async def release(key: str, version: int) -> None:
            results[key] = await batcher.release(key, version)

        with trio.fail_after(10):  # a release never answered fails, not hangs
            async with trio.open_nursery() as nursery:
                await nursery.start(batcher.run)
                async with trio.open_nursery() as releases:
                    for key, version in zip(keys, versions, strict=True):
                        stale = version + 1 if key.endswith("b") else version
                        releases.start_soon(release, key, stale)
                batcher.close()
        assert {keys[0]: True, keys[1]: False, keys[2]: True} == results
        assert 1 == batcher.batches  # all three went in one batch first
        assert isinstance(await store.read(keys[0]), Missing)
        assert isinstance(await store.read(keys[1]), Found)
        assert isinstance(await store.read(keys[2]), Missing)


@pytest.mark.spec("SPOT-94", "SHUT-4.15")
async def test_ready_marks_and_releases_queued_together_go_in_one_batch(store_dsn: str) -> None:
    """Two Ready marks (puts) and a release queued together are written in one batch, each on
    its version; a put whose record moved on is then written alone: it hears None, the others
    their new versions (or True), and the store holds exactly what each of them wrote."""
    base = f"t/batch-{uuid.uuid4().hex[:8]}/"
    keys = [f"{base}{name}" for name in ("a", "b", "c", "d")]
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        store = stores.location
        versions = []
        for key in keys:
            written = await store.write(Batch([IfMissing(key)], [Put(key, b"claimed")]))
            assert isinstance(written, Applied)
            versions.append(written.versions[0])
        batcher = RecordBatcher(store)
        puts: dict[str, int | None] = {}
        released: dict[str, bool] = {}

        async def put(key: str, version: int) -> None:
            puts[key] = await batcher.put(key, version, b"ready")

        async def release(key: str, version: int) -> None:
            released[key] = await batcher.release(key, version)

        async def queue_all(stale: str | None) -> None:
            with trio.fail_after(10):  # a change never answered fails, not hangs
                await queue(stale)

        async def queue(stale: str | None) -> None:
            async with trio.open_nursery() as nursery:
                await nursery.start(batcher.run)
                async with trio.open_nursery() as changes:
                    for key, version in zip(keys[:3], versions[:3], strict=True):
                        changes.start_soon(put, key, version + 1 if key == stale else version)
                    changes.start_soon(release, keys[3], versions[3])
                batcher.close()

        await queue_all(stale=None)
        assert 1 == batcher.batches
        assert {keys[3]: True} == released
        for key in keys[:3]:
            found = await store.read(key)
            assert isinstance(found, Found)
            assert (b"ready", found.version) == (found.value, puts[key])
        assert isinstance(await store.read(keys[3]), Missing)

        # Again on the new versions, one of them stale: settled record by record.
        versions = [puts[key] or 0 for key in keys[:3]] + [0]
        written = await store.write(Batch([IfMissing(keys[3])], [Put(keys[3], b"claimed")]))
        assert isinstance(written, Applied)
        versions[3] = written.versions[0]
        batcher = RecordBatcher(store)
        puts.clear()
        released.clear()
        await queue_all(stale=keys[1])
        assert puts[keys[1]] is None
        assert {keys[3]: True} == released
        kept = await store.read(keys[1])
        assert isinstance(kept, Found)
        assert (b"ready", versions[1]) == (kept.value, kept.version)  # untouched
        for key in (keys[0], keys[2]):
            found = await store.read(key)
            assert isinstance(found, Found)
            assert found.version == puts[key]
            assert found.version != versions[keys.index(key)]


@pytest.mark.spec("SPOT-94")
async def test_claims_written_together_each_get_their_own_versions_or_conflict(
    store_dsn: str,
) -> None:
    """Three claim-shaped changes (a record and its counter, each IfMissing) queued together
    commit in one batch and each gets the versions of its own two puts, in order. When one of
    them finds its record taken, each is written alone: the others commit, and that one gets
    a Conflict carrying the records at its own keys."""
    base = f"t/claims-{uuid.uuid4().hex[:8]}/"
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        store = stores.location

        async def claim_all(batcher: RecordBatcher, names: list[str]) -> dict[str, object]:
            results: dict[str, object] = {}

            async def claim(name: str) -> None:
                record, counter = f"{base}{name}/record", f"{base}{name}/counter"
                results[name] = await batcher.write(
                    Batch(
                        [IfMissing(record), IfMissing(counter)],
                        [Put(record, name.encode()), Put(counter, b"1")],
                    )
                )

            with trio.fail_after(10):  # a claim never answered fails, not hangs
                async with trio.open_nursery() as nursery:
                    await nursery.start(batcher.run)
                    async with trio.open_nursery() as claims:
                        for name in names:
                            claims.start_soon(claim, name)
                    batcher.close()
            return results

        batcher = RecordBatcher(store)
        results = await claim_all(batcher, ["a", "b", "c"])
        assert 1 == batcher.batches
        for name in "abc":
            written = results[name]
            assert isinstance(written, Applied)
            record = await store.read(f"{base}{name}/record")
            counter = await store.read(f"{base}{name}/counter")
            assert isinstance(record, Found)
            assert isinstance(counter, Found)
            assert (record.version, counter.version) == written.versions
            assert name.encode() == record.value

        taken_key = f"{base}e/record"
        taken = await store.write(Batch([IfMissing(taken_key)], [Put(taken_key, b"x")]))
        assert isinstance(taken, Applied)
        batcher = RecordBatcher(store)
        results = await claim_all(batcher, ["d", "e", "f"])
        lost = results["e"]
        assert isinstance(lost, Conflict)
        assert IfMissing(f"{base}e/record") == lost.condition
        [held, counted] = lost.current
        assert isinstance(held, Found)
        assert b"x" == held.value
        assert isinstance(counted, Missing)
        for name in "df":
            assert isinstance(results[name], Applied)
            assert isinstance(await store.read(f"{base}{name}/record"), Found)


class _GatedStore:
    """The Location Store with its first write held until ``gate`` is set (what the test must
    control: a batch in flight)."""

    def __init__(self, store: LocationStore) -> None:
        self.store = store
        self.gate = trio.Event()
        self.writes: list[Batch] = []

    async def write(self, batch: Batch) -> Applied | Conflict:
        self.writes.append(batch)
        if len(self.writes) == 1:
            await self.gate.wait()
        return await self.store.write(batch)


@pytest.mark.spec("SPOT-94")
async def test_a_change_whose_caller_went_away_before_its_batch_is_never_written(
    store_dsn: str,
) -> None:
    """A Ready mark queued while another batch is in flight, its caller cancelled before the
    flusher takes it: the flusher skips it, the store never sees it, and the record stays as
    its claim wrote it."""
    base = f"t/dropped-{uuid.uuid4().hex[:8]}/"
    first, second = f"{base}first", f"{base}second"
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        versions = []
        for key in (first, second):
            written = await stores.location.write(Batch([IfMissing(key)], [Put(key, b"claimed")]))
            assert isinstance(written, Applied)
            versions.append(written.versions[0])
        gated = _GatedStore(stores.location)
        batcher = RecordBatcher(gated)  # type: ignore[arg-type]  # only write() is used
        async with trio.open_nursery() as nursery:
            await nursery.start(batcher.run)
            nursery.start_soon(batcher.put, first, versions[0], b"ready")
            await trio.testing.wait_all_tasks_blocked()  # the first batch is in flight
            gone = trio.CancelScope()
            async with trio.open_nursery() as waiting:

                async def mark_second() -> None:
                    with gone:
                        await batcher.put(second, versions[1], b"ready")

                waiting.start_soon(mark_second)
                await trio.testing.wait_all_tasks_blocked()  # queued behind the first
                gone.cancel()
            gated.gate.set()
            await trio.testing.wait_all_tasks_blocked()
            batcher.close()
        assert [[first]] == [[item.key for item in batch.mutations] for batch in gated.writes]
        kept = await stores.location.read(second)
        assert isinstance(kept, Found)
        assert (b"claimed", versions[1]) == (kept.value, kept.version)


@pytest.mark.spec("RELOC-76", "STORE-25")
async def test_changes_written_together_are_quiet_only_when_each_of_them_is(
    store_dsn: str,
) -> None:
    """Behind a batch in flight, two quiet changes are written as one quiet batch (the moves of
    a host relocation share batches, and each stays quiet, RELOC-76); a quiet change queued
    with one that notifies goes in a batch that notifies."""
    base = f"t/quiet-{uuid.uuid4().hex[:8]}/"

    async def written_behind(quiet: list[bool]) -> Batch:
        gated = _GatedStore(stores.location)
        batcher = RecordBatcher(gated)  # type: ignore[arg-type]  # only write() is used
        async with trio.open_nursery() as nursery:
            await nursery.start(batcher.run)
            nursery.start_soon(batcher.write, Batch([], [Put(f"{base}first", b"1")]))
            await trio.testing.wait_all_tasks_blocked()  # the first batch is in flight
            for index, silent in enumerate(quiet):
                key = f"{base}{len(quiet)}-{silent}-{index}"
                nursery.start_soon(batcher.write, Batch([], [Put(key, b"q")], notify=not silent))
            await trio.testing.wait_all_tasks_blocked()  # queued behind the first
            gated.gate.set()
            await trio.testing.wait_all_tasks_blocked()
            batcher.close()
        assert 2 == len(gated.writes)
        assert len(quiet) == len(gated.writes[1].mutations)  # one batch, all of them
        return gated.writes[1]

    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        assert not (await written_behind([True, True])).notify
        assert (await written_behind([True, False])).notify


class _GatedAnnouncements:
    """A store whose first announcement is held until ``gate`` is set; what each says."""

    def __init__(self) -> None:
        self.gate = trio.Event()
        self.said: list[list[str]] = []

    async def announce(self, keys: list[str]) -> None:
        self.said.append(keys)
        if len(self.said) == 1:
            await self.gate.wait()


@pytest.mark.spec("RELOC-76")
async def test_announcements_that_come_while_one_is_on_its_way_go_together_next() -> None:
    """Three moves announce while the first one's announcement is held: each returns at once,
    and their keys go in one announcement after it, each key once."""
    store = _GatedAnnouncements()
    batcher = RecordBatcher(store)  # type: ignore[arg-type]  # only announce() is used
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(batcher.announce, ["a"])
            await trio.testing.wait_all_tasks_blocked()  # "a" is on its way
            await batcher.announce(["b", "c"])
            await batcher.announce(["d", "b"])
            assert [["a"]] == store.said
            store.gate.set()
        await batcher.announce(["e"])  # nothing on its way: at once, alone
    assert [["a"], ["b", "c", "d"], ["e"]] == store.said
