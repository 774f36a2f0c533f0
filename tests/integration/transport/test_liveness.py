"""Liveness, restarts and the request path's endings (TRN-12, TRN-14..19)."""

from __future__ import annotations

import socket

import pytest
import trio
import trio.testing

from tests.integration.transport.conftest import (
    BLOCK,
    HEARTBEAT,
    WINDOW,
    Spawn,
    ask,
    config,
    connect,
    fill,
    node,
    numbered,
    outcome,
    until,
    until_stuck,
    until_up,
)
from zlink_trio._integration.transport import (
    LATE_REPLY,
    PeerRun,
    RouteLost,
    RouteMesh,
    RouteUp,
    open_route_mesh,
)
from zlink_trio._wire import ErrorReply, RefusalReason, Reply, Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeGeneration, NodeRid, StableTypeName

B = NodeRid("b")


@pytest.mark.spec("TRN-12", "TRN-17")
async def test_killed_peer_ends_waiting_sends_and_requests_within_the_window(spawn: Spawn) -> None:
    """kill -9 of a peer ends its waiting send and pending request UNAVAILABLE within the window."""
    child = await spawn("b", "--receive-hwm", "2")
    async with node("a", send_hwm=2) as (a, _):
        await child.connect(a)
        ended: list[ErrorKind | None] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(outcome, ask(a, "b", kind="hang", timeout=30), ended)
                await a.send(B, BLOCK)
                nursery.start_soon(outcome, fill(a, B), ended)
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)
                    assert 1 == a.pending_requests
                    killed = trio.current_time()
                    child.process.kill()
                    change = await a.route_changes.receive()
                finally:
                    # The shielded send waits until b is lost: a failure before the kill
                    # unwinds only once it is killed (a second kill does nothing).
                    child.process.kill()
            lost_after = trio.current_time() - killed
        assert [ErrorKind.UNAVAILABLE, ErrorKind.UNAVAILABLE] == sorted(ended)
        assert isinstance(change, RouteLost)
        assert B == change.run.node_rid
        assert lost_after <= WINDOW + HEARTBEAT + 0.5
        assert a.is_up(B) is None


@pytest.mark.spec("TRN-18")
async def test_restarted_peer_is_a_new_route() -> None:
    """A peer back with a new generation ends what waited for its old run and is a new route."""
    first = config("b", receive_hwm=1)
    ended: list[ErrorKind | None] = []
    received: list[Send | Request] = []

    async def keep(_origin: PeerRun, message: Send | Request) -> None:
        received.append(message)

    async with node("a", send_hwm=1) as (a, _), trio.open_nursery() as nursery:
        async with open_route_mesh(first, _hold_forever) as b1:
            await connect(a, b1)
            old_run = a.is_up(B)
            nursery.start_soon(outcome, ask(a, "b", kind="hang", timeout=30), ended)
            nursery.start_soon(outcome, fill(a, B), ended)
            with trio.fail_after(10):
                await trio.testing.wait_all_tasks_blocked(cushion=0.05)
            assert 1 == a.waiting_sends(B)
            endpoints = {
                "application_bind": b1.application_endpoint,
                "completion_bind": b1.completion_endpoint,
            }
        second = config("b", **endpoints)  # the same node on the same endpoints: a new run
        with trio.fail_after(10):
            await until(lambda: all(map(port_is_free, endpoints.values())))
        async with open_route_mesh(second, keep) as b2:
            b2.add_peer(a.address)
            with trio.fail_after(10):
                changes = [await a.route_changes.receive() for _ in range(2)]
                new_run = await until_up(a, "b")
                await a.send(B, numbered(7))
                await until(lambda: len(received) == 1)
    assert [ErrorKind.UNAVAILABLE, ErrorKind.UNAVAILABLE] == sorted(ended)
    assert isinstance(changes[0], RouteLost)
    assert old_run == changes[0].run
    assert RouteUp(new_run) == changes[1]
    assert second.generation == new_run.generation
    assert [numbered(7)] == received  # nothing queued for the old run reached the new one


