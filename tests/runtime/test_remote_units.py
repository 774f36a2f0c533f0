"""The outbound side of global addressing on its own (routing/remote.py, Rules 1-8): the routing
cache, waiting for a route, the errors of a remote call and what membership, the transport and the
store's hints change. Every neighbour is a stand-in the test drives (authority records, peers,
routes, store hints), on a clock that jumps ahead when every task waits, so deadlines are exact.
"""

from __future__ import annotations

import logging
import math
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import attrs
import pytest
import trio
import trio.testing

from zlink_trio._integration.store import Changed, Resync
from zlink_trio._integration.transport import PeerAddress, RouteLost, RouteUp
from zlink_trio._integration.transport.routes import PeerRun
from zlink_trio._runtime.engines.clock import TRIO_CLOCK
from zlink_trio._runtime.ownership.authority import SpotRecord
from zlink_trio._runtime.ownership.node_record import NodeRecord, PeerChanged, PeerDown, PeerUp
from zlink_trio._runtime.routing.janitor import SWEEP_LEASES
from zlink_trio._runtime.routing.remote import STALE, Owner, Remote
from zlink_trio._wire import Send
from zlink_trio.errors import ErrorKind, ZLinkError
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

MESH = MeshName("units")
ME = NodeRid("m-self")
PEER = NodeRid("peer")
ROOM = SpotId("room")
USER = ActorId("user")
LEASE = 2.0


def record_of(owner: NodeRid, generation: int = 1) -> SpotRecord:
    return SpotRecord(
        owner,
        NodeGeneration(generation),
        ObjectGeneration(1),
        SpotKind.USER,
        StableTypeName("units.Room"),
        "ready",
    )


def node_record(rid: NodeRid, generation: int = 1, endpoints: bool = True) -> NodeRecord:
    if not endpoints:
        return NodeRecord(rid, NodeGeneration(generation))
    return NodeRecord(
        rid,
        NodeGeneration(generation),
        application_endpoint="tcp://127.0.0.1:5001",
        completion_endpoint="tcp://127.0.0.1:5002",
    )


class Authority:
    """Authority records by target; ``stale`` owners are not live; ``held`` blocks reads."""

    def __init__(self) -> None:
        self.records: dict[Any, SpotRecord] = {}
        self.stale: set[NodeRid] = set()
        self.reads = 0
        self.read_targets: list[Any] = []
        self.asked_liveness: list[NodeRid] = []
        self.held = False
        self.reclaimed: list[NodeRid | None] = []
        self.reclaim_result: int | ZLinkError = 0

    async def read(self, target: Any) -> SpotRecord | None:
        self.reads += 1
        self.read_targets.append(target)
        if self.held:
            await trio.sleep_forever()
        return self.records.get(target)

    async def is_stale(self, record: SpotRecord) -> bool:
        self.asked_liveness.append(record.owner)
        return record.owner in self.stale

    async def reclaim(self, owner: NodeRid | None) -> int:
        self.reclaimed.append(owner)
        if isinstance(self.reclaim_result, ZLinkError):
            raise self.reclaim_result
        return self.reclaim_result


class Messages:
    """The registry's codec: a message travels as its text."""

    def encode(self, message: str) -> tuple[StableTypeName, bytes]:
        return StableTypeName("units.Text"), message.encode()

    def encode_within(self, message: str, limit: int) -> tuple[StableTypeName, bytes]:
        name, payload = self.encode(message)
        assert len(payload) <= limit
        return name, payload

    def decode(self, name: StableTypeName, payload: bytes) -> object:
        return payload.decode() if name == StableTypeName("units.Text") else int(payload)


class Membership:
    def __init__(self) -> None:
        self.known: dict[NodeRid, NodeRecord] = {}
        self.send_events, self.events = trio.open_memory_channel[Any](math.inf)
        self.load_source: Any = None

    def peers(self) -> dict[NodeRid, NodeRecord]:
        return self.known

    def subscribe(self) -> trio.MemoryReceiveChannel[Any]:
        return self.events

    def load_from(self, source: Any) -> None:
        self.load_source = source


