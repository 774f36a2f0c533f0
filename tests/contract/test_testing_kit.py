"""The testing kit: the shared store, test hosts and meshes, the quiet barrier
(specs/testing.md KIT-1..KIT-5)."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import (
    Batch,
    Found,
    IfMissing,
    Missing,
    Put,
    ScanPage,
    Stores,
)
from zlink_trio._runtime.ownership.authority import READY, GenerationCounter, SpotRecord
from zlink_trio.ids import NodeGeneration, ObjectGeneration, SpotKind, StableTypeName
from zlink_trio.testing import (
    VirtualClock,
    open_test_host,
    open_test_mesh,
    open_test_stores,
    shared_store_folder,
)
from zlink_trio.testing import hosts as kit_hosts

app = zl.Application()
handled: list[int] = []
blocked = trio.Event()


@app.message("kit.Note")
@attrs.frozen
class Note:
    seq: int
    padding: bytes = b""


@app.message("kit.Hold")
@attrs.frozen
class Hold:
    pass


@app.message("kit.Ask")
@attrs.frozen
class Ask:
    pass


@app.message("kit.Where")
@attrs.frozen
class Where:
    node_rid: str


@app.user_spot("kit.Room")
class Room(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        await trio.lowlevel.checkpoint()  # each turn yields once, as real handlers do
        handled.append(msg.seq)

    @zl.packet_handler(Hold)
    async def hold(self, msg: Hold) -> None:
        await blocked.wait()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Where:
        return Where(self.context.ref.node_rid.value)


@app.actor("kit.Waiter")
class Waiter(zl.Actor):
    @zl.packet_handler(Hold)
    async def hold(self, msg: Hold) -> None:
        await blocked.wait()


@pytest.mark.spec("KIT-1")
def test_the_shared_folder_is_per_user_unless_named() -> None:
    """The folder comes from ZLINK_TEST_STORE_DIR, else XDG_CACHE_HOME, else ~/.cache."""
    assert Path("/x/y") == shared_store_folder({"ZLINK_TEST_STORE_DIR": "/x/y"})
    assert Path("/c/zlink_trio/test-store") == shared_store_folder({"XDG_CACHE_HOME": "/c"})
    expected = Path.home() / ".cache" / "zlink_trio" / "test-store"
    assert expected == shared_store_folder({})


_SHARER = """
import sys, time
from zlink_trio.testing import shared_store
with shared_store() as dsn:
    print(dsn, flush=True)
    sys.stdin.readline()  # hold the store until the test says go
