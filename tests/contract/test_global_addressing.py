"""Global addressing between hosts of one mesh in one process: Spots and Actors reached by id on
whichever host owns them (specs/routing.md; specs/mesh.md MESH-19; the
multi-process proofs are in tests/e2e/)."""

from __future__ import annotations

import socket
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import timedelta
from typing import Any, ClassVar

import attrs
import cbor2
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Batch, IfMissing, Put, StoreConfig, open_stores
from zlink_trio._integration.transport.liveness import Route, Verdict
from zlink_trio._runtime.ownership.authority import Claim, Held, SpotAuthority
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.routing.remote import Owner

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


@app.message("global.Hold")
@attrs.frozen
class Hold:
    pass


class Holding:
    entered = trio.Event()
    release = trio.Event()
    deadlines: ClassVar[list[float | None]] = []


class Answering:
    async def _answer(self, req: Ask, ctx: zl.MessageContext, rid: str) -> Answer:
        if req.text == "boom":
            raise RuntimeError("secret detail")
        Holding.deadlines.append(ctx.deadline)
        if ctx.deadline is not None:
            assert ctx.deadline > trio.current_time()
        return Answer(rid, req.text, ctx.deadline is not None)


@app.user_spot("global.Room")
class Room(Answering, NoMembers):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        return await self._answer(req, ctx, self.context.ref.node_rid.value)

    @zl.request_handler(Hold, reply=Answer)
    async def hold(self, req: Hold, ctx: zl.MessageContext) -> Answer:
        Holding.entered.set()
        await Holding.release.wait()
        return Answer(self.context.ref.node_rid.value, "held", ctx.deadline is not None)

    @zl.packet_handler(Note)
    async def note(self, msg: Note, ctx: zl.MessageContext) -> None:
        if msg.text == "boom":
            raise RuntimeError("a handler failing after the send completed")
        seen.append((self.context.ref.node_rid.value, f"{msg.text}:{ctx.deadline}"))
        Noted.event.set()


@app.instance_spot("global.Counter")
class Counter(Answering, zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask, ctx: zl.MessageContext) -> Answer:
        return await self._answer(req, ctx, self.context.ref.node_rid.value)


ledger: list[tuple[str, str]] = []
"""What ``global.Ledger`` Spots handled, in order: (node RID, text)."""


@app.instance_spot("global.Ledger")
class Ledger(zl.InstanceSpot):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        ledger.append((self.context.ref.node_rid.value, msg.text))

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        ledger.append((self.context.ref.node_rid.value, req.text))
        return Answer(self.context.ref.node_rid.value, req.text, False)


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
        Holding.deadlines = []
        timeout = 2.0  # not the default 5 s: a handler that saw a fresh budget would show it
        calls: list[zl.SpotRequestCall[Answer] | zl.ActorRequestCall[Answer]] = [
            first.route.request_to_spot(room, Ask("hi"), reply_type=Answer).timeout(timeout),
            first.route.request_to_spot(counter, Ask("c"), reply_type=Answer)
            .instance_spot("global.Counter")
            .timeout(timeout),
            first.route.request_to_actor(user, Ask("u"), reply_type=Answer).timeout(timeout),
        ]
        answers = []
        with trio.fail_after(15):
            for call in calls:
                asked_at = trio.current_time()
                answers.append(await call.submit())
                answered_at = trio.current_time()
                # Both hosts share this process's Trio clock: the owner's handler saw the
                # caller's deadline; the budget travels as time left, so it can be late by no
                # more than the part of the trip it cannot see.
                seen_deadline = Holding.deadlines[-1]
                assert seen_deadline is not None
                assert asked_at < seen_deadline <= answered_at + timeout
            await first.route.send_to_spot(room, Note("one-way")).submit()
            await Noted.event.wait()
        assert [Answer(owner, t, True) for t in ("hi", "c", "u")] == answers
        assert (owner, "one-way:None") in seen


