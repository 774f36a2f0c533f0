"""Handshake refusals and bad input: counted, dropped, and nobody else notices (TRN-2..4,
TRN-20..22)."""

from __future__ import annotations

import random

import attrs
import pytest
import trio
import zmq

from tests.integration.transport.conftest import ask, connect, echo, node, numbered, until
from zlink_trio._integration.transport import (
    OVERSIZED,
    PeerRun,
    RouteMesh,
    link_identity,
    routing_identity,
)
from zlink_trio._wire import (
    PROTOCOL_VERSION,
    ConnectionRole,
    Hello,
    OperationId,
    RefusalReason,
    Reply,
    ReplyRouteId,
    Request,
    Send,
    encode,
)
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import MeshName, NodeGeneration, NodeRid, StableTypeName

MESH_MISMATCH = RefusalReason.MESH_MISMATCH.value
MALFORMED = RefusalReason.MALFORMED.value
NOT_OPENED = RefusalReason.NOT_OPENED.value
PEER_MISMATCH = RefusalReason.PEER_MISMATCH.value
STALE = RefusalReason.STALE_GENERATION.value
WRONG_CONNECTION = RefusalReason.WRONG_CONNECTION.value


def hello(rid: str, generation: NodeGeneration, mesh: str = "test-mesh") -> list[bytes]:
    role = ConnectionRole.APPLICATION
    return encode(Hello(PROTOCOL_VERSION, MeshName(mesh), NodeRid(rid), generation, role))


def raw_dealer(endpoint: str, identity: bytes | None = None) -> zmq.Socket[bytes]:
    """A DEALER outside any mesh, connected to ``endpoint``."""
    socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.DEALER)
    socket.setsockopt(zmq.LINGER, 0)
    if identity is not None:
        socket.setsockopt(zmq.ROUTING_ID, identity)
    socket.connect(endpoint)
    return socket


@pytest.mark.spec("TRN-3")
async def test_peer_of_another_mesh_is_refused_and_never_served() -> None:
    """Nodes of two meshes refuse each other's Hellos, count them and never route to each other."""
    async with node("a") as (a, inbox), node("c", mesh=MeshName("other-mesh")) as (c, _):
        a.add_peer(c.address)
        c.add_peer(a.address)
        with trio.fail_after(10):
            await until(lambda: a.drops[MESH_MISMATCH] == 2 and c.drops[MESH_MISMATCH] == 2)
        assert a.is_up(NodeRid("c")) is None
        assert c.is_up(NodeRid("a")) is None
        with pytest.raises(ZLinkError) as refused:
            await c.send(NodeRid("a"), numbered(0))
        assert ErrorKind.UNAVAILABLE == refused.value.kind
        assert [] == inbox.messages


@pytest.mark.spec("TRN-2", "TRN-4")
async def test_hello_must_come_from_its_own_routing_identity_and_current_run() -> None:
    """A Hello from a foreign routing id, or from the run's routing identity without a link part,
    or of a replaced run, opens nothing and is counted."""
    async with node("a") as (a, inbox):
        first, second = NodeGeneration.new(), NodeGeneration.new()
        endpoint = a.application_endpoint
        sockets = [
            raw_dealer(endpoint, b"Zforeign-identity"),
            raw_dealer(endpoint, link_identity(NodeRid("x"), first)),
            raw_dealer(endpoint, link_identity(NodeRid("x"), second)),
            raw_dealer(endpoint, routing_identity(NodeRid("x"), first)),
        ]
        try:
            with trio.fail_after(10):
                for refused in (sockets[0], sockets[3]):
                    refused.send_multipart(hello("x", first))
                    refused.send_multipart(encode(numbered(0)))
                await until(lambda: a.drops[PEER_MISMATCH] == 2 and a.drops[NOT_OPENED] == 2)
                sockets[1].send_multipart(hello("x", first))
                await until(lambda: a.is_up(NodeRid("x")) is not None)
                sockets[2].send_multipart(hello("x", second))  # x restarted
                await until(lambda: a.is_up(NodeRid("x")).generation == second)  # type: ignore[union-attr]  # up above
                sockets[1].send_multipart(hello("x", first))  # the replaced run again
                sockets[1].send_multipart(encode(numbered(1)))
                await until(lambda: a.drops[NOT_OPENED] == 3)
                sockets[2].send_multipart(encode(numbered(2)))
                await inbox.wait_for(1)
        finally:
            for socket in sockets:
                socket.close()
        assert 1 == a.drops[STALE]
        assert [numbered(2)] == [message for _, message in inbox.messages]


