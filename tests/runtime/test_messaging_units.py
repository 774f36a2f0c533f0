"""Choosing local or remote for sends, requests and closes (routing/messaging.py, Rules 1-7),
with two hosts of one mesh in this process: what the contract tests of one host cannot show.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import cbor2
import pytest
import trio

import zlink_trio as zl
from zlink_trio._integration.store import Batch, IfMissing, Put, StoreConfig, open_stores

app = zl.Application()


@app.message("msgunits.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("msgunits.Answer")
@attrs.frozen
class Answer:
    node_rid: str
    text: str


@app.message("msgunits.Note")
@attrs.frozen
class Note:
    text: str


class Seen:
    notes: list[tuple[str, str, str, dict[str, str]]] = []  # noqa: RUF012  # reset per test
    arrived = trio.Event()
    closing_for = 0.0


@app.user_spot("msgunits.Room")
class Room(zl.Spot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(self.context.ref.node_rid.value, req.text)

    @zl.packet_handler(Note)
    async def note(self, msg: Note, ctx: zl.MessageContext) -> None:
        Seen.notes.append(("room", self.context.ref.node_rid.value, msg.text, dict(ctx.metadata)))
        Seen.arrived.set()

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        await trio.sleep(Seen.closing_for)


@app.instance_spot("msgunits.Counter")
class Counter(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(self.context.ref.node_rid.value, req.text)


@app.actor("msgunits.User")
class User(zl.Actor):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(self.context.ref.node_rid.value, req.text)

    @zl.packet_handler(Note)
    async def note(self, msg: Note, ctx: zl.MessageContext) -> None:
        Seen.notes.append(("user", self.context.ref.node_rid.value, msg.text, dict(ctx.metadata)))
        Seen.arrived.set()


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@asynccontextmanager
async def two_hosts(
    store_dsn: str, **caller: Any
) -> AsyncIterator[tuple[zl.Host, zl.Host, zl.HostConfig]]:
    """A caller host (``caller`` are its config values) and an owner host of one mesh."""
    mesh = fresh("mu")
    owner_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn)
    caller_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, **caller)
    async with (
        zl.open_host(app, caller_config) as first,
        zl.open_host(app, owner_config) as second,
    ):
        yield first, second, caller_config


@pytest.fixture(autouse=True)
def fresh_seen() -> None:
    Seen.notes = []
    Seen.arrived = trio.Event()
    Seen.closing_for = 0.0


@pytest.mark.spec("ACT-14", "ROUTE-1")
async def test_a_send_to_an_actor_of_another_host_is_handled_there_with_its_metadata(
    store_dsn: str,
) -> None:
    """``send_to_actor`` from a host that does not hold the Actor reaches it on its owner, with
    the message and metadata as sent."""
    user = fresh("user")
    async with two_hosts(store_dsn) as (first, second, _):
        await second.actors.create(user, "msgunits.User").submit()
        with trio.fail_after(15):
            await first.route.send_to_actor(user, Note("hello")).metadata("k", "v").submit()
            await Seen.arrived.wait()
        assert [("user", second.node_rid.value, "hello", {"k": "v"})] == Seen.notes


@pytest.mark.spec("ROUTE-4")
async def test_a_send_to_an_actor_whose_owner_is_not_live_is_unavailable(store_dsn: str) -> None:
    """An Actor record whose owner run has no live node record: a send to it ends UNAVAILABLE
    (not NOT_FOUND, and it is not activated here)."""
    user = fresh("user")
    mesh = fresh("mu")
    dead = {
        "owner": "node-dead",
        "owner_generation": 7,
        "generation": 4,
        "kind": int(zl.SpotKind.INVALID),
        "type": "msgunits.User",
        "state": "ready",
        "mesh": mesh,
    }
    async with open_stores(StoreConfig(dsn=store_dsn), environ={}) as stores:
        key = f"actor/{user}"
        await stores.location.write(Batch([IfMissing(key)], [Put(key, cbor2.dumps(dead))]))
    async with zl.open_host(app, zl.HostConfig(mesh=mesh, store_dsn=store_dsn)) as host:
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_actor(user, Note("to the dead")).submit()
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        assert user in caught.value.message
        assert await host.actors.find(user) is None


@pytest.mark.spec("SPOT-92")
async def test_a_remote_close_waits_for_the_owners_closing_whatever_the_callers_timeout(
    store_dsn: str,
) -> None:
    """A close called on another host than the owner waits for the owner's ``on_closing``
    (closing timeout and release timeout, plus one request timeout for the way): with a
    request timeout of the caller far longer than the owner's closing, it still returns True."""
    room = fresh("room")
    Seen.closing_for = 0.3
    async with two_hosts(store_dsn, request_timeout=30.0) as (first, second, _):
        created = await second.spots.get_or_create(room, "msgunits.Room").submit()
        with trio.fail_after(20):
            assert await first.spots.close(created.spot_ref) is True
        with pytest.raises(zl.ZLinkError) as gone:
            await second.route.request_to_spot(room, Ask("x"), reply_type=Answer).submit()
        assert zl.ErrorKind.NOT_FOUND == gone.value.kind


