"""Heartbeats on demand: a peer is watched only while work with it is outstanding (TRN-17,
DEC-31). Real meshes on 127.0.0.1, and a peer run made of raw sockets that says only what the
test makes it say."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.testing
import zmq

from tests.integration.transport.conftest import (
    HEARTBEAT,
    MESH,
    WINDOW,
    ask,
    connect,
    fill,
    node,
    outcome,
    until,
    until_up,
)
from zlink_trio._integration.transport import (
    PeerAddress,
    RouteLost,
    RouteMesh,
    RouteUp,
    link_identity,
)
from zlink_trio._wire import (
    PROTOCOL_VERSION,
    ConnectionRole,
    Heartbeat,
    Hello,
    Reply,
    Request,
    decode,
    encode,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeGeneration, NodeRid, StableTypeName

A = NodeRid("a")
B = NodeRid("b")
X = NodeRid("x")
APPLICATION = ConnectionRole.APPLICATION
COMPLETION = ConnectionRole.COMPLETION
SLACK = 0.3
"""Seconds a busy shared machine may add to a bound in time."""


class RawPeer:
    """Run ``x`` of raw ZeroMQ sockets: its links open its route to a mesh with their Hellos,
    then it sends only what the test tells it to, and its ROUTERs keep what the mesh sent."""

    def __init__(self, mesh: RouteMesh, receive_hwm: int = 1000) -> None:
        context = zmq.Context.instance()
        self.generation = NodeGeneration.new()
        self.routers: dict[ConnectionRole, zmq.Socket[bytes]] = {}
        self.links: dict[ConnectionRole, zmq.Socket[bytes]] = {}
        self.received: dict[ConnectionRole, list[tuple[bytes, object]]] = {}
        endpoints = {APPLICATION: mesh.application_endpoint, COMPLETION: mesh.completion_endpoint}
        for role, endpoint in endpoints.items():
            router = self.routers[role] = context.socket(zmq.ROUTER)
            router.setsockopt(zmq.LINGER, 0)
            router.setsockopt(zmq.RCVHWM, receive_hwm)
            router.bind("tcp://127.0.0.1:*")
            self.received[role] = []
            link = self.links[role] = context.socket(zmq.DEALER)
            link.setsockopt(zmq.LINGER, 0)
            link.setsockopt(zmq.ROUTING_ID, link_identity(X, self.generation))
            link.connect(endpoint)
            self.say(role, Hello(PROTOCOL_VERSION, MESH, X, self.generation, role))
        self.address = PeerAddress(
            X,
            self.routers[APPLICATION].getsockopt_string(zmq.LAST_ENDPOINT),
            self.routers[COMPLETION].getsockopt_string(zmq.LAST_ENDPOINT),
        )

    def say(self, role: ConnectionRole, message: Heartbeat | Hello | Reply) -> None:
        """Send ``message`` on x's link of ``role`` to the mesh."""
        self.links[role].send_multipart(encode(message))

    def read(self, role: ConnectionRole) -> list[tuple[bytes, object]]:
        """Everything the mesh sent to x's ROUTER of ``role`` so far, as (routing id, message)."""
        router = self.routers[role]
        while router.poll(0):
            identity, *frames = router.recv_multipart()
            self.received[role].append((identity, decode(frames)))
        return self.received[role]

    def close(self) -> None:
        for socket in (*self.routers.values(), *self.links.values()):
            socket.close(linger=0)


@contextmanager
def raw_peer(mesh: RouteMesh, receive_hwm: int = 1000) -> Iterator[RawPeer]:
    """A :class:`RawPeer` that is a peer of ``mesh``, closed at the end."""
    peer = RawPeer(mesh, receive_hwm)
    try:
        mesh.add_peer(peer.address)
        yield peer
    finally:
        peer.close()


def heartbeats(messages: list[tuple[bytes, object]], identity: bytes | None = None) -> int:
    """How many of ``messages`` are Heartbeats (from the link ``identity`` only, if given)."""
    return sum(
        1
        for sender, message in messages
        if type(message) is Heartbeat and identity in (None, sender)
    )


async def no_route_change(mesh: RouteMesh, seconds: float) -> None:
    """Fail if ``mesh`` reports a route change within ``seconds``: the passage of time is what
    such a test is about."""
    with trio.move_on_after(seconds):
        change = await mesh.route_changes.receive()
        pytest.fail(f"a route changed: {change}")


