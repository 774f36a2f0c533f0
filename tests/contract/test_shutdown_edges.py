"""Creations and activations in flight when a host shuts down, and the records it leaves
(specs/shutdown.md SHUT-4.12..SHUT-4.15)."""

from __future__ import annotations

import uuid
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import (
    Applied,
    Batch,
    Conflict,
    Delete,
    Found,
    LocationStore,
    Missing,
    StoreConfig,
    open_stores,
)

app = zl.Application()
constructed: list[str] = []
"""Ids of the Spots whose constructor ran."""


class Block:
    def __init__(self) -> None:
        self.entered = trio.Event()
        self.release = trio.Event()


block = Block()


@app.message("edge.Tick")
@attrs.frozen
class Tick:
    pass


@app.entry_spot
class Entry(zl.EntrySpot):
    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    async def on_create_actor(self, actor: Any, request: object | None) -> zl.ActorCreateResponse:
        """Actors whose id starts with ``block-`` wait here until the test releases them."""
        if str(actor.context.actor_id.value).startswith("block-"):
            block.entered.set()
            await block.release.wait()
        return zl.ActorCreateResponse.accept()


@app.actor("edge.Player")
class Player(zl.Actor):
    def __init__(self) -> None:
        constructed.append(self.context.actor_id.value)

    @zl.packet_handler(Tick)
    async def tick(self, msg: Tick) -> None:
        pass


@app.instance_spot("edge.Counter")
class Counter(zl.InstanceSpot):
    def __init__(self) -> None:
        constructed.append(self.context.spot_id.value)

    @zl.packet_handler(Tick)
    async def tick(self, msg: Tick) -> None:
        pass


@app.user_spot("edge.Room")
class Room(NoMembers):
    def __init__(self) -> None:
        constructed.append(self.context.spot_id.value)


@pytest.fixture(autouse=True)
def reset() -> None:
    global block
    block = Block()
    constructed.clear()


def config(store_dsn: str) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)


async def stored(store_dsn: str, key: str) -> Found | Missing:
    """What the Location Store holds at ``key`` now."""
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        return await stores.location.read(key)


@pytest.mark.spec("SHUT-4.12")
async def test_an_actor_creation_in_flight_ends_shutting_down_at_once(store_dsn: str) -> None:
    """An Actor create waiting in on_create_actor when shutdown begins ends SHUTTING_DOWN
    without waiting for the callback, and leaves no record."""
    actor_id = f"block-{uuid.uuid4().hex[:10]}"
    outcome: list[object] = []
    ended = trio.Event()
    async with zl.open_host(app, config(store_dsn)) as host:

        async def create() -> None:
            try:
                outcome.append((await host.actors.create(actor_id, "edge.Player").submit()).status)
            except zl.ZLinkError as error:
                outcome.append(error.kind)
            finally:
                ended.set()

        async with trio.open_nursery() as nursery:
            try:
                nursery.start_soon(create)
                with trio.fail_after(10):
                    await block.entered.wait()
                nursery.start_soon(host.shutdown)
                # A hang guard, not a wait for time to pass: the creation must end on its own,
                # while on_create_actor is still blocked.
                with trio.fail_after(10):
                    await ended.wait()
            finally:
                block.release.set()
    assert [zl.ErrorKind.SHUTTING_DOWN] == outcome
    assert isinstance(await stored(store_dsn, f"actor/{actor_id}"), Missing)


@pytest.mark.parametrize("step", ["claim", "ready"])
@pytest.mark.spec("SHUT-4.12")
async def test_an_actor_creation_whose_store_write_is_in_flight_ends_shutting_down(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch, step: str
) -> None:
    """An Actor create whose claim, or whose Ready record, is still being written when shutdown
    seals admission ends SHUTTING_DOWN, never becomes Ready and leaves no record. The write is
    held until the seal, so the race is forced."""
    actor_id = f"w-{uuid.uuid4().hex[:10]}"
    key = f"actor/{actor_id}"
    held_at = {"claim": 1, "ready": 2}[step]
    writes = 0
    outcome: list[object] = []
    writing, release = trio.Event(), trio.Event()
    real_write = LocationStore.write

    async def held_write(self: LocationStore, batch: Batch) -> Applied | Conflict:
        nonlocal writes
        if any(
            getattr(m, "key", None) == key and not isinstance(m, Delete) for m in batch.mutations
        ):
            writes += 1
            if writes == held_at:
                writing.set()
                await release.wait()
        return await real_write(self, batch)

    async with zl.open_host(app, config(store_dsn)) as host:

        async def create() -> None:
            try:
                outcome.append((await host.actors.create(actor_id, "edge.Player").submit()).status)
            except zl.ZLinkError as error:
                outcome.append(error.kind)

        monkeypatch.setattr(LocationStore, "write", held_write)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            with trio.fail_after(10):
                await writing.wait()
            nursery.start_soon(host.shutdown)
            await trio.testing.wait_all_tasks_blocked()
            assert not host._node.admitting  # sealed while the write is in flight
            release.set()
    monkeypatch.undo()
    assert [zl.ErrorKind.SHUTTING_DOWN] == outcome
    assert (actor_id in constructed) is (step == "ready")  # no constructor after the seal
    assert isinstance(await stored(store_dsn, key), Missing)


