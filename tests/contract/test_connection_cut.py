"""The TCP connections between two hosts cut under a request and under a stream of sends
(specs/completion.md CMP-17.9, CMP-17.17): the runtime never sends a message again on its own,
and each call ends once.

Two hosts in this process, real ZeroMQ on 127.0.0.1, the real store. The cut is the kernel's:
``ss -K`` aborts every TCP connection to or from the hosts' four endpoints, as a failed link
would (the peer sees a reset); ZeroMQ then connects again by itself. The tests are skipped
where ``ss -K`` cannot abort a connection (no iproute2, no privilege, or a kernel without
socket destruction).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.contract.peers import meet
from tests.members import NoMembers
from zlink_trio.testing import TestHost, open_test_host

app = zl.Application()
handled: list[tuple[str, int]] = []
started = trio.Event()
release = trio.Event()
SENDS = 200
CUT_AFTER = 100


@app.message("cut.Hold")
@attrs.frozen
class Hold:
    n: int


@app.message("cut.Held")
@attrs.frozen
class Held:
    n: int


@app.message("cut.Note")
@attrs.frozen
class Note:
    n: int


@app.user_spot("cut.Room")
class Room(NoMembers):
    @zl.request_handler(Hold)
    async def hold(self, req: Hold) -> Held:
        handled.append(("hold", req.n))
        started.set()
        await release.wait()
        return Held(req.n)

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        handled.append(("note", msg.n))


def _can_abort() -> bool:
    """Whether ``ss -K`` aborts a TCP connection here (tried on a pair of this process's own)."""
    if shutil.which("ss") is None:
        return False
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as client:
            accepted, _ = server.accept()
            with accepted:
                subprocess.run(["ss", "-K", "dport", "=", str(port)], capture_output=True)
                try:
                    client.send(b"x")
                    accepted.settimeout(0.5)
                    return accepted.recv(1) == b""
                except OSError:
                    return True


pytestmark = pytest.mark.skipif(
    not _can_abort(), reason="ss -K cannot abort TCP connections on this machine"
)


def _ports(seen_by: TestHost, host: TestHost) -> list[int]:
    """The ports of ``host``'s two published endpoints, from its node record as ``seen_by``
    holds it."""
    remote: Any = seen_by.host._messaging.remote  # type: ignore[attr-defined]
    record = remote.peer_record(host.node_rid)
    return [
        int(endpoint.rsplit(":", 1)[1])
        for endpoint in (record.application_endpoint, record.completion_endpoint)
    ]


def cut(one: TestHost, other: TestHost) -> None:
    """Abort every TCP connection to or from the two hosts' endpoints."""
    ports = _ports(one, other) + _ports(other, one)
    terms = " or ".join(f"sport = :{port} or dport = :{port}" for port in ports)
    subprocess.run(["ss", "-K", f"( {terms} )"], check=True, capture_output=True)


@asynccontextmanager
async def two_hosts(store_dsn: str) -> AsyncIterator[tuple[TestHost, TestHost, str]]:
    """A caller host, the host of a Room, and the Room's id; the two know each other."""
    global started, release
    handled.clear()
    started, release = trio.Event(), trio.Event()
    mesh = f"cut-{uuid.uuid4().hex[:8]}"
    room = f"room-{uuid.uuid4().hex[:6]}"
    async with (
        open_test_host(app, dsn=store_dsn, mesh=mesh) as caller,
        open_test_host(app, dsn=store_dsn, mesh=mesh) as owner,
    ):
        await owner.spots.get_or_create(room, "cut.Room").submit()
        await meet(caller, owner)
        await meet(owner, caller)
        yield caller, owner, room


@pytest.mark.spec("CMP-17.9")
async def test_a_request_whose_connection_is_cut_is_never_sent_again(store_dsn: str) -> None:
    """A request whose handler runs while every connection between the hosts is aborted ends
    once (its reply, or UNAVAILABLE / DEADLINE_EXCEEDED), and its handler ran once: the next
    request, on the connections ZeroMQ made again, finds no second run of the first."""
    async with two_hosts(store_dsn) as (caller, owner, room):
        outcome: list[object] = []

        async def first() -> None:
            call = caller.route.request_to_spot(room, Hold(1), reply_type=Held).timeout(3)
            try:
                outcome.append(await call.submit())
            except zl.ZLinkError as error:
                outcome.append(error.kind)

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(first)
                await started.wait()
                cut(caller, owner)
                release.set()
            assert outcome in (
                [Held(1)],
                [zl.ErrorKind.UNAVAILABLE],
                [zl.ErrorKind.DEADLINE_EXCEEDED],
            )
            second = caller.route.request_to_spot(room, Hold(2), reply_type=Held).timeout(20)
            assert Held(2) == await second.submit()
        assert [("hold", 1), ("hold", 2)] == handled


@pytest.mark.spec("CMP-17.17")
async def test_sends_across_a_cut_connection_are_never_sent_twice(store_dsn: str) -> None:
    """Sends submitted one after another, every connection aborted half-way: each send the
    Room handles, it handles once and in order; what the cut lost stays lost (the runtime
    does not send it again), and a request after the last send finds nothing more on its way."""
    async with two_hosts(store_dsn) as (caller, owner, room):
        release.set()
        with trio.fail_after(30):
            for n in range(SENDS):
                await caller.route.send_to_spot(room, Note(n)).submit()
                if n == CUT_AFTER:
                    cut(caller, owner)
            last = caller.route.request_to_spot(room, Hold(SENDS), reply_type=Held).timeout(20)
            assert Held(SENDS) == await last.submit()
        notes = [n for kind, n in handled if kind == "note"]
        assert len(notes) == len(set(notes)), "a send was handled twice"
        assert notes == sorted(notes)
        assert CUT_AFTER + 1 <= len(notes) <= SENDS
        assert ("hold", SENDS) == handled[-1]
