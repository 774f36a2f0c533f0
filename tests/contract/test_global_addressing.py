"""Global addressing between hosts of one mesh in one process: Spots and Actors reached by id on
whichever host owns them (specs/routing.md; specs/mesh.md MESH-19; the
multi-process proofs are in tests/e2e/)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import cbor2
import pytest
import trio

import zlink_trio as zl
from zlink_trio._integration.store import Batch, IfMissing, Put, StoreConfig, open_stores

app = zl.Application()
seen: list[tuple[str, str]] = []


class Noted:
    event = trio.Event()


@app.message("global.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("global.Answer")
@attrs.frozen
class Answer:
    node_rid: str
    text: str
    has_deadline: bool


@app.message("global.Note")
@attrs.frozen
class Note:
    text: str


@app.message("global.Unhandled")
@attrs.frozen
class Unhandled:
    pass


class Answering:
    async def _answer(self, req: Ask, ctx: zl.MessageContext, rid: str) -> Answer:
        if req.text == "boom":
            raise RuntimeError("secret detail")
        if ctx.deadline is not None:
            assert ctx.deadline > trio.current_time()
        return Answer(rid, req.text, ctx.deadline is not None)


@app.user_spot("global.Room")
class Room(Answering, zl.Spot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        return await self._answer(req, ctx, self.context.ref.node_rid.value)

    @zl.packet_handler(Note)
    async def note(self, msg: Note, ctx: zl.MessageContext) -> None:
        seen.append((self.context.ref.node_rid.value, f"{msg.text}:{ctx.deadline}"))
        Noted.event.set()


@app.instance_spot("global.Counter")
class Counter(Answering, zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        return await self._answer(req, ctx, self.context.ref.node_rid.value)


@app.actor("global.User")
class User(Answering, zl.Actor):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        return await self._answer(req, ctx, self.context.ref.node_rid.value)


@asynccontextmanager
async def two_hosts(store_dsn: str) -> AsyncIterator[tuple[zl.Host, zl.Host]]:
    config = zl.HostConfig(mesh=f"g-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with zl.open_host(app, config) as first, zl.open_host(app, config) as second:
        yield first, second


def fresh(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


@pytest.mark.spec("ROUTE-1", "ROUTE-6", "MESH-19")
async def test_spots_and_actors_are_reached_on_the_host_that_owns_them(store_dsn: str) -> None:
    """A request and a send from one host reach a User Spot, an Instance Spot and an Actor owned
    by the other; the handler sees the caller's deadline for a request and none for a send."""
    seen.clear()
    Noted.event = trio.Event()
    room, counter, user = fresh("room"), fresh("counter"), fresh("user")
    async with two_hosts(store_dsn) as (first, second):
        owner = second.node_rid.value
        created = await second.spots.get_or_create(room, "global.Room").submit()
        assert second.node_rid == created.spot_ref.node_rid
        await (
            second.route.request_to_spot(counter, Ask("first"), reply_type=Answer)
            .instance_spot("global.Counter")
            .submit()
        )
        await second.actors.create(user, "global.User").submit()
        with trio.fail_after(15):
            answers = [
                await first.route.request_to_spot(room, Ask("hi"), reply_type=Answer).submit(),
                await first.route.request_to_spot(counter, Ask("c"), reply_type=Answer)
                .instance_spot("global.Counter")
                .submit(),
                await first.route.request_to_actor(user, Ask("u"), reply_type=Answer).submit(),
            ]
            await first.route.send_to_spot(room, Note("one-way")).submit()
            await Noted.event.wait()
        assert [Answer(owner, t, True) for t in ("hi", "c", "u")] == answers
        assert (owner, "one-way:None") in seen


@pytest.mark.spec("ROUTE-2")
async def test_get_or_create_across_hosts_creates_once(store_dsn: str) -> None:
    """get_or_create of one id raced from two hosts: one CREATED, one EXISTING, one ref."""
    room = fresh("room")
    async with two_hosts(store_dsn) as (first, second):
        results: list[zl.SpotCreateResult] = []

        async def create(host: zl.Host) -> None:
            results.append(await host.spots.get_or_create(room, "global.Room").submit())

        async with trio.open_nursery() as nursery:
            nursery.start_soon(create, first)
            nursery.start_soon(create, second)
        assert ["created", "existing"] == sorted(r.status.value for r in results)
        assert 1 == len({r.spot_ref for r in results})