class Mesh:
    """The transport: which peers are up, what was sent and asked, and what it answers."""

    def __init__(self) -> None:
        self.up: set[NodeRid] = set()
        self.sent: list[tuple[NodeRid, Send]] = []
        self.asked: list[dict[str, Any]] = []
        self.error: ZLinkError | None = None
        self.reply = SimpleNamespace(reply_type=StableTypeName("units.Text"), payload=b"pong")
        self.added: list[PeerAddress] = []
        self.removed: list[NodeRid] = []
        self.ended: list[tuple[str, ZLinkError]] = []
        self.refuse_peer = False
        self.send_changes, self.route_changes = trio.open_memory_channel[Any](math.inf)

    def is_up(self, peer: NodeRid) -> PeerRun | None:
        return PeerRun(peer, NodeGeneration(1)) if peer in self.up else None

    async def send(self, peer: NodeRid, message: Send) -> None:
        await trio.lowlevel.cancel_shielded_checkpoint()  # as the real one (TRN-11)
        if self.error is not None:
            raise self.error
        self.sent.append((peer, message))

    async def request(self, peer: NodeRid, **fields: Any) -> Any:
        await trio.lowlevel.checkpoint()
        self.asked.append({"peer": peer, **fields})
        if self.error is not None:
            raise self.error
        return self.reply

    def end_requests(self, error: ZLinkError) -> int:
        self.ended.append(("requests", error))
        return 0

    def end_sends(self, error: ZLinkError) -> None:
        self.ended.append(("sends", error))

    def add_peer(self, address: PeerAddress) -> None:
        if self.refuse_peer:
            raise ValueError("refused")
        self.added.append(address)

    def remove_peer(self, node_rid: NodeRid) -> None:
        self.removed.append(node_rid)


class Store:
    def __init__(self) -> None:
        self.send_hints, self.hints = trio.open_memory_channel[Any](math.inf)

    @contextmanager
    def changes(self) -> Iterator[trio.MemoryReceiveChannel[Any]]:
        yield self.hints


class Scene:
    def __init__(self, limit: int = 4 * 1024 * 1024) -> None:
        self.authority = Authority()
        self.membership = Membership()
        self.mesh = Mesh()
        self.store = Store()
        self.load = 0
        node = SimpleNamespace(
            mesh=MESH,
            node_rid=ME,
            authority=self.authority,
            registry=SimpleNamespace(messages=Messages()),
            config=SimpleNamespace(node_lease=LEASE, max_message_bytes=limit),
            clock=TRIO_CLOCK,
            trace=None,
        )
        self.remote = Remote(node, self.store, self.membership, lambda: self.load)  # type: ignore[arg-type]  # stand-ins
        self.remote.mesh = self.mesh  # type: ignore[assignment]  # a stand-in transport

    def live(self, rid: NodeRid, generation: int = 1) -> None:
        self.membership.known[rid] = node_record(rid, generation)


@pytest.fixture
def scene() -> Scene:
    return Scene()


@pytest.fixture
async def running(scene: Scene) -> AsyncIterator[Scene]:
    """The scene with ``Remote.run``'s tasks following peers, routes and hints."""
    async with trio.open_nursery() as nursery:
        await nursery.start(scene.remote.run)
        yield scene
        nursery.cancel_scope.cancel()


async def settle() -> None:
    """Let every task run until all of them wait."""
    await trio.testing.wait_all_tasks_blocked()


# --- resolving an owner (Rules 1 and 2) ----------------------------------------------------------