def port_is_free(endpoint: str) -> bool:
    """True when nothing listens on the TCP port of ``endpoint`` any more."""
    probe = socket.socket()
    try:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        probe.bind(("127.0.0.1", int(endpoint.rsplit(":", 1)[1])))
    except OSError:
        return False
    finally:
        probe.close()
    return True


async def _hold_forever(_origin: PeerRun, _message: Send | Request) -> None:
    await trio.sleep_forever()


@pytest.mark.spec("TRN-14")
async def test_request_carries_the_budget_left_after_admission() -> None:
    """A request's budget covers its admission wait; the Request carries what is left."""
    budgets: list[int] = []
    release = trio.Event()

    async def record(_origin: PeerRun, message: Send | Request) -> None:
        if type(message) is Request:
            budgets.append(message.budget_us)
        else:
            await release.wait()

    async with node("a", send_hwm=1) as (a, _), node("b", record, receive_hwm=1) as (b, _):
        await connect(a, b)
        ended: list[ErrorKind | None] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                admitted: list[int] = []
                nursery.start_soon(fill, a, B, admitted)
                try:
                    await until_stuck(a, B, admitted)  # the fail_after may end it while fill waits
                    started = trio.current_time()
                    nursery.start_soon(outcome, ask(a, "b", kind="hang", timeout=3.0), ended)
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 2 == a.waiting_sends(B)  # the request waits for admission too
                    waited = trio.current_time() - started
                finally:
                    release.set()  # a waiting send cannot be cancelled: let it finish
                await until(lambda: bool(budgets))
                nursery.cancel_scope.cancel()
        assert 0 < budgets[0] <= (3.0 - waited) * 1_000_000

        with trio.fail_after(5):
            started = trio.current_time()
            with pytest.raises(ZLinkError) as late:
                await ask(a, "b", kind="hang", timeout=0.3)
        assert ErrorKind.DEADLINE_EXCEEDED == late.value.kind
        assert 0.3 <= trio.current_time() - started < 2.0
        assert 0 == a.pending_requests


@pytest.mark.spec("TRN-15", "TRN-16", "TRN-19")
async def test_replies_complete_only_their_own_live_request() -> None:
    """An ErrorReply gives its kind; late replies and replies to another run are dropped."""
    meshes: list[RouteMesh] = []
    late = trio.Event()

    async def answer(origin: PeerRun, message: Send | Request) -> None:
        assert type(message) is Request
        b = meshes[0]
        kind = message.message_type.value
        if kind == "fail":
            b.reply(
                origin,
                ErrorReply(
                    message.reply_route,
                    message.operation_id,
                    origin.generation,
                    ErrorKind.NOT_FOUND,
                    "no such Spot",
                ),
            )
            return
        generation = NodeGeneration.new() if kind == "other-run" else origin.generation
        if kind == "late":
            await late.wait()
        b.reply(
            origin,
            Reply(
                message.reply_route,
                message.operation_id,
                generation,
                StableTypeName("r"),
                message.payload,
            ),
        )

    async with node("a") as (a, _), node("b", answer) as (b, _):
        meshes.append(b)
        await connect(a, b)
        with trio.fail_after(20):
            with pytest.raises(ZLinkError) as failed:
                await ask(a, "b", kind="fail")
            assert ErrorKind.NOT_FOUND == failed.value.kind

            with pytest.raises(ZLinkError) as other_run:
                await ask(a, "b", kind="other-run", timeout=0.3)
            assert ErrorKind.DEADLINE_EXCEEDED == other_run.value.kind
            assert 1 == a.drops[RefusalReason.STALE_GENERATION.value]

            with pytest.raises(ZLinkError) as timed_out:
                await ask(a, "b", kind="late", timeout=0.2)
            assert ErrorKind.DEADLINE_EXCEEDED == timed_out.value.kind
            late.set()
            await until(lambda: a.drops[LATE_REPLY] == 1)
            assert b"ok" == (await ask(a, "b", b"ok")).payload
        assert 0 == a.pending_requests