"""


@pytest.mark.spec("KIT-1")
def test_processes_of_one_run_share_one_server_that_stops_with_the_last(tmp_path: Path) -> None:
    """Two processes (two xdist workers, two tox envs) get the same server; it keeps serving
    while one remains and stops when the last leaves."""
    env = {k: v for k, v in os.environ.items() if k != "ZLINK_STORE_DSN"}
    env["ZLINK_TEST_STORE_DIR"] = str(tmp_path / "store")
    children = [
        subprocess.Popen(
            [sys.executable, "-c", _SHARER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            text=True,
        )
        for _ in range(2)
    ]
    try:
        dsns = [child.stdout.readline().strip() for child in children if child.stdout]
        assert 2 == len(dsns)
        assert dsns[0] == dsns[1]
        assert dsns[0].startswith("postgresql://")
        pid_file = tmp_path / "store" / "pgdata" / "postmaster.pid"
        assert pid_file.exists()
        first, second = children
        assert first.stdin is not None
        assert second.stdin is not None
        first.stdin.write("go\n")
        first.stdin.flush()
        assert 0 == first.wait(60)
        assert pid_file.exists(), "the server stopped under the second user"
        second.stdin.write("go\n")
        second.stdin.flush()
        assert 0 == second.wait(60)
        assert not pid_file.exists(), "the last user left the server running"
    finally:
        for child in children:
            child.kill()
            child.wait()
            for pipe in (child.stdin, child.stdout):
                if pipe is not None:
                    pipe.close()


@pytest.mark.spec("KIT-2")
async def test_each_test_host_gets_a_mesh_of_its_own(store_dsn: str) -> None:
    """Two test hosts opened without a mesh name are in different meshes: a Spot of one is
    not found from the other."""
    async with open_test_host(app, dsn=store_dsn) as one, open_test_host(app, dsn=store_dsn) as two:
        assert one.mesh != two.mesh
        await one.spots.get_or_create("room", "kit.Room").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await two.route.request_to_spot("room", Ask(), reply_type=Where).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind


@pytest.mark.spec("KIT-3")
def test_the_plugin_is_registered_and_its_fixture_opens_hosts(
    store_dsn: str, tmp_path: Path
) -> None:
    """Installing zlink_trio registers the plugin (pytest11); a user's test file that only asks
    for ``zlink_store`` opens a host on it, in a pytest run of its own."""
    plugins = {
        entry.name: entry.value for entry in importlib.metadata.entry_points(group="pytest11")
    }
    assert "zlink_trio.testing.pytest_plugin" == plugins.get("zlink_trio")
    test_file = tmp_path / "test_user.py"
    test_file.write_text(
        textwrap.dedent(
            """
            import pytest
            import zlink_trio as zl

            app = zl.Application()

            @app.user_spot("user.Room")
            class Room(zl.Spot):
                async def on_actor_join(self, actor_id, request):
                    return zl.SpotActorJoinResult.reject()

                async def on_joined_actor(self, actor):
                    pass

                async def on_leave_actor(self, actor):
                    pass

            async def test_a_user_test(zlink_store):
                async with zlink_store.open_host(app) as host:
                    await host.spots.get_or_create("r", "user.Room").submit()
                    await host.wait_quiet()
                    assert host.mesh.value.startswith("test-")

            @pytest.fixture
            def zlink_app():
                return app

            async def test_with_the_host_fixture(zlink_host):
                await zlink_host.spots.get_or_create("r", "user.Room").submit()
                assert zlink_host.mesh.value.startswith("test-")
            """
        )
    )
    env = dict(os.environ, ZLINK_STORE_DSN=store_dsn)
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "trio_mode=true",
            "--rootdir",
            str(tmp_path),
            str(test_file),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=120,
        check=False,
    )
    assert 0 == result.returncode, result.stdout + result.stderr
    assert "2 passed" in result.stdout
    # Without a zlink_app fixture, zlink_host says what to define instead of guessing.
    lonely = tmp_path / "lonely" / "test_lonely.py"
    lonely.parent.mkdir()
    lonely.write_text("async def test_it(zlink_host):\n    pass\n")
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-p",
            "no:cacheprovider",
            "-o",
            "trio_mode=true",
            "--rootdir",
            str(lonely.parent),
            str(lonely),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=lonely.parent,
        timeout=120,
        check=False,
    )
    assert 0 != result.returncode
    assert "define a fixture `zlink_app`" in result.stdout + result.stderr


@pytest.mark.spec("KIT-4")
async def test_a_test_mesh_of_three_hosts_meets_and_routes(store_dsn: str) -> None:
    """Three hosts of one mesh list each other as peers when the block starts, and a request
    from one reaches a Spot created on another."""
    async with open_test_mesh(app, hosts=3, dsn=store_dsn) as mesh:
        for host in mesh.hosts:
            others = {h.node_rid: h.node_generation for h in mesh.hosts if h is not host}
            assert others == {rid: host.peers[rid] for rid in others}
        await mesh[2].spots.get_or_create("room", "kit.Room").submit()
        where = await mesh[0].route.request_to_spot("room", Ask(), reply_type=Where).submit()
        assert mesh[2].node_rid.value == where.node_rid


@pytest.mark.spec("KIT-4")
async def test_a_mesh_of_no_hosts_is_refused(store_dsn: str) -> None:
    for hosts in (0, -1, True):
        with pytest.raises(ValueError):
            async with open_test_mesh(app, hosts=hosts, dsn=store_dsn):
                pass


@pytest.mark.spec("KIT-5")
async def test_quiet_means_every_send_between_hosts_was_handled(store_dsn: str) -> None:
    """Right after 200 one-way sends of 64 KiB each to a Spot on another host, the barrier
    returns only once all of them ran there: a send completes when the local queue took it, and
    12 MiB take a while to cross libzmq's I/O thread, which Trio does not see."""
    handled.clear()
    padding = bytes(64 * 1024)
    async with open_test_mesh(app, hosts=2, dsn=store_dsn) as mesh:
        await mesh[1].spots.get_or_create("room", "kit.Room").submit()
        for seq in range(200):
            await mesh[0].route.send_to_spot("room", Note(seq, padding)).submit()
        await mesh[0].wait_quiet()
        assert list(range(200)) == handled