async def settle(mesh: RouteMesh, seconds: float) -> None:
    """Let ``seconds`` pass while ``mesh`` runs (what is counted is what it did meanwhile)."""
    await trio.sleep(seconds)


@pytest.mark.spec("TRN-17", "DEC-31")
async def test_an_idle_pair_exchanges_no_heartbeats_and_stays_up() -> None:
    """Two connected meshes with no work outstanding send each other no Heartbeat over two
    liveness windows, and neither judges the other lost."""
    async with node("a") as (a, _), node("b") as (b, _):
        await connect(a, b)
        runs = (a.is_up(B), b.is_up(A))
        await no_route_change(a, 2 * WINDOW)
        assert runs == (a.is_up(B), b.is_up(A))
        nothing: Counter[NodeRid] = Counter()
        assert [nothing] * 4 == [
            a.traffic.heartbeats_sent,
            a.traffic.heartbeats_received,
            b.traffic.heartbeats_sent,
            b.traffic.heartbeats_received,
        ]


@pytest.mark.spec("TRN-17")
async def test_a_request_to_a_silent_peer_ends_unavailable_after_a_whole_window() -> None:
    """x says nothing after its Hellos: idle, a keeps its route up past the window; a request
    to x then ends UNAVAILABLE with RouteLost, no sooner than one window after it started and
    within the window and one interval more; x was sent Heartbeats on the completion link
    only."""
    async with node("a") as (a, _):
        with raw_peer(a) as x:
            with trio.fail_after(10):
                await until_up(a, "x")
            await no_route_change(a, WINDOW + 2 * HEARTBEAT)
            started = trio.current_time()
            with trio.fail_after(10), pytest.raises(ZLinkError) as lost:
                await ask(a, "x", timeout=30)
            took = trio.current_time() - started
            assert ErrorKind.UNAVAILABLE == lost.value.kind
            assert isinstance(a.route_changes.receive_nowait(), RouteLost)
            assert WINDOW <= took <= WINDOW + 2 * HEARTBEAT + SLACK
            assert 0 == heartbeats(x.read(APPLICATION))
            assert WINDOW / HEARTBEAT - 2 <= heartbeats(x.read(COMPLETION))


@pytest.mark.spec("TRN-17")
async def test_a_peer_idle_past_the_window_that_answers_within_it_is_not_lost() -> None:
    """x says nothing for longer than the window while a has no work for it; then a request to
    x, answered half a window later with nothing from x before, gets its reply: x's silence
    counts from the request, not from x's last message."""
    async with node("a") as (a, _):
        with raw_peer(a) as x:
            with trio.fail_after(10):
                await until_up(a, "x")
            await no_route_change(a, WINDOW + 2 * HEARTBEAT)
            replies: list[Reply] = []
            async with trio.open_nursery() as nursery:

                async def request() -> None:
                    replies.append(await ask(a, "x", b"late", timeout=30))

                nursery.start_soon(request)
                with trio.fail_after(5):
                    await until(lambda: any(type(m) is Request for _, m in x.read(APPLICATION)))
                [asked] = [m for _, m in x.read(APPLICATION) if type(m) is Request]
                assert isinstance(asked, Request)
                await settle(a, WINDOW / 2)  # the answer comes late, inside the window
                reply = Reply(
                    asked.reply_route,
                    asked.operation_id,
                    a.config.generation,
                    StableTypeName("r"),
                    asked.payload,
                )
                x.say(COMPLETION, reply)
            assert [b"late"] == [reply.payload for reply in replies]
            assert a.is_up(X) is not None


@pytest.mark.spec("TRN-12", "TRN-17")
async def test_a_send_waiting_at_a_silent_peer_ends_unavailable() -> None:
    """x reads nothing, so a send to it waits at its high-water mark; that waiting send alone
    makes a judge x's silence: it ends UNAVAILABLE within the window and two intervals."""
    async with node("a", send_hwm=1) as (a, _):
        with raw_peer(a, receive_hwm=1):
            with trio.fail_after(10):
                await until_up(a, "x")
            ended: list[ErrorKind | None] = []
            async with trio.open_nursery() as nursery:
                nursery.start_soon(outcome, fill(a, X), ended)
                with trio.fail_after(10):
                    await until(lambda: a.waiting_sends(X) == 1)
                waited = trio.current_time()
                with trio.move_on_after(10):
                    await until(lambda: bool(ended))
                took = trio.current_time() - waited
                a.close()  # a send still waiting ends SHUTTING_DOWN: a failure below, not a hang
            assert [ErrorKind.UNAVAILABLE] == ended
            assert took <= WINDOW + 2 * HEARTBEAT + SLACK