@pytest.mark.spec("SPOT-33")
async def test_a_close_of_a_ref_of_another_mesh_is_false_at_once(store_dsn: str) -> None:
    """A ref naming another mesh names no incarnation this mesh holds: ``close`` returns False
    without reaching out to the host the ref names, and closes nothing."""
    room = fresh("room")
    async with two_hosts(store_dsn) as (first, second, config):
        created = await second.spots.get_or_create(room, "msgunits.Room").submit()
        elsewhere = attrs.evolve(created.spot_ref, mesh_name=zl.MeshName(f"{config.mesh}-x"))
        with trio.fail_after(2):
            assert await first.spots.close(elsewhere) is False
        answer = await first.route.request_to_spot(room, Ask("still"), reply_type=Answer).submit()
        assert Answer(second.node_rid.value, "still") == answer


@pytest.mark.spec("CMP-4.3")
async def test_remote_sends_and_requests_hold_no_local_job_permit(store_dsn: str) -> None:
    """With one job permit on the caller, calls to Spots and Actors held by the other host go on
    one after another: a remote target's queue is at its owner, so none of them keeps the
    caller's permit; failed calls give theirs back too."""
    room, user = fresh("room"), fresh("user")
    async with two_hosts(store_dsn, app_job_queue_size=1) as (first, second, _):
        await second.spots.get_or_create(room, "msgunits.Room").submit()
        await second.actors.create(user, "msgunits.User").submit()
        with trio.fail_after(20):
            for n in range(3):
                await first.route.send_to_spot(room, Note(f"s{n}")).submit()
                await first.route.send_to_actor(user, Note(f"a{n}")).submit()
                answer = await first.route.request_to_spot(
                    room, Ask(f"r{n}"), reply_type=Answer
                ).submit()
                assert Answer(second.node_rid.value, f"r{n}") == answer
                answer = await first.route.request_to_actor(
                    user, Ask(f"u{n}"), reply_type=Answer
                ).submit()
                assert Answer(second.node_rid.value, f"u{n}") == answer
                for call in (
                    first.route.request_to_spot(fresh("none"), Ask("x"), reply_type=Answer),
                    first.route.send_to_spot(fresh("none"), Note("x")),
                ):
                    with pytest.raises(zl.ZLinkError) as caught:
                        await call.submit()
                    assert zl.ErrorKind.NOT_FOUND == caught.value.kind
            # The local Spot still gets a permit: nothing leaked.
            mine = fresh("mine")
            await first.spots.get_or_create(mine, "msgunits.Room").submit()
            answer = await first.route.request_to_spot(
                mine, Ask("here"), reply_type=Answer
            ).submit()
            assert Answer(first.node_rid.value, "here") == answer


@pytest.mark.spec("SPOT-19")
async def test_instance_spot_without_a_type_cannot_reach_another_host(store_dsn: str) -> None:
    """``instance_spot()`` without a type names no type for the owner to activate: to an id held
    by another host it ends INVALID_OPERATION, naming the fix; with the type it is answered."""
    counter = fresh("counter")
    async with two_hosts(store_dsn) as (first, second, _):
        await (
            second.route.request_to_spot(counter, Ask("own"), reply_type=Answer)
            .instance_spot("msgunits.Counter")
            .submit()
        )
        with pytest.raises(zl.ZLinkError) as caught:
            await (
                first.route.request_to_spot(counter, Ask("x"), reply_type=Answer)
                .instance_spot()
                .submit()
            )
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        assert "name the type" in caught.value.message
        answer = await (
            first.route.request_to_spot(counter, Ask("y"), reply_type=Answer)
            .instance_spot("msgunits.Counter")
            .submit()
        )
        assert Answer(second.node_rid.value, "y") == answer