@pytest.mark.spec("KIT-5")
async def test_quiet_means_every_local_message_was_handled(store_dsn: str) -> None:
    handled.clear()
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("room", "kit.Room").submit()
        for seq in range(100):
            await host.route.send_to_spot("room", Note(seq)).submit()
        await host.wait_quiet()
        assert list(range(100)) == handled


@pytest.mark.spec("KIT-5")
async def test_a_host_that_never_becomes_quiet_is_named_not_waited_for(store_dsn: str) -> None:
    """A turn that never ends: the barrier raises TimeoutError naming the Spot in its turn,
    after its timeout, instead of returning or hanging."""
    global blocked
    blocked = trio.Event()
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("stuck", "kit.Room").submit()
        await host.route.send_to_spot("stuck", Hold()).submit()
        with pytest.raises(TimeoutError) as caught:
            await host.wait_quiet(timeout=0.3)
        assert "Spot stuck" in str(caught.value)
        assert "in a turn" in str(caught.value)
        blocked.set()
        await host.wait_quiet()


@pytest.mark.spec("KIT-5")
async def test_the_ledger_counts_what_crosses_and_a_message_on_its_way_keeps_it_closed(
    store_dsn: str,
) -> None:
    """The transport counts each send, request and reply on both sides; while the ledger shows
    a message sent and not yet received (here: one taken back from the receiver's count, as if
    it were still in libzmq's hands) the barrier does not open and says so."""
    handled.clear()
    async with open_test_mesh(app, hosts=2, dsn=store_dsn) as mesh:
        first, second = mesh[0], mesh[1]
        await second.spots.get_or_create("room", "kit.Room").submit()
        for seq in range(20):
            await first.route.send_to_spot("room", Note(seq)).submit()
        await first.route.request_to_spot("room", Ask(), reply_type=Where).submit()
        await mesh.wait_quiet()
        out = second.host._tree.remote.mesh.traffic  # the transport's ledger (internal)
        into = first.host._tree.remote.mesh.traffic
        assert 21 == into.sent[second.node_rid] == out.received[first.node_rid]
        assert 1 == out.sent[first.node_rid] == into.received[second.node_rid]  # the reply
        out.received[first.node_rid] -= 1
        with pytest.raises(TimeoutError) as caught:
            await mesh.wait_quiet(timeout=0.2)
        assert f"1 message(s) from {first.node_rid} on their way to {second.node_rid}" in str(
            caught.value
        )
        out.received[first.node_rid] += 1
        await mesh.wait_quiet()


