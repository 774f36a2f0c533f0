"""A mesh at scale: links that fail are retried, the socket limit comes from ``max_peers``, what
a mesh holds per peer, and the open-file check at start (TRN-29..32)."""

from __future__ import annotations

import errno
import logging
import os
import uuid
from contextlib import AsyncExitStack

import pytest
import trio
import zmq

from tests.integration.transport.conftest import (
    ask,
    config,
    connect,
    echo,
    node,
    until,
    until_up,
)
from zlink_trio._integration.transport import (
    PeerAddress,
    PeerRun,
    RouteLost,
    RouteMesh,
    RouteUp,
    capacity,
    curve_public,
    links,
    new_curve_secret,
    open_route_mesh,
)
from zlink_trio._integration.transport.links import MeshSockets
from zlink_trio._integration.transport.socket import OutboundLink
from zlink_trio._wire import Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid

B = NodeRid("b")


def warnings_about(caplog: pytest.LogCaptureFixture, text: str) -> list[str]:
    """The WARNING lines logged so far that contain ``text``."""
    return [
        record.getMessage()
        for record in caplog.records
        if record.levelno == logging.WARNING and text in record.getMessage()
    ]


def nowhere(count: int) -> list[PeerAddress]:
    """``count`` peers at IPC endpoints nobody binds: each takes its two sockets, and libzmq
    retries their connects cheaply. Not inproc: libzmq binds a socket of its own for each
    pending inproc connection when its context ends, and asserts when the limit refuses it."""
    folder = f"/tmp/zlink-nowhere-{uuid.uuid4().hex[:8]}"
    return [
        PeerAddress(NodeRid(f"p{i}"), f"ipc://{folder}-a-{i}", f"ipc://{folder}-c-{i}")
        for i in range(count)
    ]