@pytest.mark.spec("SPOT-21")
async def test_in_mesh_names_where_a_call_goes_and_never_where_a_spot_lives(
    store_dsn: str,
) -> None:
    """A call with ``in_mesh`` of the caller's own mesh reaches the Spot that lives on the other
    host, with or without ``instance_spot()``, and it stays there; another mesh's name finds
    nothing, not even a Spot that exists."""
    room, counter = fresh("room"), fresh("counter")
    async with two_hosts(store_dsn) as (first, second):
        owner, mesh = second.node_rid.value, first.mesh.value
        await second.spots.get_or_create(room, "global.Room").submit()
        await (
            second.route.request_to_spot(counter, Ask("made"), reply_type=Answer)
            .instance_spot("global.Counter")
            .submit()
        )
        with trio.fail_after(15):
            plain = first.route.request_to_spot(room, Ask("r"), reply_type=Answer).in_mesh(mesh)
            typed = (
                first.route.request_to_spot(counter, Ask("c"), reply_type=Answer)
                .in_mesh(mesh)
                .instance_spot("global.Counter")
            )
            assert (owner, "r") == ((answer := await plain.submit()).node_rid, answer.text)
            assert (owner, "c") == ((answer := await typed.submit()).node_rid, answer.text)
            again = first.route.request_to_spot(counter, Ask("again"), reply_type=Answer)
            assert owner == (await again.instance_spot("global.Counter").submit()).node_rid
        for call in (
            first.route.request_to_spot(room, Ask("x"), reply_type=Answer).in_mesh("elsewhere"),
            first.route.request_to_spot(counter, Ask("x"), reply_type=Answer)
            .in_mesh("elsewhere")
            .instance_spot("global.Counter"),
        ):
            with pytest.raises(zl.ZLinkError) as caught:
                await call.submit()
            assert zl.ErrorKind.NOT_FOUND == caught.value.kind