@pytest.mark.spec("KIT-8")
async def test_hosts_of_one_run_share_one_pool_that_outlives_them(store_dsn: str) -> None:
    """Hosts given the run's pool use it and leave it open: a second host works after the first
    closed, and the pool still answers after both."""
    async with open_test_stores(store_dsn) as stores:
        for number in range(2):
            async with open_test_host(app, dsn=store_dsn, stores=stores) as host:
                assert host.host._node.authority._store is stores.location  # the shared pool
                await host.spots.get_or_create(f"room-{number}", "kit.Room").submit()
                where = await host.route.request_to_spot(
                    f"room-{number}", Ask(), reply_type=Where
                ).submit()
                assert host.node_rid.value == where.node_rid
        assert isinstance(await stores.location.read("kit/absent"), Missing)


async def _keys(stores: Stores, mesh: str) -> list[str]:
    page = await stores.location.scan(f"m/{mesh}/", 100)
    assert isinstance(page, ScanPage)
    return [record.key for record in page.records]


@pytest.mark.spec("KIT-12")
async def test_a_mesh_the_kit_named_leaves_nothing_in_the_store(store_dsn: str) -> None:
    """Test hosts on the run's pool, in meshes the kit named: once their pool closed, nothing of
    their meshes is left in the store. A mesh the test named itself is left as it is."""
    async with open_test_stores(store_dsn) as stores:
        async with open_test_host(app, dsn=store_dsn, stores=stores) as host:
            alone = host.mesh.value
            await host.spots.get_or_create("room", "kit.Room").submit()
            assert f"m/{alone}/generation/room" in await _keys(stores, alone)
        async with open_test_mesh(app, hosts=2, dsn=store_dsn, stores=stores) as pair:
            paired = pair[0].mesh.value
            await pair[1].spots.get_or_create("room", "kit.Room").submit()
        own = f"kit-own-{uuid.uuid4().hex[:8]}"
        async with open_test_host(app, dsn=store_dsn, stores=stores, mesh=own) as host:
            await host.spots.get_or_create("room", "kit.Room").submit()
    async with open_test_stores(store_dsn) as stores:
        assert [] == await _keys(stores, alone)
        assert [] == await _keys(stores, paired)
        assert f"m/{own}/generation/room" in await _keys(stores, own)


@pytest.mark.spec("KIT-12")
async def test_the_actors_of_a_mesh_the_kit_named_are_cleared_with_it(store_dsn: str) -> None:
    """A kit-named mesh created Actors ``only`` and ``shared``, and a mesh the test named
    created ``shared`` after it; a crashed host's record of Actor ``left`` names the kit's mesh.
    Once the pool closed: ``only``'s counter and ``left``'s record are gone, and ``shared``'s
    counter lists the test's mesh alone, with its generation as it was."""
    tag = uuid.uuid4().hex[:8]
    only, shared, left = f"only-{tag}", f"shared-{tag}", f"left-{tag}"
    own = f"kit-own-{tag}"
    async with open_test_stores(store_dsn) as stores:
        async with open_test_host(app, dsn=store_dsn, stores=stores) as host:
            finished = host.mesh
            for actor_id in (only, shared):
                await host.actors.create(actor_id, "kit.Waiter").submit()
            planted = SpotRecord(
                host.node_rid,
                NodeGeneration.new(),
                ObjectGeneration(1),
                SpotKind.INVALID,
                StableTypeName("kit.Waiter"),
                READY,
                finished,
            )
            key = f"actor/{left}"
            await stores.location.write(Batch([IfMissing(key)], [Put(key, planted.encode())]))
        async with open_test_host(app, dsn=store_dsn, stores=stores, mesh=own) as host:
            await host.actors.create(shared, "kit.Waiter").submit()
        before = await stores.location.read(f"actor-generation/{shared}")
        assert isinstance(before, Found)
        assert {finished, zl.MeshName(own)} == GenerationCounter.decode(before.value).meshes
    async with open_test_stores(store_dsn) as stores:
        location = stores.location
        assert isinstance(await location.read(f"actor-generation/{only}"), Missing)
        assert isinstance(await location.read(f"actor/{left}"), Missing)
        after = await location.read(f"actor-generation/{shared}")
        assert isinstance(after, Found)
        counter = GenerationCounter.decode(after.value)
        assert {zl.MeshName(own)} == counter.meshes
        assert GenerationCounter.decode(before.value).last == counter.last