@pytest.mark.spec("TRN-20", "TRN-21", "TRN-22")
async def test_garbage_is_counted_and_dropped_while_other_peers_keep_working() -> None:
    """Random frames, oversized frames and raw TCP bytes never stop the reader or other peers."""
    meshes: list[RouteMesh] = []
    generation = NodeGeneration.new()
    rng = random.Random(4)
    misplaced = Reply(ReplyRouteId(1), OperationId.new(), generation, StableTypeName("r"), b"")
    async with (
        node("a", echo(lambda: meshes[0]), max_frame_bytes=4096) as (a, inbox),
        node("b") as (b, _),
    ):
        meshes.append(a)
        await connect(a, b)
        stranger = raw_dealer(a.application_endpoint)
        opened = raw_dealer(a.application_endpoint, link_identity(NodeRid("y"), generation))
        stream = zmq.Context.instance().socket(zmq.STREAM)
        stream.setsockopt(zmq.LINGER, 0)
        stream.setsockopt(zmq.CONNECT_ROUTING_ID, b"raw")
        stream.connect(a.application_endpoint)
        try:
            with trio.fail_after(20):
                for _ in range(200):
                    stranger.send_multipart(random_frames(rng))
                stranger.send_multipart(encode(numbered(1, 10)))  # well formed, but no Hello yet
                opened.send_multipart(hello("y", generation))
                for _ in range(200):
                    opened.send_multipart(random_frames(rng))
                opened.send_multipart(encode(numbered(0, 5000)))  # above the frame limit
                opened.send_multipart(encode(misplaced))  # a reply on the application connection
                await until(lambda: 403 == sum(a.drops.values()))
                counted = dict(a.drops)
                await until(lambda: bool(stream.poll(0)))  # the STREAM socket is connected
                stream.recv_multipart()
                for _ in range(50):
                    stream.send_multipart([b"raw", rng.randbytes(rng.randrange(1, 500))])
                for number in range(100):
                    payload = number.to_bytes(8, "big")
                    assert payload == (await ask(b, "a", payload)).payload
        finally:
            for socket in (stranger, opened, stream):
                socket.close()
        assert 1 == counted[OVERSIZED]
        assert 1 == counted[WRONG_CONNECTION]
        assert 1 == counted[NOT_OPENED]
        assert counted[MALFORMED] > 0
        # libzmq reads raw bytes as a ZMTP 1.0 peer's frames, or closes the connection: what
        # reaches the mesh is counted as bad input like any other.
        grown = {reason for reason, count in a.drops.items() if count != counted.get(reason)}
        assert grown <= {MALFORMED, NOT_OPENED}
        assert [] == inbox.messages


def random_frames(rng: random.Random) -> list[bytes]:
    """One to three frames of random bytes."""
    return [rng.randbytes(rng.randrange(0, 300)) for _ in range(rng.randrange(1, 4))]


@pytest.mark.spec("TRN-27", "DEC-33")
async def test_a_frame_over_the_limit_is_refused_at_the_sender_and_nothing_is_queued() -> None:
    """A send, a request and a reply with a frame over the sender's limit raise PROTOCOL_ERROR at
    once; the peer receives nothing of them and counts no drop; a frame at the limit goes."""
    meshes: list[RouteMesh] = []

    async def answer_big(origin: PeerRun, message: Send | Request) -> None:
        if type(message) is Request:
            big = Reply(
                message.reply_route,
                message.operation_id,
                origin.generation,
                StableTypeName("echo"),
                b"r" * 5000,
            )
            with pytest.raises(ZLinkError) as refused_reply:
                meshes[1].reply(origin, big)
            replies.append(refused_reply.value.kind)
            meshes[1].reply(origin, attrs.evolve(big, payload=b"ok"))

    replies: list[ErrorKind] = []
    async with (
        node("a", max_frame_bytes=4096) as (a, _),
        node("b", answer_big, max_frame_bytes=4096) as (b, _),
    ):
        meshes += [a, b]
        await connect(a, b)
        with trio.fail_after(10):
            with pytest.raises(ZLinkError) as refused_send:
                await a.send(NodeRid("b"), numbered(1, 4097))
            assert ErrorKind.PROTOCOL_ERROR == refused_send.value.kind
            with pytest.raises(ZLinkError) as refused_request:
                await ask(a, "b", b"q" * 5000, timeout=5)
            assert ErrorKind.PROTOCOL_ERROR == refused_request.value.kind
            assert b"ok" == (await ask(a, "b", b"q" * 4000)).payload
        assert [ErrorKind.PROTOCOL_ERROR] == replies
        assert 0 == sum(b.drops.values()) + sum(a.drops.values())
