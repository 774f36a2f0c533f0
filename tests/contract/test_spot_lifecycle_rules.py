"""User Spot creation and closing as the host runs them: the mesh a create uses (specs/spots.md
SPOT-8), a generated id that is taken (SPOT-11), Spot turns inside the host's nursery
(specs/shutdown.md SHUT-4.2), and a single close that runs the closing of shutdown
(specs/boundaries.md BND-7.2)."""

from __future__ import annotations

import types
import uuid
from typing import ClassVar

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Found, Missing
from zlink_trio._runtime.spots import creation
from zlink_trio.testing import open_test_host, open_test_stores

app = zl.Application()


@app.message("life.Where")
@attrs.frozen
class Where:
    pass


@app.message("life.Placed")
@attrs.frozen
class Placed:
    inside: bool


@app.message("life.Quit")
@attrs.frozen
class Quit:
    pass


class Tree:
    """The task that opened the host, and what each turn of a Room saw of its own task tree."""

    opener: ClassVar[trio.lowlevel.Task | None] = None
    seen: ClassVar[list[tuple[str, bool]]] = []


closings: list[tuple[str, zl.SpotCloseReason]] = []
contexts: list[zl.SpotContext] = []


def _inside_opener() -> bool:
    """Whether the current task descends from the task that opened the host."""
    task: trio.lowlevel.Task | None = trio.lowlevel.current_task()
    while task is not None:
        if task is Tree.opener:
            return True
        nursery = task.parent_nursery
        task = None if nursery is None else nursery.parent_task
    return False


@app.user_spot("life.Room")
class Room(NoMembers):
    @zl.request_handler(Where)
    async def where(self, req: Where) -> Placed:
        inside = _inside_opener()
        Tree.seen.append(("turn", inside))
        return Placed(inside)

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        Tree.seen.append(("closing", _inside_opener()))
        closings.append((self.context.spot_id.value, closing.reason))
        contexts.append(self.context)


@app.instance_spot("life.Probe")
class Probe(zl.InstanceSpot):
    @zl.request_handler(Where)
    async def where(self, req: Where) -> Placed:
        return Placed(_inside_opener())

    @zl.packet_handler(Quit)
    async def quit(self, msg: Quit) -> None:
        await self.context.close()

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        closings.append((self.context.spot_id.value, closing.reason))
        contexts.append(self.context)


def config(store_dsn: str) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)


@pytest.mark.spec("SPOT-8")
async def test_a_create_uses_the_named_mesh_or_the_hosts_only_one(store_dsn: str) -> None:
    """in_mesh(name) of the host's mesh and no in_mesh both create in that mesh; in_mesh naming
    a mesh that does not exist ends with NOT_FOUND and creates nothing."""
    async with zl.open_host(app, config(store_dsn)) as host:
        named = await host.spots.get_or_create("m-1", "life.Room").in_mesh(host.mesh.value).submit()
        plain = await host.spots.create("life.Room").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await host.spots.get_or_create("m-2", "life.Room").in_mesh("no-such-mesh").submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        assert [host.mesh, host.mesh] == [named.spot_ref.mesh_name, plain.spot_ref.mesh_name]
        with pytest.raises(zl.ZLinkError) as missing:
            await host.route.request_to_spot("m-2", Where(), reply_type=Placed).submit()
        assert zl.ErrorKind.NOT_FOUND == missing.value.kind


@pytest.mark.spec("SPOT-11")
async def test_create_whose_generated_id_is_taken_ends_already_exists(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """create() that draws the id of a live Spot ends with ALREADY_EXISTS without drawing
    another id, and the live Spot stays as it was."""
    taken = uuid.uuid4()
    drawn: list[uuid.UUID] = []

    def draw() -> uuid.UUID:
        drawn.append(taken)
        return taken

    monkeypatch.setattr(creation, "uuid", types.SimpleNamespace(uuid4=draw))
    async with zl.open_host(app, config(store_dsn)) as host:
        first = await host.spots.create("life.Room").submit()
        assert zl.SpotId(str(taken)) == first.spot_ref.spot_id
        with pytest.raises(zl.ZLinkError) as caught:
            await host.spots.create("life.Room").submit()
        assert zl.ErrorKind.ALREADY_EXISTS == caught.value.kind
        assert 2 == len(drawn)
        assert await host.spots.close(first.spot_ref) is True


@pytest.mark.spec("SHUT-4.2")
async def test_spot_turns_run_inside_the_nursery_of_the_host(store_dsn: str) -> None:
    """A Spot's message turn and its on_closing at shutdown run in tasks that descend from the
    task that opened the host, so the host outlives them."""
    Tree.opener = trio.lowlevel.current_task()
    Tree.seen = []
    with trio.fail_after(30):
        async with zl.open_host(app, config(store_dsn)) as host:
            await host.spots.get_or_create("tree-1", "life.Room").submit()
            await host.route.request_to_spot("tree-1", Where(), reply_type=Placed).submit()
    assert [("turn", True), ("closing", True)] == Tree.seen


@pytest.mark.spec("BND-7.2")
async def test_a_single_close_runs_the_closing_that_shutdown_runs(store_dsn: str) -> None:
    """spots.close and an Instance Spot's context.close() each run on_closing and release the
    Spot's store record, as shutdown does for the Spot it closes; every closed context then
    refuses to act."""
    closings.clear()
    contexts.clear()
    async with open_test_stores(store_dsn) as stores:
        async with open_test_host(app, dsn=store_dsn) as host:
            prefix = f"m/{host.mesh.value}/spot/"
            user = await host.spots.get_or_create("one-user", "life.Room").submit()
            probe_call = host.route.request_to_spot("one-probe", Where(), reply_type=Placed)
            await probe_call.instance_spot().submit()
            await host.spots.get_or_create("at-shutdown", "life.Room").submit()
            spots = host.host._tree.spots
            assert spots is not None  # the host is open
            probe = spots.activations[zl.SpotId("one-probe")]
            assert await host.spots.close(user.spot_ref) is True
            await host.route.send_to_spot("one-probe", Quit()).submit()
            with trio.fail_after(10):
                await probe.closed.wait()
            assert isinstance(await stores.location.read(prefix + "at-shutdown"), Found)
            singly = [
                await stores.location.read(prefix + name) for name in ("one-user", "one-probe")
            ]
            assert [Missing, Missing] == [type(record) for record in singly]
        assert isinstance(await stores.location.read(prefix + "at-shutdown"), Missing)
    expected = [
        ("one-user", zl.SpotCloseReason.EXPLICIT_CLOSE),
        ("one-probe", zl.SpotCloseReason.EXPLICIT_CLOSE),
        ("at-shutdown", zl.SpotCloseReason.HOST_SHUTDOWN),
    ]
    assert expected == closings
    for context in contexts:
        with pytest.raises(zl.ZLinkError) as caught:
            context.route.send_to_spot("at-shutdown", Quit())
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