@pytest.mark.spec("KIT-12")
async def test_finished_meshes_are_cleared_in_groups_while_the_pool_serves(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With groups of two: the first finished mesh stays while the pool serves on, and goes
    together with the second."""
    monkeypatch.setattr(kit_hosts, "CLEAR_EVERY", 2)
    async with open_test_stores(store_dsn) as stores:
        meshes = []
        for _ in range(2):
            async with open_test_host(app, dsn=store_dsn, stores=stores) as host:
                meshes.append(host.mesh.value)
                await host.spots.get_or_create("room", "kit.Room").submit()
            if len(meshes) == 1:
                assert f"m/{meshes[0]}/generation/room" in await _keys(stores, meshes[0])
        assert [[], []] == [await _keys(stores, mesh) for mesh in meshes]


@pytest.mark.spec("KIT-12")
def test_the_harness_clears_the_meshes_of_its_examples(store_dsn: str) -> None:
    """Each example's mesh is cleared with the next ones or when the harness's loop stops."""
    from hypothesis.stateful import rule

    from zlink_trio.testing import HostStateMachine, stateful

    class Machine(HostStateMachine):
        @rule()
        def nothing(self) -> None:
            pass

    Machine.app = app
    Machine.dsn = store_dsn
    meshes = []
    for _ in range(2):
        machine = Machine()
        machine.run(machine.host.spots.get_or_create("room", "kit.Room").submit)
        meshes.append(machine.host.mesh.value)
        machine.teardown()

    async def left() -> list[list[str]]:
        async with open_test_stores(store_dsn) as stores:
            return [await _keys(stores, mesh) for mesh in meshes]

    before = trio.run(left)
    assert all(
        f"m/{mesh}/generation/room" in keys for mesh, keys in zip(meshes, before, strict=True)
    )
    stateful.stop_harness_loop()
    assert [[], []] == trio.run(left)


ticks: list[float] = []


@app.message("kit.Start")
@attrs.frozen
class Start:
    pass


@app.user_spot("kit.Ticker")
class Ticker(NoMembers):
    @zl.packet_handler(Start)
    async def start(self, msg: Start) -> None:
        self.context.timers.start("t", 10)

    @zl.timer_handler("t")
    async def tick(self, tick: zl.TimerTick) -> None:
        for _ in range(3):  # a tick that takes several passes of the scheduler to finish
            await trio.lowlevel.checkpoint()
        ticks.append(tick.scheduled_at)


@pytest.mark.spec("KIT-9")
async def test_a_test_host_on_a_virtual_clock_settles_with_its_barrier(store_dsn: str) -> None:
    """The kit puts the host's wait_quiet in the clock's settle; advancing 30 s runs the three
    ticks due by then, each to its end."""
    ticks.clear()
    clock = VirtualClock()
    async with open_test_host(app, dsn=store_dsn, clock=clock) as host:
        assert clock.settle == host.wait_quiet
        await host.spots.get_or_create("ticker", "kit.Ticker").submit()
        await host.route.send_to_spot("ticker", Start()).submit()
        await host.wait_quiet()
        await clock.advance(30)
        assert [10.0, 20.0, 30.0] == ticks


@pytest.mark.spec("KIT-5")
async def test_an_actor_in_a_turn_keeps_the_host_busy(store_dsn: str) -> None:
    """An Actor whose turn has not ended is named by the barrier, as a Spot is."""
    global blocked
    blocked = trio.Event()
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.actors.create("waiter", "kit.Waiter").submit()
        await host.route.send_to_actor("waiter", Hold()).submit()
        with pytest.raises(TimeoutError) as caught:
            await host.wait_quiet(timeout=0.3)
        assert "Actor waiter (ready, in a turn)" in str(caught.value)
        blocked.set()
        await host.wait_quiet()