@pytest.mark.spec("ROUTE-1", "ROUTE-4")
async def test_owner_of_reads_the_record_once_and_tells_live_stale_and_none(
    scene: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    """No record, or this host's own: ``None``. A live peer's record: its owner, cached (no second
    read) until forgotten, with no liveness read for a known live run. An owner that is not a
    known peer is asked about: stale gives ``STALE`` (not cached), live gives the owner; a known
    peer of another generation likewise."""
    authority = scene.authority
    remote = scene.remote
    assert await remote.owner_of(ROOM, math.inf) is None
    authority.records[ROOM] = record_of(ME)
    assert await remote.owner_of(ROOM, math.inf) is None
    authority.records[ROOM] = record_of(PEER)
    scene.live(PEER)
    authority.stale.add(PEER)  # the store would say otherwise: it is not asked
    owner = await remote.owner_of(ROOM, math.inf)
    assert isinstance(owner, Owner)
    assert PEER == owner.node_rid
    assert [] == authority.asked_liveness  # a live peer of that run needs no liveness read
    authority.stale.clear()
    reads = authority.reads
    authority.records.clear()
    again = await remote.owner_of(ROOM, math.inf)
    assert isinstance(again, Owner)
    assert PEER == again.node_rid
    assert reads == authority.reads
    remote.forget(ROOM)
    assert await remote.owner_of(ROOM, math.inf) is None
    assert reads + 1 == authority.reads

    scene.membership.known.clear()
    authority.records[USER] = record_of(NodeRid("dead"))
    authority.stale.add(NodeRid("dead"))
    assert STALE is await remote.owner_of(USER, math.inf)
    assert STALE is await remote.owner_of(USER, math.inf)
    assert reads + 3 == authority.reads  # a stale answer is not cached
    authority.records[ROOM] = record_of(NodeRid("unseen"))
    unseen = await remote.owner_of(ROOM, math.inf)
    assert isinstance(unseen, Owner)
    assert NodeRid("unseen") == unseen.node_rid
    scene.live(NodeRid("dead"), generation=2)  # the rid restarted; the record is of run 1
    assert STALE is await remote.owner_of(USER, math.inf)


async def test_owner_of_ends_at_its_deadline_when_the_store_does_not_answer(
    scene: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    scene.authority.held = True
    deadline = trio.current_time() + 3.0
    with pytest.raises(ZLinkError) as caught:
        await scene.remote.owner_of(ROOM, deadline)
    assert ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
    assert "room" in caught.value.message
    assert deadline == trio.current_time()


# --- remote calls (Rule 3) -----------------------------------------------------------------------


@pytest.mark.spec("CMP-4.3")
async def test_a_send_goes_to_the_owner_with_its_payload_type_and_metadata(scene: Scene) -> None:
    scene.mesh.up.add(PEER)
    await scene.remote.send(Owner(PEER), ROOM, "hello", {"k": "v"}, StableTypeName("units.Room"))
    assert [
        (
            PEER,
            Send(
                ROOM,
                StableTypeName("units.Text"),
                b"hello",
                StableTypeName("units.Room"),
                (("k", "v"),),
            ),
        )
    ] == scene.mesh.sent


@pytest.mark.spec("MSG-6")
async def test_a_message_to_a_peer_is_bounded_by_the_limit_its_record_names() -> None:
    """A peer whose record names a limit below this host's gets nothing over it: a send and a
    request end PROTOCOL_ERROR naming both limits before the transport sees them; one within it
    goes. A run whose record names no limit (an older version) is held to this host's own limit
    (here 8 MiB), not to the default 4 MiB (Rule 9; limits.py)."""
    scene = Scene(limit=8 * 1024 * 1024)
    remote = scene.remote
    scene.mesh.up.add(PEER)
    events = scene.membership.send_events
    async with trio.open_nursery() as nursery:
        await nursery.start(remote.run)
        events.send_nowait(PeerUp(attrs.evolve(node_record(PEER), max_message_bytes=10)))
        await settle()
        with pytest.raises(ZLinkError) as sent:
            await remote.send(Owner(PEER), ROOM, "x" * 11, {}, None)
        with pytest.raises(ZLinkError) as asked:
            await remote.request(Owner(PEER), ROOM, "x" * 11, str, {}, None, math.inf)
        for caught in (sent, asked):
            assert ErrorKind.PROTOCOL_ERROR == caught.value.kind
            assert (
                "a units.Text message of 11 bytes is over the message limit of 10 bytes of peer "
                "(this host's limit is 8388608 bytes)"
            ) == caught.value.message
        assert ([], []) == (scene.mesh.sent, scene.mesh.asked)
        await remote.send(Owner(PEER), ROOM, "x" * 10, {}, None)
        assert "pong" == await remote.request(Owner(PEER), ROOM, "x" * 10, str, {}, None, 1e9)
        events.send_nowait(PeerDown(PEER, NodeGeneration(1)))
        events.send_nowait(PeerUp(node_record(PEER, 2)))  # its record has no limit
        await settle()
        large = "x" * (5 * 1024 * 1024)  # over 4 MiB, within this host's 8 MiB
        await remote.send(Owner(PEER), ROOM, large, {}, None)
        assert "pong" == await remote.request(Owner(PEER), ROOM, large, str, {}, None, 1e9)
        nursery.cancel_scope.cancel()
    sizes = [10, len(large)]
    assert sizes == [len(send.payload) for _peer, send in scene.mesh.sent]
    assert sizes == [len(asked["payload"]) for asked in scene.mesh.asked]


@pytest.mark.spec("ROUTE-1")
async def test_a_send_the_transport_refuses_forgets_the_owner_only_when_unavailable(
    scene: Scene,
) -> None:
    scene.mesh.up.add(PEER)
    scene.live(PEER)
    scene.authority.records[ROOM] = record_of(PEER)
    for kind, forgotten in ((ErrorKind.CAPACITY_EXCEEDED, False), (ErrorKind.UNAVAILABLE, True)):
        await scene.remote.owner_of(ROOM, math.inf)
        reads = scene.authority.reads
        scene.mesh.error = ZLinkError(kind, "refused")
        with pytest.raises(ZLinkError) as caught:
            await scene.remote.send(Owner(PEER), ROOM, "x", {}, None)
        assert kind == caught.value.kind
        await scene.remote.owner_of(ROOM, math.inf)
        assert reads + forgotten == scene.authority.reads


async def test_a_send_to_a_paused_target_waits_for_the_owners_resume(
    scene: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    scene.mesh.up.add(PEER)
    scene.remote.credits.pause(PEER, ROOM)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scene.remote.send, Owner(PEER), ROOM, "later", {}, None)
        await trio.sleep(5)
        assert [] == scene.mesh.sent
        scene.remote.credits.resume(PEER, ROOM)
    assert 1 == len(scene.mesh.sent)


@pytest.mark.spec("ROUTE-6")
async def test_a_request_carries_the_time_left_and_decodes_the_reply(
    scene: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    scene.mesh.up.add(PEER)
    submitted: list[bool] = []
    deadline = trio.current_time() + 7.5
    reply = await scene.remote.request(
        Owner(PEER),
        USER,
        "ping",
        str,
        {"a": "b"},
        StableTypeName("units.Room"),
        deadline,
        lambda: submitted.append(True),
    )
    assert "pong" == reply
    [asked] = scene.mesh.asked
    assert PEER == asked["peer"]
    assert USER == asked["target"]
    assert StableTypeName("units.Text") == asked["message_type"]
    assert b"ping" == asked["payload"]
    assert 7.5 == asked["timeout"]
    assert StableTypeName("units.Room") == asked["instance_spot_type"]
    assert (("a", "b"),) == asked["metadata"]
    asked["on_submitted"]()
    assert [True] == submitted
    assert asked["operation_id"] is not None


async def test_a_request_with_no_time_left_is_not_sent(
    scene: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    scene.mesh.up.add(PEER)
    for left in (0.0, -1.0):
        with pytest.raises(ZLinkError) as caught:
            await scene.remote.request(
                Owner(PEER), ROOM, "x", str, {}, None, trio.current_time() + left
            )
        assert ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
        assert "room" in caught.value.message
    assert [] == scene.mesh.asked
    await scene.remote.request(Owner(PEER), ROOM, "x", str, {}, None, trio.current_time() + 0.25)
    assert [0.25] == [asked["timeout"] for asked in scene.mesh.asked]


@pytest.mark.spec("ROUTE-3")
async def test_a_reply_of_another_class_is_a_protocol_error(scene: Scene) -> None:
    scene.mesh.up.add(PEER)
    scene.mesh.reply = SimpleNamespace(reply_type=StableTypeName("units.Int"), payload=b"7")
    with pytest.raises(ZLinkError) as caught:
        await scene.remote.request(Owner(PEER), ROOM, "x", str, {}, None, math.inf)
    assert ErrorKind.PROTOCOL_ERROR == caught.value.kind
    assert "the reply is a int, not a str" == caught.value.message


@pytest.mark.spec("ROUTE-1", "ROUTE-10")
async def test_a_failed_request_keeps_its_kind_and_forgets_the_owner_when_it_is_gone(
    scene: Scene,
) -> None:
    """NOT_FOUND and UNAVAILABLE forget the cached owner; the owner's SHUTTING_DOWN becomes
    UNAVAILABLE (it is not this host's shutdown) and forgets it; other kinds keep it."""
    scene.mesh.up.add(PEER)
    scene.live(PEER)
    scene.authority.records[ROOM] = record_of(PEER)
    cases = [
        (ErrorKind.INTERNAL_FAILURE, ErrorKind.INTERNAL_FAILURE, False),
        (ErrorKind.NOT_FOUND, ErrorKind.NOT_FOUND, True),
        (ErrorKind.UNAVAILABLE, ErrorKind.UNAVAILABLE, True),
        (ErrorKind.SHUTTING_DOWN, ErrorKind.UNAVAILABLE, True),
    ]
    for raised, seen, forgotten in cases:
        await scene.remote.owner_of(ROOM, math.inf)
        reads = scene.authority.reads
        scene.mesh.error = ZLinkError(raised, "from the owner")
        with pytest.raises(ZLinkError) as caught:
            await scene.remote.request(Owner(PEER), ROOM, "x", str, {}, None, math.inf)
        assert seen == caught.value.kind
        if raised is ErrorKind.SHUTTING_DOWN:
            assert "the owner of room is shutting down" == caught.value.message
        await scene.remote.owner_of(ROOM, math.inf)
        assert reads + forgotten == scene.authority.reads, raised


# --- waiting for a route (Rules 5-7) -------------------------------------------------------------


@pytest.mark.spec("ROUTE-11")
async def test_calls_wait_for_the_route_and_go_on_when_it_comes_up(
    running: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    """Two requests and a send wait for the route to a peer that is not up yet; when the
    transport reports it up they all go at once, long before their deadline."""
    scene = running
    deadline = trio.current_time() + 30
    with trio.fail_after(25):
        async with trio.open_nursery() as nursery:
            for text in ("one", "two"):
                nursery.start_soon(
                    scene.remote.request, Owner(PEER), ROOM, text, str, {}, None, deadline
                )
            nursery.start_soon(scene.remote.send, Owner(PEER), ROOM, "three", {}, None)
            await trio.sleep(10)
            await settle()
            assert [] == scene.mesh.asked
            scene.mesh.up.add(PEER)
            scene.mesh.send_changes.send_nowait(RouteUp(PeerRun(PEER, NodeGeneration(1))))
    assert 10 == trio.current_time() - (deadline - 30)
    assert {b"one", b"two"} == {asked["payload"] for asked in scene.mesh.asked}
    assert 20 == scene.mesh.asked[0]["timeout"]
    assert 1 == len(scene.mesh.sent)


@pytest.mark.spec("CMP-7.11", "ROUTE-11")
async def test_a_send_waiting_for_its_route_goes_on_when_its_caller_is_cancelled(
    running: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    """A send's wait for the route to its owner is not its caller's: cancelled while the route
    is not up, the send goes on waiting and goes out when the route comes up; the caller's
    cancellation shows only at its next checkpoint after that."""
    scene = running
    seen: list[str] = []
    scope = trio.CancelScope()

    async def send() -> None:
        with scope:
            await scene.remote.send(Owner(PEER), ROOM, "late", {}, None)
            seen.append("sent")
            await trio.lowlevel.checkpoint()
            seen.append("not cancelled")
        seen.append("cancelled" if scope.cancelled_caught else "ended")

    with trio.fail_after(25):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(send)
            await trio.sleep(5)
            await settle()
            scope.cancel()
            await trio.sleep(5)
            await settle()
            assert [] == seen  # still waiting for the route
            assert [] == scene.mesh.sent
            scene.mesh.up.add(PEER)
            scene.mesh.send_changes.send_nowait(RouteUp(PeerRun(PEER, NodeGeneration(1))))
    assert ["sent", "cancelled"] == seen
    assert 1 == len(scene.mesh.sent)


@pytest.mark.spec("ROUTE-11")
async def test_a_request_whose_deadline_passes_waiting_for_a_route_is_deadline_exceeded(
    running: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    deadline = trio.current_time() + 4
    with pytest.raises(ZLinkError) as caught:
        await running.remote.request(Owner(PEER), ROOM, "x", str, {}, None, deadline)
    assert ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
    assert "the request timed out waiting for a route to peer" == caught.value.message
    assert deadline == trio.current_time()


@pytest.mark.spec("ROUTE-5", "ROUTE-12")
async def test_a_peer_that_leaves_or_whose_route_is_lost_ends_the_calls_waiting_for_it(
    running: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    """A waiting call ends UNAVAILABLE at once when the peer's node record goes away, and so
    does every later call to it; likewise when the transport reports its route lost, until the
    route is up again."""
    scene = running
    for rid, change in (
        (PEER, PeerDown(PEER, NodeGeneration(1))),
        (NodeRid("lost"), RouteLost(PeerRun(NodeRid("lost"), NodeGeneration(1)), "silence")),
    ):
        errors: list[ZLinkError] = []

        async def call(rid: NodeRid = rid, errors: list[ZLinkError] = errors) -> None:
            with pytest.raises(ZLinkError) as caught:
                await scene.remote.request(Owner(rid), ROOM, "x", str, {}, None, math.inf)
            errors.append(caught.value)

        started = trio.current_time()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await trio.sleep(1)
            await settle()
            if isinstance(change, PeerDown):
                scene.membership.send_events.send_nowait(change)
            else:
                scene.mesh.send_changes.send_nowait(change)
        assert 1 == trio.current_time() - started
        await call()
        assert [ErrorKind.UNAVAILABLE] * 2 == [error.kind for error in errors]
        expected = "peer left the mesh" if rid == PEER else "the route to lost is lost"
        assert expected == errors[1].message
    # The route comes back: calls to it go again.
    scene.mesh.up.add(NodeRid("lost"))
    scene.mesh.send_changes.send_nowait(RouteUp(PeerRun(NodeRid("lost"), NodeGeneration(2))))
    await settle()
    scene.mesh.up.discard(NodeRid("lost"))
    with trio.move_on_after(1) as waited:
        await scene.remote.request(Owner(NodeRid("lost")), ROOM, "x", str, {}, None, math.inf)
    assert waited.cancelled_caught  # it waits for the route again instead of failing
    # The peer comes back up: it is no longer gone.
    scene.membership.send_events.send_nowait(PeerUp(node_record(PEER)))
    await settle()
    with trio.move_on_after(1) as waited:
        await scene.remote.request(Owner(PEER), ROOM, "x", str, {}, None, math.inf)
    assert waited.cancelled_caught


@pytest.mark.spec("CMP-7.10")
async def test_settle_all_ends_waiting_calls_and_the_transports_with_shutting_down(
    running: Scene, autojump_clock: trio.testing.MockClock
) -> None:
    scene = running
    errors: list[ZLinkError] = []

    async def call() -> None:
        with pytest.raises(ZLinkError) as caught:
            await scene.remote.request(Owner(PEER), ROOM, "x", str, {}, None, math.inf)
        errors.append(caught.value)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        await settle()
        scene.remote.settle_all()
    assert [ErrorKind.SHUTTING_DOWN] == [error.kind for error in errors]
    assert "the host is shutting down" == errors[0].message
    assert ["requests", "sends"] == [what for what, _ in scene.mesh.ended]
    assert all(ErrorKind.SHUTTING_DOWN == error.kind for _, error in scene.mesh.ended)
    scene.mesh.up.add(PEER)
    for attempt in (
        scene.remote.request(Owner(PEER), ROOM, "x", str, {}, None, math.inf),
        scene.remote.send(Owner(PEER), ROOM, "x", {}, None),
    ):
        with pytest.raises(ZLinkError) as caught:
            await attempt
        assert ErrorKind.SHUTTING_DOWN == caught.value.kind


# --- what membership, the transport and the store change (Rules 1, 5, 7, 8) ----------------------


@pytest.mark.spec("MESH-19")
async def test_peers_with_endpoints_are_connected_and_departed_ones_removed(
    running: Scene, caplog: pytest.LogCaptureFixture
) -> None:
    scene = running
    events = scene.membership.send_events
    events.send_nowait(PeerUp(node_record(PEER, endpoints=False)))
    await settle()
    assert [] == scene.mesh.added
    events.send_nowait(PeerChanged(node_record(PEER)))
    await settle()
    assert [PeerAddress(PEER, "tcp://127.0.0.1:5001", "tcp://127.0.0.1:5002")] == scene.mesh.added
    scene.mesh.refuse_peer = True
    with caplog.at_level(logging.WARNING, logger="zlink_trio.runtime.remote"):
        events.send_nowait(PeerUp(node_record(NodeRid("odd"))))
        events.send_nowait(PeerUp(node_record(NodeRid("next"))))
        await settle()
    assert ["cannot connect to odd: refused", "cannot connect to next: refused"] == caplog.messages
    events.send_nowait(PeerDown(PEER, NodeGeneration(1)))
    await settle()
    assert [PEER] == scene.mesh.removed


@pytest.mark.spec("ROUTE-1", "ROUTE-12")
async def test_the_cache_forgets_what_a_departed_or_lost_owner_held_and_its_pauses(
    running: Scene,
) -> None:
    scene = running
    other = NodeRid("other")
    for rid in (PEER, other):
        scene.live(rid)
    scene.authority.records.update({ROOM: record_of(PEER), USER: record_of(other)})
    for change, gone in (
        (PeerDown(PEER, NodeGeneration(1)), PEER),
        (RouteLost(PeerRun(other, NodeGeneration(1)), "silence"), other),
    ):
        for target in (ROOM, USER):
            await scene.remote.owner_of(target, math.inf)
        scene.remote.credits.pause(gone, ROOM)
        scene.authority.read_targets.clear()
        if isinstance(change, PeerDown):
            scene.membership.send_events.send_nowait(change)
        else:
            scene.mesh.send_changes.send_nowait(change)
        await settle()
        assert not scene.remote.credits.is_paused(gone, ROOM)
        for target in (ROOM, USER):
            await scene.remote.owner_of(target, math.inf)
        # Only the gone owner's target was forgotten, so only it was read again.
        assert [ROOM if gone == PEER else USER] == scene.authority.read_targets


@pytest.mark.spec("ROUTE-1")
async def test_store_hints_make_the_cache_forget_the_keys_they_name(running: Scene) -> None:
    scene = running
    scene.live(PEER)
    targets = [ROOM, USER, SpotId("spare")]
    scene.authority.records.update({target: record_of(PEER) for target in targets})

    async def reads_after(hint: object) -> int:
        for target in targets:
            await scene.remote.owner_of(target, math.inf)
        before = scene.authority.reads
        scene.store.send_hints.send_nowait(hint)
        await settle()
        for target in targets:
            await scene.remote.owner_of(target, math.inf)
        return scene.authority.reads - before

    assert 1 == await reads_after(Changed(frozenset({"m/units/spot/room"})))
    assert 1 == await reads_after(Changed(frozenset({"actor/user"})))
    assert 0 == await reads_after(Changed(frozenset({"m/other/spot/room", "m/units/node/x"})))
    assert 3 == await reads_after(Resync())


async def test_the_load_is_read_from_the_host_when_the_record_is_written(scene: Scene) -> None:
    """Remote gives membership the host's load as a source read at each write (MESH-14)."""
    async with trio.open_nursery() as nursery:
        await nursery.start(scene.remote.run)
        scene.load = 4
        assert 4 == scene.membership.load_source()
        scene.load = 9
        assert 9 == scene.membership.load_source()
        nursery.cancel_scope.cancel()


@pytest.mark.spec("GLOBAL-13")
async def test_the_smallest_live_rid_reclaims_a_departed_peer_and_sweeps(
    scene: Scene, autojump_clock: trio.testing.MockClock, caplog: pytest.LogCaptureFixture
) -> None:
    """The janitor (no live peer with a smaller RID) reclaims what a departed peer left and,
    every SWEEP_LEASES leases, what any dead run left; another host does neither. A failing
    reclaim is logged and the host runs on."""
    caplog.set_level(logging.INFO, logger="zlink_trio.runtime.remote")
    authority = scene.authority
    scene.live(NodeRid("z-later"))
    authority.reclaim_result = 2
    async with trio.open_nursery() as nursery:
        await nursery.start(scene.remote.run)
        scene.membership.send_events.send_nowait(PeerDown(PEER, NodeGeneration(1)))
        await settle()
        assert [PEER] == authority.reclaimed
        assert ["reclaimed 2 records that peer left"] == caplog.messages
        await trio.sleep(SWEEP_LEASES * LEASE - 1)
        assert [PEER] == authority.reclaimed
        await trio.sleep(1)
        await settle()
        assert [PEER, None] == authority.reclaimed
        assert "reclaimed 2 records that dead runs left" == caplog.messages[-1]
        authority.reclaim_result = ZLinkError(ErrorKind.UNAVAILABLE, "store down")
        await trio.sleep(SWEEP_LEASES * LEASE)
        await settle()
        assert [PEER, None, None] == authority.reclaimed
        assert (
            "could not reclaim the records of None: UNAVAILABLE: store down" == caplog.messages[-1]
        )
        scene.membership.send_events.send_nowait(PeerDown(NodeRid("broken"), NodeGeneration(1)))
        await settle()
        assert (
            "could not reclaim the records of broken: UNAVAILABLE: store down"
            == (caplog.messages[-1])
        )
        authority.reclaim_result = 0
        caplog.clear()
        scene.membership.send_events.send_nowait(PeerDown(NodeRid("quiet"), NodeGeneration(1)))
        await settle()
        assert [] == caplog.messages  # nothing reclaimed, nothing said
        scene.live(NodeRid("a-first"))  # a smaller RID: that host is the janitor now
        scene.membership.send_events.send_nowait(PeerDown(NodeRid("x"), NodeGeneration(1)))
        await trio.sleep(SWEEP_LEASES * LEASE)
        assert [PEER, None, None, NodeRid("broken"), NodeRid("quiet")] == authority.reclaimed
        nursery.cancel_scope.cancel()
