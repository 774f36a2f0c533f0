"""Request/reply and one-way messages between two OS processes (TRN-10, TRN-15)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import pytest
import trio
import trio.testing

from tests.integration.transport.conftest import Spawn, ask, connect, echo, node, numbered
from zlink_trio._integration.transport import PeerRun, RouteMesh
from zlink_trio._wire import OperationId, Reply, Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid, SpotId, StableTypeName

COUNT = 10_000


@pytest.mark.spec("TRN-10")
async def test_ten_thousand_one_way_messages_arrive_in_order_both_ways(spawn: Spawn) -> None:
    """10,000 one-way messages each way between two processes arrive once each, in order."""
    child = await spawn("b")
    async with node("a") as (a, inbox):
        await child.connect(a)
        with trio.fail_after(60):
            for number in range(COUNT):
                await a.send(NodeRid("b"), numbered(number))
            await ask(a, "b")  # same connection, same order: every send before it was handled
            await child.tell("count")
            assert ["COUNT", str(COUNT), "1"] == await child.line("COUNT")

            await child.tell("send", "a", COUNT, 64)
            await child.line("SENT")
            await inbox.wait_for(COUNT)
        numbers = [int.from_bytes(m.payload[:8], "big") for _, m in inbox.messages]
        assert list(range(COUNT)) == numbers


@pytest.mark.spec("TRN-15")
async def test_requests_get_their_replies_in_both_directions(spawn: Spawn) -> None:
    """Requests across two processes each get the reply to them, whichever side asks."""
    child = await spawn("b")
    mesh: list[RouteMesh] = []
    async with node("a", echo(lambda: mesh[0])) as (a, _):
        mesh.append(a)
        await child.connect(a)
        with trio.fail_after(30):
            for number in range(300):
                payload = number.to_bytes(8, "big")
                assert payload == (await ask(a, "b", payload)).payload
            await child.tell("request", "a", 300)
            assert ["REQUESTED", "300"] == await child.line("REQUESTED")
        assert 0 == a.pending_requests
        assert {} == dict(a.drops)


def held_echo(
    mesh_of: Callable[[], RouteMesh], answer: trio.Event
) -> Callable[[PeerRun, Send | Request], Awaitable[None]]:
    """``echo``, once ``answer`` is set: the peer holds every message until then."""
    answering = echo(mesh_of)

    async def held(origin: PeerRun, message: Send | Request) -> None:
        await answer.wait()
        await answering(origin, message)

    return held


@pytest.mark.spec("TRN-26")
async def test_on_submitted_is_called_once_the_request_is_queued_before_its_reply() -> None:
    """``on_submitted`` runs once, while the peer still holds the request unanswered; the reply
    comes only after the test lets the peer answer."""
    meshes: list[RouteMesh] = []
    answer = trio.Event()
    held = held_echo(lambda: meshes[0], answer)
    calls: list[bool] = []
    async with node("b", held) as (b, _), node("a") as (a, _):
        meshes.append(b)
        await connect(a, b)
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                replies: list[Reply] = []

                async def request() -> None:
                    replies.append(
                        await a.request(
                            NodeRid("b"),
                            operation_id=OperationId.new(),
                            target=SpotId("s"),
                            message_type=StableTypeName("echo"),
                            payload=b"q",
                            timeout=10.0,
                            on_submitted=lambda: calls.append(True),
                        )
                    )

                nursery.start_soon(request)
                await trio.testing.wait_all_tasks_blocked()
                assert [True] == calls
                assert [] == replies
                answer.set()
    assert [True] == calls
    assert b"q" == replies[0].payload


@pytest.mark.spec("TRN-34")
async def test_a_request_past_the_in_flight_limit_ends_unavailable_at_once() -> None:
    """With ``max_in_flight_per_peer=2`` two requests to b wait for replies b holds back: a third
    ends UNAVAILABLE without waiting, a request to c is not counted with b's, and once b's
    replies came a request to b is taken again."""
    meshes: list[RouteMesh] = []
    answer = trio.Event()
    held = held_echo(lambda: meshes[0], answer)
    async with (
        node("b", held) as (b, _),
        node("c", echo(lambda: meshes[1])) as (c, _),
        node("a", max_in_flight_per_peer=2) as (a, _),
    ):
        meshes.extend([b, c])
        await connect(a, b)
        await connect(a, c)
        with trio.fail_after(10):
            replies: list[Reply] = []
            async with trio.open_nursery() as nursery:

                async def waiting() -> None:
                    replies.append(await ask(a, "b"))

                nursery.start_soon(waiting)
                nursery.start_soon(waiting)
                await trio.testing.wait_all_tasks_blocked()
                assert 2 == a.pending_requests
                started = trio.current_time()
                with pytest.raises(ZLinkError) as caught:
                    await ask(a, "b", timeout=5.0)
                assert ErrorKind.UNAVAILABLE == caught.value.kind
                assert "max_in_flight_per_peer" in str(caught.value)
                assert trio.current_time() - started < 1.0  # at once, not at its timeout
                assert b"q" == (await ask(a, "c")).payload  # another peer's count
                answer.set()
            assert 2 == len(replies)
            assert b"again" == (await ask(a, "b", b"again")).payload
            assert 0 == a.pending_requests
