"""Admission at the high-water mark: waiting, completing once, per-peer queues (TRN-5..13)."""

from __future__ import annotations

import pytest
import trio
import trio.testing

from tests.integration.transport.conftest import (
    BLOCK,
    Spawn,
    ask,
    connect,
    echo,
    node,
    numbered,
)
from zlink_trio._integration.transport import PeerAddress, RouteMesh
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid

BIG = 64 * 1024  # large frames fill the kernel's socket buffers quickly
MANY = 3_000  # far more than the queues and socket buffers between two nodes hold
A, B, C = NodeRid("a"), NodeRid("b"), NodeRid("c")


async def fill(mesh: RouteMesh, peer: NodeRid, sent: list[int], count: int = MANY) -> None:
    """Send numbered big messages to ``peer`` until ``count`` are admitted, noting each one."""
    for number in range(len(sent), count):
        await mesh.send(peer, numbered(number, BIG))
        sent.append(number)


@pytest.mark.spec("TRN-10", "TRN-11", "ERR-7.3", "CMP-7.2")
async def test_send_at_hwm_waits_and_completes_once_when_reading_resumes(spawn: Spawn) -> None:
    """A receiver that stops reading makes the sender wait; resumed, every message arrives once."""
    child = await spawn("b", "--receive-hwm", "2")
    async with node("a", send_hwm=2) as (a, _):
        await child.connect(a)
        sent: list[int] = []
        with trio.fail_after(60):
            await a.send(B, BLOCK)
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fill, a, B, sent)
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)  # waiting, not failed
                    assert 0 < len(sent) < MANY
                finally:
                    # The shielded send waits until b reads again: a failure above unwinds only
                    # then (shielded too, so that the fail_after cannot stop this release).
                    with trio.CancelScope(shield=True):
                        await child.tell("resume")
            assert list(range(MANY)) == sent
            await ask(a, "b")  # behind every send on the same connection
            await child.tell("count")
            assert ["COUNT", str(MANY), "1"] == await child.line("COUNT")


@pytest.mark.spec("TRN-11")
async def test_waiting_send_is_not_ended_by_caller_cancellation() -> None:
    """Cancelling the caller of a waiting send neither ends the wait nor loses the message."""
    async with node("a", send_hwm=1) as (a, _), node("b", receive_hwm=1) as (b, inbox):
        await connect(a, b)
        inbox.hold = trio.Event()
        sent: list[int] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                caller = trio.CancelScope()

                async def sender() -> None:
                    with caller:
                        await fill(a, B, sent)

                nursery.start_soon(sender)
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)
                    waiting = len(sent)
                    caller.cancel()
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)  # still waiting after the cancellation
                finally:
                    inbox.hold.set()  # the shielded send waits: release it whatever happened
            assert waiting in sent  # the send that waited completed
            await inbox.wait_for(len(sent))
        numbers = [int.from_bytes(m.payload[:8], "big") for _, m in inbox.messages]
        assert list(range(len(sent))) == numbers


@pytest.mark.spec("TRN-33")
async def test_a_framework_word_at_the_hwm_gives_up_at_its_bound_unsent() -> None:
    """Words with ``until`` sent to a peer that stopped reading go while there is room; the
    first that finds the queue full ends UNAVAILABLE at its bound and is never delivered."""
    async with node("a", send_hwm=1) as (a, _), node("b", receive_hwm=1) as (b, inbox):
        await connect(a, b)
        inbox.hold = trio.Event()
        sent: list[int] = []
        ended: list[tuple[int, ErrorKind]] = []
        done = trio.Event()

        async def words() -> None:
            for number in range(MANY):
                try:
                    await a.send(B, numbered(number, BIG), until=trio.current_time() + 0.2)
                except ZLinkError as error:
                    ended.append((number, error.kind))
                    break
                sent.append(number)
            done.set()

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(words)
                try:  # a word that ignored its bound waits until the receiver reads again
                    with trio.move_on_after(10):
                        await done.wait()
                finally:
                    inbox.hold.set()
            await a.send(B, numbered(MANY))  # a last message behind every word
            await inbox.wait_for(len(sent) + 1)
        assert [(len(sent), ErrorKind.UNAVAILABLE)] == ended
        numbers = [int.from_bytes(m.payload[:8], "big") for _, m in inbox.messages]
        assert [*range(len(sent)), MANY] == numbers  # every word that went, once; that one never


@pytest.mark.spec("TRN-5")
async def test_a_peer_at_its_hwm_does_not_hold_sends_to_another_peer() -> None:
    """While a send to one peer waits at its HWM, sends to another peer complete at once."""
    async with (
        node("a", send_hwm=1) as (a, _),
        node("b", receive_hwm=1) as (b, held),
        node("c") as (c, inbox),
    ):
        await connect(a, b)
        await connect(a, c)
        held.hold = trio.Event()
        sent: list[int] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fill, a, B, sent)
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)
                    for number in range(200):
                        await a.send(C, numbered(number))
                    await inbox.wait_for(200)
                    assert 1 == a.waiting_sends(B)
                finally:
                    held.hold.set()  # the shielded send waits: release it whatever happened


@pytest.mark.spec("TRN-6", "CMP-15.4", "CMP-17.11", "CMP-17.13")
async def test_replies_flow_while_the_application_connection_is_saturated() -> None:
    """A node whose sends to a peer wait at the HWM still answers that peer's requests."""
    meshes: list[RouteMesh] = []
    async with (
        node("a", echo(lambda: meshes[0]), send_hwm=1) as (a, _),
        node("b", receive_hwm=1) as (b, held),
    ):
        meshes.append(a)
        await connect(a, b)
        held.hold = trio.Event()
        sent: list[int] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(fill, a, B, sent)
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)
                    for number in range(100):
                        payload = number.to_bytes(8, "big")
                        assert payload == (await ask(b, "a", payload)).payload
                    assert 1 == a.waiting_sends(B)  # a's application connection is still full
                finally:
                    held.hold.set()  # the shielded send waits: release it whatever happened


