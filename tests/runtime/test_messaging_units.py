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
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Batch, IfMissing, Put, StoreConfig, open_stores
from zlink_trio._runtime.ownership.node_record import PeerDown
from zlink_trio._runtime.routing.remote import Owner

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


@app.message("msgunits.Hold")
@attrs.frozen
class Hold:
    pass


class Seen:
    notes: list[tuple[str, str, str, dict[str, str]]] = []  # noqa: RUF012  # reset per test
    contexts: list[zl.MessageContext] = []  # noqa: RUF012  # reset per test
    arrived = trio.Event()
    holding = trio.Event()
    release = trio.Event()
    closing_for = 0.0


@app.user_spot("msgunits.Room")
class Room(NoMembers):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        Seen.contexts.append(ctx)
        return Answer(self.context.ref.node_rid.value, req.text)

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, req: Hold) -> Answer:
        Seen.holding.set()
        await Seen.release.wait()
        return Answer(self.context.ref.node_rid.value, "held")

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

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        Seen.notes.append(("counter", self.context.ref.node_rid.value, msg.text, {}))
        Seen.arrived.set()


@app.actor("msgunits.User")
class User(zl.Actor):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        Seen.contexts.append(ctx)
        return Answer(self.context.ref.node_rid.value, req.text)

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, req: Hold) -> Answer:
        Seen.holding.set()
        await Seen.release.wait()
        return Answer(self.context.ref.node_rid.value, "held")

    @zl.packet_handler(Note)
    async def note(self, msg: Note, ctx: zl.MessageContext) -> None:
        Seen.contexts.append(ctx)
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
    Seen.contexts = []
    Seen.arrived = trio.Event()
    Seen.holding = trio.Event()
    Seen.release = trio.Event()
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


@pytest.mark.spec("ACT-15", "ACT-14")
async def test_a_local_actor_sees_its_id_its_spot_and_the_metadata(store_dsn: str) -> None:
    """A send and a request to an Actor of this host: the handler's context names the Actor and
    its current Spot, and carries the metadata as sent (and a deadline only for the request)."""
    user = fresh("user")
    async with zl.open_host(app, zl.HostConfig(mesh=fresh("mu"), store_dsn=store_dsn)) as host:
        created = await host.actors.create(user, "msgunits.User").submit()
        assert created.actor_ref is not None
        await host.route.send_to_actor(user, Note("n")).metadata("k", "send").submit()
        with trio.fail_after(10):
            await Seen.arrived.wait()
        answer = await (
            host.route.request_to_actor(user, Ask("r"), reply_type=Answer)
            .metadata("k", "request")
            .submit()
        )
        assert Answer(host.node_rid.value, "r") == answer
    sent, asked = Seen.contexts
    for context, value in ((sent, "send"), (asked, "request")):
        assert zl.ActorId(user) == context.actor_id
        assert {"k": value} == dict(context.metadata)
        assert context.spot_id is not None
    assert sent.deadline is None
    assert asked.deadline is not None


@pytest.mark.spec("ERR-8.1")
async def test_a_request_to_an_actor_waits_for_a_job_permit_within_its_deadline(
    store_dsn: str,
) -> None:
    """With the host's one job permit taken by a message queued behind a held request (a job
    holds its permit while it waits in a queue), a request to an Actor waits for a permit until
    its own deadline and ends DEADLINE_EXCEEDED."""
    user = fresh("user")
    config = zl.HostConfig(mesh=fresh("mu"), store_dsn=store_dsn, app_job_queue_size=1)
    async with zl.open_host(app, config) as host:
        await host.actors.create(user, "msgunits.User").submit()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.route.request_to_actor(user, Hold(), reply_type=Answer).submit)
            with trio.fail_after(10):
                await Seen.holding.wait()
            await host.route.send_to_actor(user, Note("queued")).submit()
            with trio.fail_after(10), pytest.raises(zl.ZLinkError) as late:
                await (
                    host.route.request_to_actor(user, Ask("late"), reply_type=Answer)
                    .timeout(0.2)
                    .submit()
                )
            assert zl.ErrorKind.DEADLINE_EXCEEDED == late.value.kind
            Seen.release.set()


@pytest.mark.spec("ERR-5.10")
async def test_a_request_to_a_full_actor_queue_leaves_nothing_in_flight(store_dsn: str) -> None:
    """A request finding the Actor's queue full ends CAPACITY_EXCEEDED; once the rest is
    answered, no call is left in the host's in-flight table."""
    user = fresh("user")
    config = zl.HostConfig(mesh=fresh("mu"), store_dsn=store_dsn, mailbox_limit=1)
    async with zl.open_host(app, config) as host:
        await host.actors.create(user, "msgunits.User").submit()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.route.request_to_actor(user, Hold(), reply_type=Answer).submit)
            with trio.fail_after(10):
                await Seen.holding.wait()
            await host.route.send_to_actor(user, Note("queued")).submit()
            # The Actor's queue (limit 1) holds the Note: a request finds it full.
            with pytest.raises(zl.ZLinkError) as full:
                await host.route.request_to_actor(user, Ask("full"), reply_type=Answer).submit()
            assert zl.ErrorKind.CAPACITY_EXCEEDED == full.value.kind
            Seen.release.set()
        with trio.fail_after(10):
            await Seen.arrived.wait()
        assert 0 == host._node.dispatcher.in_flight