@pytest.mark.spec("CMP-9.5", "ROUTE-6")
async def test_the_owner_sees_only_the_time_left_after_the_callers_own_stages(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Resolving the owner is made to take 0.5 s (an injected store delay): the deadline the
    owner's handler sees is the caller's one deadline (asked + 5 s, plus the flight), not a fresh
    5 s budget counted after the resolve."""
    room = fresh("room")
    delay = 0.5
    async with two_hosts(store_dsn) as (first, second):
        await second.spots.get_or_create(room, "global.Room").submit()
        real_read = SpotAuthority.read
        caller = first._node.authority

        async def slow_read(self: SpotAuthority, target: Any) -> Any:
            if self is caller and target == zl.SpotId(room):
                await trio.sleep(delay)  # the injected fault: a slow store on the caller's side
            return await real_read(self, target)

        monkeypatch.setattr(SpotAuthority, "read", slow_read)
        Holding.deadlines = []
        asked_at = trio.current_time()
        with trio.fail_after(15):
            await (
                first.route.request_to_spot(room, Ask("late"), reply_type=Answer)
                .timeout(5)
                .submit()
            )
        assert trio.current_time() - asked_at >= delay  # the resolve did take its time
        seen_deadline = Holding.deadlines[-1]
        assert seen_deadline is not None
        # The flight between two hosts of one process is far below the injected delay.
        assert asked_at + 5.0 <= seen_deadline < asked_at + 5.0 + delay / 2


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
    """A remote handler that raises gives INTERNAL_FAILURE naming the handler, the exception's
    class and text (never the object); an id nobody owns gives NOT_FOUND; a message the remote
    Spot has no handler for gives NOT_FOUND."""
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
                if kind == "INTERNAL_FAILURE":
                    assert "request handler ask of Spot" in caught.value.message
                    assert "RuntimeError: secret detail" in caught.value.message


@pytest.mark.spec("ROUTE-4", "ERR-5.4", "ERR-4.3", "CMP-5.12")
async def test_a_dead_owners_spot_is_unavailable_and_taken_over(store_dsn: str) -> None:
    """A record whose owner has no live node record: a call ends UNAVAILABLE, and get_or_create
    takes the id over with a higher generation."""
    room, user = fresh("room"), fresh("user")
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
        dead_actor = {**dead, "kind": int(zl.SpotKind.INVALID), "type": "global.User"}
        await stores.location.write(
            Batch(
                [IfMissing(f"actor/{user}")],
                [
                    Put(f"actor/{user}", cbor2.dumps({**dead_actor, "mesh": config.mesh})),
                    Put(f"actor-generation/{user}", cbor2.dumps(4)),
                ],
            )
        )
    async with zl.open_host(app, config) as host:
        assert await host.actors.find(user) is None
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_actor(user, Ask("x"), reply_type=Answer).submit()
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        taken = await host.actors.create(user, "global.User").submit()
        assert zl.ActorCreateStatus.CREATED == taken.status
        assert taken.actor_ref is not None
        assert 5 == taken.actor_ref.object_generation.value
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:
            await host.route.request_to_spot(room, Ask("x"), reply_type=Answer).submit()
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot(room, Note("to the dead")).submit()
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


class PinnedCache(dict[Any, Any]):
    """A routing cache that never forgets one id: the caller keeps naming an owner that left."""

    def __init__(self, entries: dict[Any, Any], pinned: object) -> None:
        super().__init__(entries)
        self.pinned = pinned

    def pop(self, key: Any, *default: Any) -> Any:
        if key == self.pinned:
            return self.get(key, *default)
        return super().pop(key, *default)

    def __delitem__(self, key: Any) -> None:
        if key != self.pinned:
            super().__delitem__(key)

    def clear(self) -> None:
        pinned = self.get(self.pinned)
        super().clear()
        if pinned is not None:
            self[self.pinned] = pinned


@pytest.mark.spec("ROUTE-5")
async def test_a_call_that_still_names_a_stopped_owner_ends_unavailable_at_once(
    store_dsn: str,
) -> None:
    """The caller's routing cache still names the owner after that host shut down (pinned here,
    so the store's hints cannot clear it first): the call ends UNAVAILABLE at once, not when
    its timeout runs out."""
    room = fresh("room")
    async with two_hosts(store_dsn) as (first, second):
        remote = first._messaging.remote
        assert remote is not None
        remote._cache = PinnedCache(remote._cache, zl.SpotId(room))
        await second.spots.get_or_create(room, "global.Room").submit()
        with trio.fail_after(15):
            await first.route.request_to_spot(room, Ask("warm"), reply_type=Answer).submit()
        owner = second.node_rid
        await second.shutdown()
        with trio.fail_after(15):
            while owner not in remote._gone:  # the caller has seen the owner's record go
                await trio.testing.wait_all_tasks_blocked(0.01)
        assert owner == remote._cache[zl.SpotId(room)].node_rid
        started = trio.current_time()
        request = first.route.request_to_spot(room, Ask("x"), reply_type=Answer).timeout(10)
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:
            await request.submit()
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        assert trio.current_time() - started < 5


@pytest.mark.spec("ROUTE-10")
async def test_a_caller_whose_owner_shuts_down_sees_unavailable(store_dsn: str) -> None:
    """A request held at the owner when the owner host shuts down ends UNAVAILABLE for the
    caller, whose own host runs on, not SHUTTING_DOWN."""
    Holding.entered, Holding.release = trio.Event(), trio.Event()
    room = fresh("room")
    outcome: list[zl.ErrorKind] = []
    ended = trio.Event()
    async with two_hosts(store_dsn) as (first, second):
        await second.spots.get_or_create(room, "global.Room").submit()

        async def call() -> None:
            try:
                request = first.route.request_to_spot(room, Hold(), reply_type=Answer)
                await request.timeout(60).submit()
            except zl.ZLinkError as error:
                outcome.append(error.kind)
            finally:
                ended.set()

        async with trio.open_nursery() as nursery:
            try:
                nursery.start_soon(call)
                with trio.fail_after(15):
                    await Holding.entered.wait()
                nursery.start_soon(second.shutdown)
                with trio.fail_after(15):  # a hang guard: shutdown settles the call at once
                    await ended.wait()
            finally:
                Holding.release.set()
    assert [zl.ErrorKind.UNAVAILABLE] == outcome


def _unused_tcp_endpoint() -> str:
    """A tcp endpoint on 127.0.0.1 where nothing listens (the port was free a moment ago)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"tcp://127.0.0.1:{port}"


@pytest.mark.spec("ROUTE-11")
async def test_a_request_that_times_out_waiting_for_a_route_is_deadline_exceeded(
    store_dsn: str,
) -> None:
    """The owner's node record is live but its endpoints answer nothing, so the route never
    comes up: a request with a short timeout ends DEADLINE_EXCEEDED, not UNAVAILABLE."""
    room = fresh("room")
    config = zl.HostConfig(mesh=f"g-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    owner = NodeRecord(
        zl.NodeRid(f"node-{uuid.uuid4().hex}"),
        zl.NodeGeneration.new(),
        application_endpoint=_unused_tcp_endpoint(),
        completion_endpoint=_unused_tcp_endpoint(),
    )
    prefix = f"m/{config.mesh}/"
    record = {
        "owner": owner.rid.value,
        "owner_generation": owner.generation.value,
        "generation": 1,
        "kind": int(zl.SpotKind.USER),
        "type": "global.Room",
        "state": "ready",
    }
    async with open_stores(StoreConfig(dsn=store_dsn)) as stores:
        written = await stores.location.write(
            Batch(
                [IfMissing(prefix + f"node/{owner.rid.value}"), IfMissing(prefix + f"spot/{room}")],
                [
                    Put(
                        prefix + f"node/{owner.rid.value}",
                        owner.encode(),
                        retention=timedelta(seconds=120),
                    ),
                    Put(prefix + f"spot/{room}", cbor2.dumps(record)),
                ],
            )
        )
        assert written is not None
    async with zl.open_host(app, config) as host:
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as caught:  # a hang guard
            await host.route.request_to_spot(room, Ask("x"), reply_type=Answer).timeout(1).submit()
        assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind


@pytest.mark.spec("ROUTE-8", "SPOT-27")
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


@pytest.mark.spec("ROUTE-12")
async def test_a_call_to_an_owner_whose_route_is_lost_is_unavailable_at_once(
    store_dsn: str,
) -> None:
    """The owner's transport falls silent while its node record stays live: a request waiting
    for it ends UNAVAILABLE once the caller's transport judges the route lost, and a request
    with a long timeout then ends UNAVAILABLE at once instead of waiting out its timeout for
    the route."""
    room = fresh("room")
    async with two_hosts(store_dsn) as (first, second):
        await second.spots.get_or_create(room, "global.Room").submit()
        await first.route.request_to_spot(room, Ask("warm"), reply_type=Answer).submit()
        owner_mesh = second._tree.remote.mesh  # the owner's transport (internal)
        assert owner_mesh is not None
        owner_mesh.close()  # silent from now on; its membership still renews its node record
        caller_mesh = first._messaging.remote.mesh  # the caller's transport (internal)
        assert caller_mesh is not None
        waiting = first.route.request_to_spot(room, Ask("unheard"), reply_type=Answer)
        # Only a peer with work outstanding is judged (TRN-17): this request is that work.
        with trio.fail_after(15), pytest.raises(zl.ZLinkError) as lost:  # the window is 3 s
            await waiting.timeout(30).submit()
        assert zl.ErrorKind.UNAVAILABLE == lost.value.kind
        assert caller_mesh.is_up(second.node_rid) is None
        with trio.fail_after(5), pytest.raises(zl.ZLinkError) as caught:  # not its 30 s timeout
            await (
                first.route.request_to_spot(room, Ask("x"), reply_type=Answer).timeout(30).submit()
            )
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        assert second.node_rid in first.peers  # the owner's node record is still live


@pytest.mark.spec("ROUTE-12")
async def test_a_lost_route_that_comes_back_serves_calls_again(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The caller stops hearing the owner (its liveness ticks are made deaf to it) while a
    request waits for it, until the route is lost; once it hears the owner again (the caller
    sends Heartbeats to a lost route, TRN-17) the route is up and calls reach it again."""
    room = fresh("room")
    deaf: set[zl.NodeRid] = set()
    real_tick = Route.tick
    Holding.entered, Holding.release = trio.Event(), trio.Event()

    def tick(self: Route, now: float, window: float, watched: bool) -> Verdict:
        if self.node_rid in deaf:
            self.heard = False  # the injected silence: what arrived from it is not counted
        return real_tick(self, now, window, watched)

    monkeypatch.setattr(Route, "tick", tick)
    async with two_hosts(store_dsn) as (first, second):
        await second.spots.get_or_create(room, "global.Room").submit()
        await first.route.request_to_spot(room, Ask("warm"), reply_type=Answer).submit()
        caller = first._messaging.remote  # the caller's routing and transport (internal)
        assert caller is not None
        caller_mesh = caller.mesh
        assert caller_mesh is not None
        try:
            deaf.add(second.node_rid)
            held = first.route.request_to_spot(room, Hold(), reply_type=Answer).timeout(30)
            # Only a peer with work outstanding is judged (TRN-17): the held request is that work.
            with trio.fail_after(15), pytest.raises(zl.ZLinkError) as lost:  # the window is 3 s
                await held.submit()
            assert zl.ErrorKind.UNAVAILABLE == lost.value.kind
            assert caller_mesh.is_up(second.node_rid) is None
            with pytest.raises(zl.ZLinkError) as caught:
                await first.route.request_to_spot(room, Ask("lost"), reply_type=Answer).submit()
            assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
            deaf.clear()
            with trio.fail_after(15):
                while caller_mesh.is_up(second.node_rid) is None:  # noqa: ASYNC110  # a clock
                    await trio.sleep(0.05)
                await trio.testing.wait_all_tasks_blocked()  # the caller has seen the RouteUp
                # The route came back without the held request's late reply (which the caller
                # would hear too); the Room's turn is free for the next call once it is released.
                Holding.release.set()
                reply = await first.route.request_to_spot(
                    room, Ask("back"), reply_type=Answer
                ).submit()
            assert second.node_rid.value == reply.node_rid
        finally:
            Holding.release.set()  # the owner's host can shut down, whatever happened


@pytest.mark.spec("ROUTE-8", "TRN-26", "GLOBAL-12")
async def test_a_lost_cold_race_hands_sends_and_requests_to_the_winner_in_admission_order(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first host's cold activation is held inside its claim (an injected pause) while the
    second host activates the id and wins; the first host had admitted a send, a request and a
    send, in that order: the winner handles them in that order, the request is answered, and
    the loser's job permits are all free again."""
    spot = fresh("ledger")
    paused, go = trio.Event(), trio.Event()
    real_claim = SpotAuthority.claim
    async with two_hosts(store_dsn) as (first, second):
        loser = first._node.authority

        async def held_claim(
            self: SpotAuthority, spot_id: Any, kind: zl.SpotKind, type_name: zl.StableTypeName
        ) -> Claim | Held:
            if self is loser and spot_id == zl.SpotId(spot) and not go.is_set():
                paused.set()
                await go.wait()
            return await real_claim(self, spot_id, kind, type_name)

        monkeypatch.setattr(SpotAuthority, "claim", held_claim)
        answers: list[Answer] = []

        async def request_two() -> None:
            call = first.route.request_to_spot(spot, Ask("2"), reply_type=Answer)
            answers.append(await call.instance_spot("global.Ledger").timeout(15).submit())

        with trio.fail_after(15):  # a hang guard
            await first.route.send_to_spot(spot, Note("1")).instance_spot("global.Ledger").submit()
            await paused.wait()  # the first host's activation is inside its claim
            won = second.route.request_to_spot(spot, Ask("won"), reply_type=Answer)
            assert (
                second.node_rid.value
                == (await won.instance_spot("global.Ledger").submit()).node_rid
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(request_two)
                await trio.testing.wait_all_tasks_blocked()  # "2" is admitted, its caller waits
                await (
                    first.route.send_to_spot(spot, Note("3"))
                    .instance_spot("global.Ledger")
                    .submit()
                )
                go.set()  # the claim finds the winner's record: the loser forwards what it holds
            while len(ledger_of(second, ("1", "2", "3"))) < 3:
                await trio.testing.wait_all_tasks_blocked()
        assert [second.node_rid.value] == [answer.node_rid for answer in answers]
        assert ["won", "1", "2", "3"] == ledger_of(second, ("won", "1", "2", "3"))
        # What the loser handed over gave its job permits back there.
        assert first._node.config.app_job_queue_size == first._node.jobs.available


def ledger_of(host: zl.Host, texts: tuple[str, ...]) -> list[str]:
    """The texts among ``texts`` that Ledger Spots on ``host`` handled, in order."""
    return [text for rid, text in ledger if rid == host.node_rid.value and text in texts]


@pytest.mark.spec("CMP-4.3", "CMP-4.7", "ERR-9.2", "ERR-4.7", "ERR-5.11", "ERR-9.5")
async def test_a_remote_send_completes_at_local_admission(store_dsn: str) -> None:
    """A send to a remote Spot whose gate is held completes at once (the local transport took
    it), and one whose handler will raise there completes too (the failure is the owner's,
    logged there). A request that finds the owner's queue full ends UNAVAILABLE, not
    CAPACITY_EXCEEDED: that queue belongs to another runtime."""
    Holding.entered = trio.Event()
    Holding.release = trio.Event()
    room = fresh("room")
    mesh = f"g-{uuid.uuid4().hex[:8]}"
    caller_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn)
    owner_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, mailbox_limit=1)
    async with zl.open_host(app, caller_config) as first, zl.open_host(app, owner_config) as second:
        await second.spots.get_or_create(room, "global.Room").submit()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: first.route.request_to_spot(room, Hold(), reply_type=Answer).submit()
            )
            with trio.fail_after(15):
                await Holding.entered.wait()
                await first.route.send_to_spot(room, Note("queued")).submit()
                await first.route.send_to_spot(room, Note("boom")).submit()
                # The owner's queue (limit 1) holds the Note now: a request finds it full.
                with pytest.raises(zl.ZLinkError) as caught:
                    await first.route.request_to_spot(room, Ask("full"), reply_type=Answer).submit()
            assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
            Holding.release.set()


