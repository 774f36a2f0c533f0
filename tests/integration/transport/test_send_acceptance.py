"""Send acceptance and the admission wait (specs/completion.md CMP-9.6, CMP-13.1, CMP-15.1): a
send completes when the ZeroMQ send takes it, a sender waits for writability only after a send
was refused at the high-water mark, and a request's admission wait ends with its own timeout."""

from __future__ import annotations

import threading
from collections.abc import Sequence

import pytest
import trio
import trio.testing

from tests.integration.transport.conftest import ask, connect, fill, node, numbered, until_stuck
from zlink_trio._integration.transport.socket import OutboundLink
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid

B = NodeRid("b")


@pytest.mark.spec("CMP-13.1", "CMP-15.1")
async def test_a_send_waits_for_writability_only_after_the_socket_refused_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Sends the socket takes complete at once, before the peer reads them, with no wait; at
    the high-water mark every wait for writability follows a send the socket refused."""
    events: list[tuple[int, str]] = []
    try_send, wait_capacity = OutboundLink.try_send, OutboundLink.wait_capacity

    def logged_try_send(link: OutboundLink, frames: Sequence[bytes]) -> bool:
        taken = try_send(link, frames)
        events.append((id(link), "taken" if taken else "refused"))
        return taken

    async def logged_wait_capacity(link: OutboundLink) -> None:
        events.append((id(link), "wait"))
        await wait_capacity(link)

    monkeypatch.setattr(OutboundLink, "try_send", logged_try_send)
    monkeypatch.setattr(OutboundLink, "wait_capacity", logged_wait_capacity)
    async with node("a") as (a, _), node("b", receive_hwm=1) as (b, inbox):
        await connect(a, b)
        inbox.hold = trio.Event()
        try:
            with trio.fail_after(30):
                events.clear()
                for number in range(50):
                    await a.send(B, numbered(number))
                assert len(inbox.messages) <= 1  # complete before the peer read them
                assert [] == [event for event in events if event[1] != "taken"]

                admitted: list[int] = []
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(fill, a, B, admitted)
                    try:
                        await until_stuck(a, B, admitted)
                    finally:
                        # Inside the nursery: the one below runs only once the shielded send
                        # ended, so it could not release it when the fail_after fires here.
                        inbox.hold.set()
        finally:
            inbox.hold.set()
    waits = [index for index, (_, what) in enumerate(events) if what == "wait"]
    assert waits  # the high-water mark was reached
    for index in waits:
        link = events[index][0]
        before = [what for other, what in events[:index] if other == link]
        assert "refused" == before[-1], before[-3:]


@pytest.mark.spec("CMP-9.6")
async def test_a_request_waiting_for_admission_ends_with_its_own_remaining_timeout() -> None:
    """A request that meets the high-water mark waits for admission for the whole time its
    timeout has left, no less and no more, and then ends DEADLINE_EXCEEDED alone."""
    async with node("a", send_hwm=1) as (a, _), node("b", receive_hwm=1) as (b, inbox):
        await connect(a, b)
        inbox.hold = trio.Event()
        admitted: list[int] = []
        errors: list[ZLinkError] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                try:
                    nursery.start_soon(fill, a, B, admitted)
                    await until_stuck(a, B, admitted)
                    started = trio.current_time()
                    ended = trio.Event()

                    async def request() -> None:
                        try:
                            await ask(a, "b", timeout=1.0)
                        except ZLinkError as error:
                            errors.append(error)
                        ended.set()

                    nursery.start_soon(request)
                    await trio.testing.wait_all_tasks_blocked(cushion=0.05)
                    assert 2 == a.waiting_sends(B)  # the request waits for admission too
                    await ended.wait()
                    waited = trio.current_time() - started
                    assert 1 == a.waiting_sends(B)  # the send still waits; the request ended
                finally:
                    inbox.hold.set()  # the shielded send waits: release it whatever happened
    assert [ErrorKind.DEADLINE_EXCEEDED] == [error.kind for error in errors]
    assert 1.0 <= waited < 3.0
    assert 0 == a.pending_requests


@pytest.mark.spec("CMP-15.2")
async def test_the_wait_for_writability_starts_no_thread() -> None:
    """A sender waiting at the high-water mark waits on the Trio loop: no thread is started."""
    threads = threading.active_count()
    async with node("a", send_hwm=1) as (a, _), node("b", receive_hwm=1) as (b, inbox):
        await connect(a, b)
        inbox.hold = trio.Event()
        admitted: list[int] = []
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                try:
                    nursery.start_soon(fill, a, B, admitted)
                    await until_stuck(a, B, admitted)
                    waiting = threading.active_count()
                finally:
                    inbox.hold.set()  # the shielded send waits: release it whatever happened
    assert threads == waiting
