"""Request/reply and one-way messages between two OS processes (TRN-10, TRN-15)."""

from __future__ import annotations

import pytest
import trio

from tests.integration.transport.conftest import Spawn, ask, echo, node, numbered
from zlink_trio._integration.transport import RouteMesh
from zlink_trio.ids import NodeRid

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