@pytest.mark.spec("SHUT-4.13")
async def test_a_cold_activation_in_flight_runs_no_constructor_after_the_seal(
    store_dsn: str,
) -> None:
    """A send that starts a cold activation, followed at once by shutdown: the activation's
    claim is still in flight at the seal, so its constructor never runs and no record stays."""
    spot_id = f"c-{uuid.uuid4().hex[:10]}"
    host_config = config(store_dsn)
    async with zl.open_host(app, host_config) as host:
        await host.route.send_to_spot(spot_id, Tick()).instance_spot("edge.Counter").submit()
        # No checkpoint since the send was admitted: the activation's claim has not come back.
        await host.shutdown()
    assert spot_id not in constructed
    key = f"m/{host_config.mesh_name.value}/spot/{spot_id}"
    assert isinstance(await stored(store_dsn, key), Missing)


@pytest.mark.spec("SHUT-4.14")
async def test_a_get_or_create_in_flight_ends_shutting_down_and_gives_its_claim_back(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A get_or_create whose claim is in flight when shutdown begins ends SHUTTING_DOWN, runs
    no constructor and leaves no record in the store. The claim's store write is held until
    shutdown has sealed admission, so the race is forced, not hoped for."""
    spot_id = f"r-{uuid.uuid4().hex[:10]}"
    host_config = config(store_dsn)
    key = f"m/{host_config.mesh_name.value}/spot/{spot_id}"
    outcome: list[object] = []
    claiming, release = trio.Event(), trio.Event()
    real_write = LocationStore.write

    async def held_write(self: LocationStore, batch: Batch) -> Applied | Conflict:
        if any(
            getattr(m, "key", None) == key and not isinstance(m, Delete) for m in batch.mutations
        ):
            claiming.set()
            await release.wait()
        return await real_write(self, batch)

    async with zl.open_host(app, host_config) as host:

        async def create() -> None:
            try:
                result = await host.spots.get_or_create(spot_id, "edge.Room").submit()
                outcome.append(result.status)
            except zl.ZLinkError as error:
                outcome.append(error.kind)

        monkeypatch.setattr(LocationStore, "write", held_write)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(create)
            with trio.fail_after(10):
                await claiming.wait()
            nursery.start_soon(host.shutdown)
            await trio.testing.wait_all_tasks_blocked()
            assert not host._node.admitting  # sealed while the claim is in flight
            assert [] == outcome
            release.set()
    monkeypatch.undo()
    assert [zl.ErrorKind.SHUTTING_DOWN] == outcome
    assert spot_id not in constructed
    assert isinstance(await stored(store_dsn, key), Missing)


@pytest.mark.spec("SHUT-4.15")
async def test_shutdown_releases_its_records_in_a_few_batches_and_leaves_none(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host with 200 Spots releases their records at shutdown in a few conditional batches
    (not one store commit each), and none of the records is left in the store."""
    count = 200
    host_config = config(store_dsn)
    prefix = f"m/{host_config.mesh_name.value}/spot/"
    deleting: list[int] = []
    real_write = LocationStore.write

    async def counting_write(self: LocationStore, batch: Batch) -> Applied | Conflict:
        spots = [m for m in batch.mutations if isinstance(m, Delete) and m.key.startswith(prefix)]
        if spots:
            deleting.append(len(spots))
        return await real_write(self, batch)

    ids = [f"many-{number}-{uuid.uuid4().hex[:8]}" for number in range(count)]
    async with zl.open_host(app, host_config) as host:
        async with trio.open_nursery() as nursery:
            for spot_id in ids:
                nursery.start_soon(host.spots.get_or_create(spot_id, "edge.Room").submit)
        monkeypatch.setattr(LocationStore, "write", counting_write)
        await host.shutdown()
    monkeypatch.undo()
    assert count == sum(deleting) - 1  # the Spots and the Entry Spot, each released once
    assert len(deleting) <= 10, deleting  # a few batches, not a commit per record
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        left = [key for key in ids if isinstance(await stores.location.read(prefix + key), Found)]
    assert [] == left