@pytest.mark.spec("ROUTE-3")
async def test_remote_failures_keep_their_kind(store_dsn: str) -> None:
    """A remote handler that raises gives INTERNAL_FAILURE without its detail; an id nobody owns
    gives NOT_FOUND; a message the remote Spot has no handler for gives NOT_FOUND."""
    room = fresh("room")
    async with two_hosts(store_dsn) as (first, second):
        await second.spots.get_or_create(room, "global.Room").submit()
        cases = [
            (first.route.request_to_spot(room, Ask("boom"), reply_type=Answer), "INTERNAL_FAILURE"),
            (first.route.request_to_spot(fresh("no"), Ask("x"), reply_type=Answer), "NOT_FOUND"),
            (first.route.request_to_spot(room, Unhandled(), reply_type=Answer), "NOT_FOUND"),
        ]
        with trio.fail_after(15):
            for call, kind in cases:
                with pytest.raises(zl.ZLinkError) as caught:
                    await call.submit()
                assert kind == caught.value.kind.name
                assert "secret" not in str(caught.value)


@pytest.mark.spec("ROUTE-4")
async def test_a_dead_owners_spot_is_unavailable_and_taken_over(store_dsn: str) -> None:
    """A record whose owner has no live node record: a call ends UNAVAILABLE, and get_or_create
    takes the id over with a higher generation."""
    room = fresh("room")
    config = zl.HostConfig(mesh=f"g-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with open_stores(StoreConfig(dsn=store_dsn)) as stores:
        prefix = f"m/{config.mesh}/"
        dead = {
            "owner": "node-dead",
            "owner_generation": 7,
            "generation": 4,
            "kind": int(zl.SpotKind.USER),
            "type": "global.Room",
            "state": "ready",
        }
        written = await stores.location.write(
            Batch(
                [IfMissing(prefix + f"spot/{room}")],
                [
                    Put(prefix + f"spot/{room}", cbor2.dumps(dead)),
                    Put(prefix + f"generation/{room}", cbor2.dumps(4)),
                ],
            )
        )
        assert written is not None
    async with zl.open_host(app, config) as host:
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_spot(room, Ask("x"), reply_type=Answer).submit()
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        result = await host.spots.get_or_create(room, "global.Room").submit()
        assert zl.SpotCreateStatus.CREATED == result.status
        assert 5 == result.spot_ref.object_generation.value
        reply = await host.route.request_to_spot(room, Ask("back"), reply_type=Answer).submit()
        assert host.node_rid.value == reply.node_rid


@pytest.mark.spec("ROUTE-5")
async def test_a_stopped_owner_ends_calls_instead_of_hanging(store_dsn: str) -> None:
    """After the owner host shut down, a call from the other host to its former Spot ends with
    NOT_FOUND or UNAVAILABLE well within its timeout."""
    room = fresh("room")
    async with two_hosts(store_dsn) as (first, second):
        await second.spots.get_or_create(room, "global.Room").submit()
        with trio.fail_after(15):
            await first.route.request_to_spot(room, Ask("warm"), reply_type=Answer).submit()
        await second.shutdown()
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:
            await (
                first.route.request_to_spot(room, Ask("x"), reply_type=Answer).timeout(10).submit()
            )
        assert caught.value.kind in (zl.ErrorKind.NOT_FOUND, zl.ErrorKind.UNAVAILABLE)


@pytest.mark.spec("ROUTE-8")
async def test_a_cold_activation_raced_from_two_hosts_answers_every_caller(store_dsn: str) -> None:
    """Both hosts activate one Instance Spot id cold at the same instant: one wins the claim,
    and every request from either host is answered by that one incarnation."""
    async with two_hosts(store_dsn) as (first, second):
        for _ in range(5):
            counter = fresh("counter")
            answers: list[Answer] = []

            async def ask(
                host: zl.Host, text: str, counter: str = counter, answers: list[Answer] = answers
            ) -> None:
                call = host.route.request_to_spot(counter, Ask(text), reply_type=Answer)
                answers.append(await call.instance_spot("global.Counter").submit())

            with trio.fail_after(15):
                async with trio.open_nursery() as nursery:
                    for number in range(3):
                        nursery.start_soon(ask, first, f"a{number}")
                        nursery.start_soon(ask, second, f"b{number}")
            assert 6 == len(answers)
            assert 1 == len({answer.node_rid for answer in answers}), answers