@pytest.mark.spec("TRN-29", "TRN-30")
async def test_links_that_fail_are_logged_once_and_retried_until_the_peer_is_reached(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """a's links to b fail with EMFILE until released: add_peer does not raise, one warning
    names b and the limits, b is not up for a meanwhile, then a retry reaches b."""
    caplog.set_level(logging.WARNING, "zlink_trio.transport")
    failures: list[str] = []
    release = trio.Event()
    real = MeshSockets._open_link

    def flaky(sockets: MeshSockets, endpoint: str, hwm: int, key: bytes | None) -> OutboundLink:
        if sockets._config.node_rid.value == "a" and not release.is_set():
            failures.append(endpoint)
            raise zmq.ZMQError(errno.EMFILE)
        return real(sockets, endpoint, hwm, key)

    monkeypatch.setattr(MeshSockets, "_open_link", flaky)
    meshes: list[RouteMesh] = []
    async with node("a") as (a, _), node("b", echo(lambda: meshes[0])) as (b, _):
        meshes.append(b)
        a.add_peer(b.address)  # fails inside, raises nothing
        b.add_peer(a.address)
        with trio.fail_after(10):
            # b's links opened the route at a, but a has no links to b yet.
            assert isinstance(await a.route_changes.receive(), RouteUp)
            await until(lambda: len(failures) >= 3)
            assert a.is_up(B) is None
            assert {B} == a._sockets.waiting
            release.set()
            await until_up(a, "b")
            reply = await ask(a, "b", b"after the retry")
        assert b"after the retry" == reply.payload
        assert frozenset() == a._sockets.waiting
    [warning] = warnings_about(caplog, "cannot connect to peer b: ")
    assert "Too many open files" in warning
    assert "max_peers=128" in warning
    assert "RLIMIT_NOFILE" in warning


@pytest.mark.spec("TRN-29", "TRN-18")
async def test_links_renewed_after_a_route_loss_that_fail_are_retried(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """b goes silent while a request of a waits for it, so a loses its route and renews its
    links, which fail: a keeps running, logs b once, and reaches b again after a retry."""
    caplog.set_level(logging.WARNING, "zlink_trio.transport")
    failing = False
    real = MeshSockets._open_link

    def flaky(sockets: MeshSockets, endpoint: str, hwm: int, key: bytes | None) -> OutboundLink:
        if failing and sockets._config.node_rid.value == "a":
            raise zmq.ZMQError(errno.EMFILE)
        return real(sockets, endpoint, hwm, key)

    monkeypatch.setattr(MeshSockets, "_open_link", flaky)
    meshes: list[RouteMesh] = []
    answer = echo(lambda: meshes[0])

    async def handle(origin: PeerRun, message: Send | Request) -> None:
        if type(message) is Request and message.message_type.value != "hang":
            await answer(origin, message)

    async with node("a") as (a, _), node("b", handle) as (b, _):
        meshes.append(b)
        await connect(a, b)
        failing = True
        b.remove_peer(a.config.node_rid)  # a hears nothing more from b
        with trio.fail_after(10), pytest.raises(ZLinkError) as lost:
            await ask(a, "b", kind="hang", timeout=30)  # watched: a judges b's silence
        assert ErrorKind.UNAVAILABLE == lost.value.kind
        assert isinstance(a.route_changes.receive_nowait(), RouteLost)
        assert {B} == a._sockets.waiting
        failing = False
        b.add_peer(a.address)
        with trio.fail_after(10):
            await until_up(a, "b")
            reply = await ask(a, "b", b"renewed")
        assert b"renewed" == reply.payload
    assert 1 == len(warnings_about(caplog, "cannot connect to peer b: "))


@pytest.mark.spec("TRN-29")
async def test_a_removed_peer_is_no_longer_retried(monkeypatch: pytest.MonkeyPatch) -> None:
    """Links that always fail are retried while b is a peer; remove_peer ends the retries."""
    attempts: list[str] = []

    def failing(sockets: MeshSockets, endpoint: str, hwm: int, key: bytes | None) -> OutboundLink:
        attempts.append(endpoint)
        raise zmq.ZMQError(errno.EMFILE)

    monkeypatch.setattr(MeshSockets, "_open_link", failing)
    async with node("a") as (a, _):
        a.add_peer(PeerAddress(B, "tcp://127.0.0.1:1", "tcp://127.0.0.1:2"))
        with trio.fail_after(10):
            await until(lambda: len(attempts) >= 3)
        assert {B} == a._sockets.waiting
        a.remove_peer(B)
        assert frozenset() == a._sockets.waiting


@pytest.mark.spec("TRN-30")
async def test_a_mesh_configured_for_n_peers_connects_n_and_the_next_waits_for_a_slot(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """max_peers=600 connects 600 peers (1200 DEALERs, above libzmq's default of 1023 sockets);
    the 601st waits with a warning naming max_peers and is connected once a peer leaves."""
    caplog.set_level(logging.WARNING, "zlink_trio.transport")
    peers = nowhere(601)
    async with node("a", max_peers=600) as (a, _):
        assert 4 * 600 + 2 + 16 == a._sockets._context.get(zmq.MAX_SOCKETS)
        for address in peers[:600]:
            a.add_peer(address)
        assert 600 == len(a._sockets.links)
        assert frozenset() == a._sockets.waiting
        a.add_peer(peers[600])
        assert {peers[600].node_rid} == a._sockets.waiting
        [warning] = warnings_about(caplog, "cannot connect to peer p600")
        assert "max_peers" in warning
        assert "HostConfig.max_peers" in warning
        a.remove_peer(peers[0].node_rid)
        with trio.fail_after(10):
            await until(lambda: not a._sockets.waiting)
        assert peers[600] == a._sockets.links[peers[600].node_rid].address


@pytest.mark.spec("TRN-30")
async def test_libzmqs_own_socket_limit_gives_a_clear_waiting_peer(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A context whose socket limit is met anyway (made tiny here) refuses the next peer with
    libzmq's EMFILE, translated: the peer waits and the warning names both limits."""
    caplog.set_level(logging.WARNING, "zlink_trio.transport")
    monkeypatch.setattr(links, "socket_limit", lambda max_peers, secure: 4)  # ROUTERs + 1 peer
    peers = nowhere(2)
    async with node("a") as (a, _):
        a.add_peer(peers[0])
        a.add_peer(peers[1])
        assert [peers[0].node_rid] == list(a._sockets.links)
        assert {peers[1].node_rid} == a._sockets.waiting
    [warning] = warnings_about(caplog, "cannot connect to peer p1")
    assert "Too many open files" in warning
    assert "HostConfig.max_peers" in warning
    assert "RLIMIT_NOFILE" in warning


def open_files() -> int:
    return len(os.listdir("/proc/self/fd"))


def endpoints(mesh: RouteMesh) -> tuple[str, str]:
    return mesh.application_endpoint, mesh.completion_endpoint


async def ignore(origin: PeerRun, message: Send | Request) -> None:
    """A handler for meshes that are only counted."""


@pytest.mark.spec("TRN-31")
@pytest.mark.parametrize("secure", [False, True])
async def test_a_mesh_holds_the_stated_sockets_and_file_descriptors(secure: bool) -> None:
    """/proc/self/fd grows by capacity.descriptors(N) = 9 + 6N (10 + 6N with CURVE) when a
    mesh opens and connects N peers (the peers' own links to it, with CURVE, add their 6N)."""
    count = 4
    secrets = [new_curve_secret() if secure else None for _ in range(count + 1)]

    def peer_of(mesh: RouteMesh, secret: bytes | None) -> PeerAddress:
        key = None if secret is None else curve_public(secret)
        return PeerAddress(mesh.config.node_rid, *endpoints(mesh), key)

    async with AsyncExitStack() as stack:
        peers = [
            await stack.enter_async_context(
                open_route_mesh(config(f"p{i}", curve_secret_key=secrets[i + 1]), ignore)
            )
            for i in range(count)
        ]
        before = open_files()
        a = await stack.enter_async_context(
            open_route_mesh(config("a", curve_secret_key=secrets[0]), ignore)
        )
        assert capacity.descriptors(0, secure) == open_files() - before
        for peer, secret in zip(peers, secrets[1:], strict=True):
            a.add_peer(peer_of(peer, secret))
            if secure:  # its ZAP handler admits only its peers: a becomes one of theirs
                peer.add_peer(peer_of(a, secrets[0]))
        expected = capacity.descriptors(count, secure) + (6 * count if secure else 0)
        with trio.fail_after(10):
            for peer in peers:
                await until_up(peer, "a")
            await until(lambda: open_files() - before >= expected)
        assert expected == open_files() - before


@pytest.mark.spec("TRN-32")
async def test_a_mesh_warns_at_start_when_the_open_file_limit_is_too_low(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """With an open-file limit below what max_peers needs, starting warns, naming RLIMIT_NOFILE
    and max_peers, and runs; with a limit that holds them, it says nothing."""
    caplog.set_level(logging.WARNING, "zlink_trio.transport")
    monkeypatch.setattr(capacity, "open_files_limit", lambda: open_files() + 1_000)
    async with node("a", max_peers=150):  # 9 + 6 * 150 = 909 files: fits
        pass
    assert [] == warnings_about(caplog, "RLIMIT_NOFILE")
    async with node("b", max_peers=200):  # 1209 files: does not
        pass
    [warning] = warnings_about(caplog, "RLIMIT_NOFILE")
    assert "max_peers=200" in warning
    assert "ulimit -n" in warning