@pytest.mark.spec("SPOT-92", "SPOT-32", "SPOT-33", "SPOT-34")
async def test_close_of_a_spot_owned_by_another_host_closes_it_there(store_dsn: str) -> None:
    """``close(ref)`` from a host that does not own the Spot closes it on its owner: True, then
    the id is gone there; False for an incarnation that no longer exists; INVALID_OPERATION for
    a ref of another generation, as on the owner itself."""
    room = fresh("room")
    async with two_hosts(store_dsn) as (first, second):
        created = await second.spots.get_or_create(room, "global.Room").submit()
        ref = created.spot_ref
        assert second.node_rid == ref.node_rid
        stale = attrs.evolve(
            ref, object_generation=zl.ObjectGeneration(ref.object_generation.value + 1)
        )
        with pytest.raises(zl.ZLinkError) as wrong:
            await first.spots.close(stale)
        assert zl.ErrorKind.INVALID_OPERATION == wrong.value.kind
        assert await first.spots.close(ref) is True
        with pytest.raises(zl.ZLinkError) as gone:
            await second.route.request_to_spot(room, Ask("x"), reply_type=Answer).submit()
        assert zl.ErrorKind.NOT_FOUND == gone.value.kind
        assert await first.spots.close(ref) is False


@pytest.mark.spec("SPOT-92")
def test_the_framework_message_names_are_reserved() -> None:
    """An application that declares a message under a name the framework uses for its own
    messages between hosts is refused at start."""
    mine = zl.Application()

    @mine.message("zlink.CloseSpot")
    @attrs.frozen
    class Mine:
        generation: int

    with pytest.raises(zl.ConfigurationError, match=r"zlink\.CloseSpot"):
        mine.freeze()