@pytest.mark.spec("TRN-11", "TRN-17", "DEC-31")
async def test_a_slow_peer_whose_reader_is_held_stays_up_while_a_send_waits() -> None:
    """b's application reader is held for two windows while a's send to it waits at the
    high-water mark: b answers a's Heartbeats on the completion connection, so a keeps b's
    route, and the send completes once b reads again."""
    async with node("b", receive_hwm=1) as (b, inbox), node("a", send_hwm=1) as (a, _):
        await connect(a, b)
        inbox.hold = trio.Event()
        ended: list[ErrorKind | None] = []
        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(outcome, fill(a, B), ended)
                try:
                    await until(lambda: a.waiting_sends(B) == 1)
                    await no_route_change(a, 2 * WINDOW)
                finally:
                    inbox.hold.set()  # a waiting send cannot be cancelled: let it finish
        assert [None] == ended
        assert 1 <= b.traffic.heartbeats_sent[A]


@pytest.mark.spec("TRN-17")
async def test_a_heartbeat_is_answered_once_and_never_echoed() -> None:
    """x sends a Heartbeat to idle a: a answers it once, and sends nothing more over the next
    intervals; three Heartbeats at once get one answer (a answered within the half interval)."""
    async with node("a") as (a, _):
        with raw_peer(a) as x:
            with trio.fail_after(10):
                await until_up(a, "x")
                x.say(COMPLETION, Heartbeat())
                await until(lambda: heartbeats(x.read(COMPLETION)) == 1)
            await settle(a, 3 * HEARTBEAT)
            assert 1 == heartbeats(x.read(COMPLETION))
            with trio.fail_after(10):
                for _ in range(3):
                    x.say(COMPLETION, Heartbeat())
                await until(lambda: a.traffic.heartbeats_received[X] == 4)
            await settle(a, 3 * HEARTBEAT)
            assert 2 == heartbeats(x.read(COMPLETION))
            assert 0 == heartbeats(x.read(APPLICATION))


@pytest.mark.spec("TRN-17")
async def test_two_busy_peers_send_about_one_heartbeat_per_interval_each() -> None:
    """a and b each wait for a reply from the other for ten intervals: each sends one Heartbeat
    per interval and at most one answer per interval, never a ping-pong."""
    async with node("a") as (a, _), node("b") as (b, _):
        await connect(a, b)
        intervals = 10
        ended: list[ErrorKind | None] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(outcome, ask(a, "b", timeout=intervals * HEARTBEAT), ended)
            nursery.start_soon(outcome, ask(b, "a", timeout=intervals * HEARTBEAT), ended)
        assert [ErrorKind.DEADLINE_EXCEEDED] * 2 == ended  # neither route was lost
        for mesh, peer in ((a, B), (b, A)):
            assert intervals - 2 <= mesh.traffic.heartbeats_sent[peer] <= 2 * intervals + 2


@pytest.mark.spec("TRN-17", "DEC-31")
async def test_a_lost_route_is_sent_heartbeats_until_its_run_is_heard_again() -> None:
    """a loses silent x while a request waits and makes its links anew; with no work left for
    x, a still sends Heartbeats on its new completion link, and x's answer brings the route
    up again."""
    async with node("a") as (a, _):
        with raw_peer(a) as x:
            with trio.fail_after(10):
                run = await until_up(a, "x")
                await until(lambda: len(x.read(COMPLETION)) == 1)  # a's Hello
            [(first_link, _)] = x.read(COMPLETION)
            with trio.fail_after(10), pytest.raises(ZLinkError):
                await ask(a, "x", timeout=30)
            assert RouteLost(run, "silent for longer than the liveness window") == (
                a.route_changes.receive_nowait()
            )
            with trio.fail_after(10):
                await until(
                    lambda: any(
                        type(m) is Heartbeat and link != first_link
                        for link, m in x.read(COMPLETION)
                    )
                )
                x.say(COMPLETION, Heartbeat())
                assert RouteUp(run) == await a.route_changes.receive()
            assert run == a.is_up(X)
