"""Closing a RouteMesh: idempotent, ends what waits, sends nothing more (TRN-12, TRN-23, TRN-24)."""

from __future__ import annotations

from collections.abc import Awaitable

import pytest
import trio
import trio.testing

from tests.integration.transport.conftest import ask, config, connect, node, numbered
from zlink_trio._integration.transport import RouteLost, RouteMesh, open_route_mesh
from zlink_trio._wire import ErrorReply, OperationId, ReplyRouteId, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid

A, B = NodeRid("a"), NodeRid("b")
BIG = 64 * 1024


async def outcome(work: Awaitable[object], into: list[ErrorKind | None]) -> None:
    try:
        await work
    except ZLinkError as error:
        into.append(error.kind)
    else:
        into.append(None)


async def fill(mesh: RouteMesh, sent: list[int]) -> None:
    for number in range(1_000):
        await mesh.send(B, numbered(number, BIG))
        sent.append(number)


async def kind_of(work: Awaitable[object]) -> ErrorKind:
    with pytest.raises(ZLinkError) as raised:
        await work
    return raised.value.kind


@pytest.mark.spec("TRN-12", "TRN-23", "CMP-7.4")
async def test_close_ends_waiting_work_and_nothing_is_sent_after_it() -> None:
    """close() twice: waiting sends and requests end SHUTTING_DOWN and nothing more goes out."""
    async with node("b", receive_hwm=1) as (b, inbox), node("a", send_hwm=1) as (a, _):
        await connect(a, b)
        inbox.hold = trio.Event()
        ended: list[ErrorKind | None] = []
        sent: list[int] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(outcome, ask(a, "b", kind="hang", timeout=30), ended)
                nursery.start_soon(outcome, fill(a, sent), ended)
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)
                    a.close()
                    a.close()
                except BaseException:
                    # A failure before close leaves the send waiting, shielded: b reads again so
                    # that it completes and the failure unwinds. Only on failure: when close
                    # ran, b is released after what close ended is checked.
                    inbox.hold.set()
                    raise
            assert [ErrorKind.SHUTTING_DOWN, ErrorKind.SHUTTING_DOWN] == sorted(ended)
            assert ErrorKind.SHUTTING_DOWN == await kind_of(a.send(B, numbered(0)))
            assert ErrorKind.SHUTTING_DOWN == await kind_of(ask(a, "b"))
            assert ErrorKind.SHUTTING_DOWN == await kind_of(_add(a, b))
            run = b.is_up(A)
            assert run is not None
            error = ErrorReply(
                ReplyRouteId(1), OperationId.new(), run.generation, ErrorKind.NOT_FOUND, ""
            )
            assert ErrorKind.SHUTTING_DOWN == await kind_of(_reply(a, b, error))

            inbox.hold.set()
            # b watches a while its request waits, so a's silence is judged: nothing at all is
            # sent after close, not even an answer to b's Heartbeats (TRN-17).
            assert ErrorKind.UNAVAILABLE == await kind_of(ask(b, "a", kind="hang", timeout=30))
            while not isinstance(await b.route_changes.receive(), RouteLost):
                pass
        received = [
            int.from_bytes(m.payload[:8], "big") for _, m in inbox.messages if type(m) is Send
        ]
        assert received == sent[: len(received)]  # in order, and only what was admitted
        assert len(received) <= len(sent)


async def _add(a: RouteMesh, b: RouteMesh) -> None:
    a.add_peer(b.address)


async def _reply(a: RouteMesh, b: RouteMesh, error: ErrorReply) -> None:
    run = a.is_up(B)
    assert run is not None
    a.reply(run, error)


@pytest.mark.spec("TRN-23", "TRN-24")
async def test_leaving_the_block_closes_without_blocking_trio() -> None:
    """Leaving ``open_route_mesh`` with messages still queued returns at once, closed."""
    async with node("b", receive_hwm=1) as (b, inbox):
        inbox.hold = trio.Event()
        with trio.fail_after(30):
            async with open_route_mesh(config("a", send_hwm=50, linger=5.0), inbox) as a:
                await connect(a, b)
                for number in range(40):  # queued, not yet taken by b
                    await a.send(B, numbered(number, BIG))
                left = trio.current_time()
            took = trio.current_time() - left
            inbox.hold.set()
        assert a.closed
        assert took < 0.5  # the 5 s linger runs in libzmq's I/O thread, not in Trio