@pytest.mark.spec("TRN-13")
async def test_send_with_nothing_to_wait_for_fails_unavailable_at_once() -> None:
    """Sending or requesting to an unknown peer, or to a peer not connected, is UNAVAILABLE."""
    async with node("a") as (a, _):
        with trio.fail_after(5):
            with pytest.raises(ZLinkError) as unknown:
                await a.send(B, numbered(0))
            assert ErrorKind.UNAVAILABLE == unknown.value.kind
            a.add_peer(PeerAddress(B, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"))  # nobody there
            with pytest.raises(ZLinkError) as absent:
                await a.send(B, numbered(0))
            assert ErrorKind.UNAVAILABLE == absent.value.kind
            with pytest.raises(ZLinkError) as request:
                await ask(a, "b")
            assert ErrorKind.UNAVAILABLE == request.value.kind
        assert 0 == a.pending_requests


@pytest.mark.spec("TRN-7", "CMP-5.13", "CMP-7.3")
async def test_removing_a_peer_ends_its_waiting_sends_and_requests_unavailable() -> None:
    """remove_peer ends what waits for that peer with UNAVAILABLE; adding it again works."""
    async with node("a", send_hwm=1) as (a, _), node("b", receive_hwm=1) as (b, held):
        await connect(a, b)
        held.hold = trio.Event()
        outcomes: list[ErrorKind] = []

        async def expect_unavailable(work: object) -> None:
            try:
                await work  # type: ignore[misc]  # a coroutine of this test
            except ZLinkError as error:
                outcomes.append(error.kind)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(expect_unavailable, ask(a, "b", kind="hang", timeout=30))
                nursery.start_soon(expect_unavailable, fill(a, B, []))
                try:
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 1 == a.waiting_sends(B)
                    assert 1 == a.pending_requests
                    a.remove_peer(B)
                except BaseException:
                    # A failure before remove_peer leaves the send waiting, shielded: b reads
                    # again so that it completes and the failure unwinds. Only on failure: when
                    # remove_peer ran, b is released after the outcomes are checked.
                    held.hold.set()
                    raise
            assert [ErrorKind.UNAVAILABLE, ErrorKind.UNAVAILABLE] == outcomes
            with pytest.raises(ZLinkError) as removed:
                await a.send(B, numbered(0))
            assert ErrorKind.UNAVAILABLE == removed.value.kind
            held.hold.set()
            a.add_peer(b.address)
            await a.send(B, numbered(1))


@pytest.mark.spec("TRN-25", "CMP-5.1")
async def test_end_sends_ends_a_send_waiting_at_the_hwm_and_the_mesh_goes_on() -> None:
    """A send waiting at the HWM (shielded from its caller) ends with the error given to
    end_sends; a later send that would wait ends at once; replies and requests still flow."""
    meshes: list[RouteMesh] = []
    async with (
        node("a", echo(lambda: meshes[0]), send_hwm=1) as (a, _),
        node("b", receive_hwm=1) as (b, held),
    ):
        meshes.append(a)
        await connect(a, b)
        held.hold = trio.Event()
        sent: list[int] = []
        errors: list[ZLinkError] = []
        ended = trio.Event()

        async def sender() -> None:
            try:
                await fill(a, B, sent)
            except ZLinkError as error:
                errors.append(error)
            finally:
                ended.set()

        async with trio.open_nursery() as nursery:
            try:
                nursery.start_soon(sender)
                await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                assert 1 == a.waiting_sends(B)
                a.end_sends(ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down"))
                # A hang guard: the shielded wait ignores cancellation, so a wait that did not
                # end is released below (b reads again) and the assertions report it.
                with trio.move_on_after(10):
                    await ended.wait()
                assert [ErrorKind.SHUTTING_DOWN] == [error.kind for error in errors]
                assert 0 == a.waiting_sends(B)
                with trio.fail_after(10), pytest.raises(ZLinkError) as caught:
                    await fill(a, B, sent, len(sent) + MANY)  # the HWM again: no new wait
                assert ErrorKind.SHUTTING_DOWN == caught.value.kind
                with trio.fail_after(10):
                    assert b"still" == (await ask(b, "a", b"still")).payload  # replies flow
            finally:
                held.hold.set()


@pytest.mark.spec("TRN-25")
async def test_end_sends_also_holds_for_a_peer_connected_after_it() -> None:
    """After end_sends, a peer added later gets new links; a send to it that would wait at the
    HWM ends at once with the error given to end_sends."""
    async with (
        node("a", send_hwm=1) as (a, _),
        node("b") as (b, _),
        node("c", receive_hwm=1) as (c, held),
    ):
        await connect(a, b)
        a.end_sends(ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down"))
        await connect(a, c)
        held.hold = trio.Event()
        sent: list[int] = []
        errors: list[ZLinkError] = []
        ended = trio.Event()

        async def sender() -> None:
            try:
                await fill(a, NodeRid("c"), sent)
            except ZLinkError as error:
                errors.append(error)
            finally:
                ended.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            # A hang guard: a shielded wait ignores cancellation, so a wait that did not end is
            # released below (c reads again) and the assertions report it.
            with trio.move_on_after(10):
                await ended.wait()
            held.hold.set()
        assert [ErrorKind.SHUTTING_DOWN] == [error.kind for error in errors]
        assert len(sent) < MANY
