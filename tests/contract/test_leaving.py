"""A relocated host's leave-taking (specs/relocation.md RELOC-78; routing/leaving.py).

Three hosts of one mesh: ``source`` (version 1) holds a Spot, ``caller`` (version 1) has sent
to it and keeps its owner in its routing cache, ``target`` (version 2) takes it in a rolling
update. The caller's store change hints are switched off, as if the move's announcement never
reached it. When the source's shutdown is about to seal its admission, the caller's cache must
no longer name the source (it was asked to drop it and flushed what it had sent there), and the
Spot, now on the target, has every message once, in order, including one the caller sends
after the source has stopped.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.peers import meet
from zlink_trio._runtime.declarations.system import RelocateAnswer
from zlink_trio._runtime.routing import inbound
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()
COUNTER = "leave.Counter"


@app.message("leave.Add")
@attrs.frozen
class Add:
    n: int


@app.message("leave.Get")
@attrs.frozen
class Get:
    pass


@app.message("leave.Stall")
@attrs.frozen
class Stall:
    pass


class Stalled:
    """The Spot's ``Stall`` turn: ``entered`` once it runs, it answers once ``go``."""

    entered = trio.Event()
    go = trio.Event()


@pytest.fixture(autouse=True)
def reset() -> None:
    Stalled.entered, Stalled.go = trio.Event(), trio.Event()


@app.message("leave.Seen")
@attrs.frozen
class Seen:
    added: tuple[int, ...]
    node: str


class History(zl.SpotRelocationAdapter["Counter"]):
    async def capture(self, target: Counter) -> bytes:
        return bytes(target.added)

    async def restore(self, target: Counter, payload: bytes) -> None:
        target.added = list(payload)


@app.instance_spot(COUNTER, relocation=zl.preserve_state_with(History))
class Counter(zl.InstanceSpot):
    def __init__(self) -> None:
        self.added: list[int] = []

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.added.append(msg.n)

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Seen:
        return Seen(tuple(self.added), self.context.ref.node_rid.value)

    @zl.request_handler(Stall)
    async def stall(self, req: Stall) -> Seen:
        Stalled.entered.set()
        await Stalled.go.wait()
        return Seen(tuple(self.added), self.context.ref.node_rid.value)


def _remote(host: TestHost) -> Remote:
    remote = host.host._tree.remote  # type: ignore[union-attr]
    assert isinstance(remote, Remote)
    return remote


async def _get(host: TestHost) -> Seen:
    seen = await host.route.request_to_spot("c-1", Get(), reply_type=Seen).submit()
    assert isinstance(seen, Seen)
    return seen


@attrs.frozen
class Mesh:
    target: TestHost
    caller: TestHost
    source: TestHost
    remote: Remote
    """The caller's routing side, whose store hints are off."""
    sealing: trio.Event
    """Set when the source's shutdown is about to seal its admission."""
    at_seal: list[object]
    """What the caller's cache named for the Spot at that moment."""


@asynccontextmanager
async def _stale_caller(store_dsn: str, monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Mesh]:
    """Three hosts: the Spot on the source, handled there once from the source and once from the
    caller (whose cache names the source), the caller's store hints switched off, and the
    source's shutdown watched at the point where it seals its admission."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores, application_version="2") as target,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=target.mesh, application_version="1"
        ) as caller,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=target.mesh, application_version="1"
        ) as source,
    ):
        for one, other in ((source, target), (caller, source), (source, caller)):
            await meet(one, other)
        await source.route.send_to_spot("c-1", Add(1)).instance_spot(COUNTER).submit()
        assert (1,) == (await _get(source)).added  # Ready, its record written
        await caller.route.send_to_spot("c-1", Add(2)).submit()
        assert (1, 2) == (await _get(caller)).added
        remote = _remote(caller)
        assert source.node_rid == remote._cache[zl.SpotId("c-1")].node_rid
        monkeypatch.setattr(remote, "_forget_key", lambda key: None)  # no hint reaches it
        mesh = Mesh(target, caller, source, remote, trio.Event(), [])
        tree: Any = source.host._tree
        relay_stale_routes = tree._relay_stale_routes

        async def then_seal(node: object) -> None:
            await relay_stale_routes(node)
            mesh.at_seal.append(remote._cache.get(zl.SpotId("c-1")))
            mesh.sealing.set()

        monkeypatch.setattr(tree, "_relay_stale_routes", then_seal)
        mode = zl.RelocationMode.ROLLING_UPDATE
        assert (await source.host.relocate(mode=mode, target_version="2")).relocated
        yield mesh


@pytest.mark.spec("RELOC-78")
async def test_a_leaving_host_has_every_peer_drop_its_routes_before_it_seals(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller's route to the source outlives the move (no hint reached it); the source's
    shutdown asks it to drop that route before sealing its admission, so nothing the caller
    sends is left at the stopped source."""
    async with _stale_caller(store_dsn, monkeypatch) as mesh:
        await mesh.caller.route.send_to_spot("c-1", Add(3)).submit()  # the stale route: relayed
        with trio.fail_after(30):
            await mesh.source.host.shutdown()
        cached = mesh.at_seal[0]
        assert cached is None or getattr(cached, "node_rid", None) != mesh.source.node_rid
        await mesh.caller.route.send_to_spot("c-1", Add(4)).submit()
        seen = await _get(mesh.caller)
        assert ((1, 2, 3, 4), mesh.target.node_rid.value) == (seen.added, seen.node)