@pytest.mark.spec("ROUTE-5", "ERR-8.1")
async def test_a_remote_send_that_fails_after_admission_gives_back_no_extra_permit(
    store_dsn: str,
) -> None:
    """A send or request handed to the remote side has given its local job permit back; when
    the remote side then fails (here: the caller still names an owner that has left), the
    caller's permits are as many as configured, not one more."""
    room = fresh("room")
    mesh = fresh("mu")
    config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, app_job_queue_size=1)
    async with zl.open_host(app, config) as first:
        remote = first._messaging.remote
        assert remote is not None
        async with zl.open_host(app, zl.HostConfig(mesh=mesh, store_dsn=store_dsn)) as second:
            await second.spots.get_or_create(room, "msgunits.Room").submit()
            await first.route.send_to_spot(room, Note("there")).submit()
            gone = second.node_rid
            events = remote._membership.subscribe()
        with trio.fail_after(20):
            async with events:
                async for event in events:  # the caller's membership sees the owner leave
                    if isinstance(event, PeerDown) and event.rid == gone:
                        break
            await trio.testing.wait_all_tasks_blocked()  # and its routing took it in

        async def stale_owner_of(target: object, deadline: float) -> Owner:
            return Owner(gone)  # the instant the caller still names the departed owner

        remote.owner_of = stale_owner_of  # type: ignore[assignment,method-assign]
        for call in (
            first.route.send_to_spot(room, Note("late")),
            first.route.request_to_spot(room, Ask("late"), reply_type=Answer),
        ):
            with pytest.raises(zl.ZLinkError) as caught:
                await call.submit()
            assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
            assert 1 == first._node.jobs.available


@pytest.mark.spec("GLOBAL-12", "ROUTE-8")
async def test_a_remote_send_carries_its_instance_type(store_dsn: str) -> None:
    """A send marked ``instance_spot(type)`` that goes to another host carries the type: when
    the id is not active there (the caller still names that host as its owner, the instant a
    lost cold race hands messages over), that host activates it cold and handles the message."""
    counter = fresh("counter")
    async with two_hosts(store_dsn) as (first, second, _):
        remote = first._messaging.remote
        assert remote is not None

        async def stale_owner_of(target: object, deadline: float) -> Owner:
            return Owner(second.node_rid)

        remote.owner_of = stale_owner_of  # type: ignore[assignment,method-assign]
        await (
            first.route.send_to_spot(counter, Note("cold"))
            .instance_spot("msgunits.Counter")
            .submit()
        )
        with trio.fail_after(10):
            await Seen.arrived.wait()
    assert [("counter", second.node_rid.value, "cold", {})] == Seen.notes


@pytest.mark.spec("CMP-5.10", "CMP-9.5")
async def test_a_local_spot_request_sees_its_spot_metadata_and_mesh(store_dsn: str) -> None:
    """A request to a Spot of this host: its handler's context names the Spot and carries the
    metadata and a deadline; a request naming another mesh ends NOT_FOUND and reaches nobody."""
    room = fresh("room")
    async with zl.open_host(app, zl.HostConfig(mesh=fresh("mu"), store_dsn=store_dsn)) as host:
        await host.spots.get_or_create(room, "msgunits.Room").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await (
                host.route.request_to_spot(room, Ask("elsewhere"), reply_type=Answer)
                .in_mesh("elsewhere")
                .submit()
            )
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        answer = await (
            host.route.request_to_spot(room, Ask("here"), reply_type=Answer)
            .metadata("k", "v")
            .submit()
        )
        assert Answer(host.node_rid.value, "here") == answer
    [context] = Seen.contexts
    assert zl.SpotId(room) == context.spot_id
    assert {"k": "v"} == dict(context.metadata)
    assert context.actor_id is None
    assert context.deadline is not None


@pytest.mark.spec("ERR-5.10")
async def test_a_request_to_a_full_spot_queue_leaves_nothing_in_flight(store_dsn: str) -> None:
    """A request finding the Spot's queue full ends CAPACITY_EXCEEDED; once the rest is
    answered, no call is left in the host's in-flight table."""
    room = fresh("room")
    config = zl.HostConfig(mesh=fresh("mu"), store_dsn=store_dsn, mailbox_limit=1)
    async with zl.open_host(app, config) as host:
        await host.spots.get_or_create(room, "msgunits.Room").submit()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.route.request_to_spot(room, Hold(), reply_type=Answer).submit)
            with trio.fail_after(10):
                await Seen.holding.wait()
            await host.route.send_to_spot(room, Note("queued")).submit()
            with pytest.raises(zl.ZLinkError) as full:
                await host.route.request_to_spot(room, Ask("full"), reply_type=Answer).submit()
            assert zl.ErrorKind.CAPACITY_EXCEEDED == full.value.kind
            Seen.release.set()
        with trio.fail_after(10):
            await Seen.arrived.wait()
        assert 0 == host._node.dispatcher.in_flight