@pytest.mark.spec("ROUTE-7", "DEC-23")
async def test_a_host_that_no_longer_holds_a_target_answers_not_found_and_forwards_nothing(
    store_dsn: str,
) -> None:
    """Host one still routes a Spot to host two after it moved to host three (its resolution is
    held on the old owner to force that instant, since a store change hint could otherwise end
    it first): a send is dropped at host two, not forwarded; a request ends NOT_FOUND without
    being re-sent, and the caller forgets the owner, so the next request reaches host three."""
    seen.clear()
    room = fresh("room")
    config = zl.HostConfig(mesh=f"g-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with (
        zl.open_host(app, config) as one,
        zl.open_host(app, config) as two,
        zl.open_host(app, config) as three,
    ):
        with trio.fail_after(20):
            first = await two.spots.get_or_create(room, "global.Room").submit()
            ask = one.route.request_to_spot(room, Ask("a"), reply_type=Answer)
            assert two.node_rid.value == (await ask.submit()).node_rid
            assert await two.spots.close(first.spot_ref) is True
            moved = await three.spots.get_or_create(room, "global.Room").submit()
            assert three.node_rid == moved.spot_ref.node_rid
            remote = one._messaging.remote
            assert remote is not None
            real_owner_of, real_forget = remote.owner_of, remote.forget
            forgotten: list[object] = []
            asking = [False]  # only the request's own forget counts: the store's change
            # hints for the room (its close on two, its creation on three) may still arrive

            async def stale_owner_of(target: object, deadline: float) -> object:
                return Owner(two.node_rid)  # the instant the hosts disagree

            def forget(target: zl.SpotId, *, flush: bool = False) -> None:
                if asking[0]:
                    forgotten.append(target)
                real_forget(target, flush=flush)

            remote.owner_of = stale_owner_of  # type: ignore[assignment,method-assign]
            remote.forget = forget  # type: ignore[method-assign]
            await one.route.send_to_spot(room, Note("lost")).submit()
            asking[0] = True
            with pytest.raises(zl.ZLinkError) as stale:
                await one.route.request_to_spot(room, Ask("b"), reply_type=Answer).submit()
            asking[0] = False
            assert zl.ErrorKind.NOT_FOUND == stale.value.kind
            assert [zl.SpotId(room)] == forgotten
            remote.owner_of = real_owner_of  # type: ignore[method-assign]
            again = one.route.request_to_spot(room, Ask("c"), reply_type=Answer)
            assert three.node_rid.value == (await again.submit()).node_rid
        assert [] == [entry for entry in seen if entry[1].startswith("lost")]