@pytest.mark.spec("RELOC-78")
async def test_a_peer_answers_a_leaving_host_only_once_what_it_sent_there_was_read(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A request of the caller's still waits in the source's reader (held there) when the
    source takes its leave: the caller's answer waits for its flush behind that request, and the
    source then waits for the relayed request's answer (it stalls at the target), so its
    shutdown seals its admission only after both, and the caller gets the Spot's answer."""
    held, released, asked = trio.Event(), trio.Event(), trio.Event()
    relay = inbound.relay_followed

    async def held_relay(*args: Any) -> None:
        if not held.is_set():  # the first relayed message: the caller's Stall
            held.set()
            await released.wait()  # the source's reader waits here
        await relay(*args)

    async with _stale_caller(store_dsn, monkeypatch) as mesh:
        monkeypatch.setattr(inbound, "relay_followed", held_relay)
        forget_owner = mesh.remote.forget_owner

        def forgetting(rid: zl.NodeRid) -> int:
            asked.set()
            return forget_owner(rid)

        monkeypatch.setattr(mesh.remote, "forget_owner", forgetting)
        answers: list[Seen] = []

        async def stall() -> None:  # by the stale route
            call = mesh.caller.route.request_to_spot("c-1", Stall(), reply_type=Seen)
            answers.append(await call.timeout(25).submit())

        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stall)
                await held.wait()
                nursery.start_soon(mesh.source.host.shutdown)
                await asked.wait()  # the source takes its leave; its reader still waits
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert not mesh.sealing.is_set(), "sealed with a request of the caller unread"
                released.set()
                await Stalled.entered.wait()  # relayed; its answer is awaited
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert not mesh.sealing.is_set(), "sealed with a relayed request unanswered"
                Stalled.go.set()
        target = mesh.target.node_rid.value
        assert [((1, 2), target)] == [(answer.added, answer.node) for answer in answers]
        await mesh.caller.route.send_to_spot("c-1", Add(3)).submit()
        seen = await _get(mesh.caller)
        assert ((1, 2, 3), target) == (seen.added, seen.node)


@pytest.mark.spec("RELOC-78")
async def test_a_peer_answers_a_leaving_host_only_once_its_waiting_sends_there_went(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A send of the caller's that named the source still waits for the source's credit (the
    Spot there paused it) when the source takes its leave: the caller answers only once that
    send is on the connection, so the source relays it before sealing, and the Spot gets it."""
    asked = trio.Event()
    async with _stale_caller(store_dsn, monkeypatch) as mesh:
        source, spot = mesh.source.node_rid, zl.SpotId("c-1")
        forget_owner = mesh.remote.forget_owner

        def forgetting(rid: zl.NodeRid) -> int:
            asked.set()
            return forget_owner(rid)

        monkeypatch.setattr(mesh.remote, "forget_owner", forgetting)
        caller_inbound: Any = mesh.caller.host._tree.inbound  # type: ignore[union-attr]
        reply, answered = caller_inbound._reply, []

        def replying(origin: object, request: Any, result: object) -> None:
            if request.message_type.value == "zlink.Leaving":
                answered.append(result)
            reply(origin, request, result)

        monkeypatch.setattr(caller_inbound, "_reply", replying)
        mesh.remote.credits.pause(source, spot)
        with trio.fail_after(30):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(mesh.caller.route.send_to_spot("c-1", Add(3)).submit)
                while source not in mesh.remote._sending:  # the send waits for credit
                    await trio.testing.wait_all_tasks_blocked()
                nursery.start_soon(mesh.source.host.shutdown)
                await asked.wait()  # the source takes its leave; the send still waits
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert not mesh.sealing.is_set(), "sealed with a send of the caller waiting"
                mesh.remote.credits.resume(source, spot)
        assert [RelocateAnswer(True)] == answered  # once the send went, not at its deadline
        seen = await _get(mesh.caller)
        assert ((1, 2, 3), mesh.target.node_rid.value) == (seen.added, seen.node)