@pytest.mark.spec("GLOBAL-13")
async def test_the_janitors_sweep_reclaims_what_dead_runs_left_and_nothing_live(
    store_dsn: str,
) -> None:
    """The sweep (what the janitor runs every SWEEP_LEASES leases) deletes a record whose owner
    run has no node record, though no PeerDown was ever seen for it, and keeps the records of
    the live hosts."""
    ghost_room, live_room = fresh("ghost"), fresh("live")
    async with two_hosts(store_dsn) as (first, second):
        await second.spots.get_or_create(live_room, "global.Room").submit()
        ghost = SpotAuthority(
            first._node.authority._store,
            first.mesh,
            zl.NodeRid(fresh("ghost-node")),
            zl.NodeGeneration.new(),
        )
        claimed = await ghost.claim(
            zl.SpotId(ghost_room), zl.SpotKind.USER, zl.StableTypeName("global.Room")
        )
        assert isinstance(claimed, Claim)
        janitor = min((first, second), key=lambda host: host.node_rid.value)
        remote = janitor._tree.remote
        assert remote is not None
        await remote.janitor.reclaim(None)
        authority = janitor._node.authority
        assert await authority.read(zl.SpotId(ghost_room)) is None
        assert await authority.read(zl.SpotId(live_room)) is not None
        entries = [f"entry.{host.node_generation.value:016x}" for host in (first, second)]
        for entry in entries:
            assert await authority.read(zl.SpotId(entry)) is not None


@pytest.mark.spec("CMP-11.6", "CMP-17.16", "CMP-5.6")
async def test_a_request_past_the_per_peer_in_flight_limit_ends_unavailable_at_once(
    store_dsn: str,
) -> None:
    """The caller's host allows one request in flight per peer: while one waits for its reply
    from the other host, a second to that host ends UNAVAILABLE at once, not at its timeout; once
    the first is answered, the next is taken."""
    Holding.entered, Holding.release = trio.Event(), trio.Event()
    room = fresh("room")
    mesh = f"g-{uuid.uuid4().hex[:8]}"
    limited = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, max_in_flight_per_peer=1)
    async with (
        zl.open_host(app, zl.HostConfig(mesh=mesh, store_dsn=store_dsn)) as second,
        zl.open_host(app, limited) as first,
    ):
        await second.spots.get_or_create(room, "global.Room").submit()
        with trio.fail_after(15):
            answers: list[Answer] = []
            async with trio.open_nursery() as nursery:

                async def held() -> None:
                    call = first.route.request_to_spot(room, Hold(), reply_type=Answer)
                    answers.append(await call.submit())

                nursery.start_soon(held)
                await Holding.entered.wait()
                started = trio.current_time()
                with pytest.raises(zl.ZLinkError) as caught:
                    await first.route.request_to_spot(room, Ask("x"), reply_type=Answer).submit()
                assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
                assert trio.current_time() - started < 2  # its timeout is 5 s
                Holding.release.set()
            assert [Answer(second.node_rid.value, "held", True)] == answers
            after = await first.route.request_to_spot(room, Ask("y"), reply_type=Answer).submit()
            assert (second.node_rid.value, "y") == (after.node_rid, after.text)


@pytest.mark.spec("CMP-11.6")
def test_max_in_flight_per_peer_defaults_to_65536_and_is_checked_with_the_host_config() -> None:
    """HostConfig.max_in_flight_per_peer is 65,536 unless set; outside 1..2**31-1, or not an
    int, it fails the config with a message that names it."""
    assert 65_536 == zl.HostConfig(mesh="m").max_in_flight_per_peer
    for bad in (0, -1, 2**31, 1.5, True, "8"):
        with pytest.raises(zl.ConfigurationError, match="max_in_flight_per_peer"):
            zl.HostConfig(mesh="m", max_in_flight_per_peer=bad)  # type: ignore[arg-type]  # bad on purpose
