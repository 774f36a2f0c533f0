"""Actors on one host: creation through the Entry Spot, messages, deferred joins, execution
modes, destroy and shutdown (specs/actors.md; specs/spots.md SPOT-1, SPOT-2, SPOT-37, SPOT-42,
SPOT-51..SPOT-55, SPOT-59, SPOT-67, SPOT-69, SPOT-71..SPOT-73)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import attrs
import cbor2
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._integration.store import Found, StoreConfig, open_stores

app = zl.Application()
log: list[tuple[str, str]] = []
"""(who, what) in the order things happened; cleared by each test that reads it."""


class Signals:
    """Events the Spots and Actors below wait on or set; replaced for every test."""

    def __init__(self) -> None:
        self.release = trio.Event()
        self.entered = trio.Event()
        self.other_entered = trio.Event()
        self.completions: list[zl.ActorJoinCompletion] = []
        self.completed = trio.Event()
        self.in_turn = 0
        self.overlap = False


signals = Signals()


@app.message("act.Hello")
@attrs.frozen
class Hello:
    text: str


@app.message("act.Join")
@attrs.frozen
class Join:
    spot_id: str
    request: str | None = None
    times: int = 1
    timeout: float | None = None
    then_raise: bool = False


@app.message("act.JoinBoth")
@attrs.frozen
class JoinBoth:
    first: str
    second: str


@app.message("act.DeferTwice")
@attrs.frozen
class DeferTwice:
    spot_id: str


@app.message("act.Leave")
@attrs.frozen
class Leave:
    pass


@app.message("act.Where")
@attrs.frozen
class Where:
    pass


@app.message("act.Here")
@attrs.frozen
class Here:
    spot_id: str
    actor_id: str | None
    identity: int


@app.message("act.Say")
@attrs.frozen
class Say:
    text: str


@app.message("act.Said")
@attrs.frozen
class Said:
    texts: list[str]


@app.message("act.Block")
@attrs.frozen
class Block:
    mark: str


@app.message("act.Recall")
@attrs.frozen
class Recall:
    pass


@app.message("act.AskSelf")
@attrs.frozen
class AskSelf:
    pass


@app.message("act.YieldOn")
@attrs.frozen
class YieldOn:
    spot_id: str


@app.message("act.Welcome")
@attrs.frozen
class Welcome:
    note: str


@app.entry_spot
class Lobby(zl.EntrySpot):
    async def on_initialize(self) -> None:
        log.append(("entry", f"on_initialize:{self.context.kind.name}"))

    async def on_create_actor(
        self, actor: object, request: object | None
    ) -> zl.ActorCreateResponse:
        assert isinstance(actor, Player)
        log.append(("entry", f"on_create_actor:{actor.context.actor_id.value}"))
        if isinstance(request, Hello):
            if request.text == "no":
                return zl.ActorCreateResponse.reject(Welcome("refused"))
            if request.text == "boom":
                raise RuntimeError("detail that must not leak")
            if request.text == "slow":
                await trio.sleep_forever()
            if request.text == "odd":
                return "not a response"  # type: ignore[return-value]  # tests the runtime's check
            return zl.ActorCreateResponse.accept(Welcome(request.text))
        return zl.ActorCreateResponse.accept()

    async def on_joined_actor(self, actor: object) -> None:
        assert isinstance(actor, Player)
        log.append(("entry", f"on_joined_actor:{actor.context.actor_id.value}"))

    async def on_leave_actor(self, actor: object) -> None:
        assert isinstance(actor, Player)
        log.append(("entry", f"on_leave_actor:{actor.context.actor_id.value}"))

    async def on_disconnect_actor(self, actor: object) -> None:
        assert isinstance(actor, Player)
        log.append(("entry", f"on_disconnect_actor:{actor.context.actor_id.value}"))

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        log.append(("entry", f"on_closing:{closing.reason.name}:{len(self.context.members)}"))


@app.actor("act.Player")
class Player(zl.Actor):
    def __init__(self) -> None:
        self.said: list[str] = []
        log.append((self.context.actor_id.value, "init"))

    @zl.request_handler(Where)
    async def where(self, req: Where, ctx: zl.MessageContext) -> Here:
        return Here(
            ctx.spot_id.value, None if ctx.actor_id is None else ctx.actor_id.value, id(self)
        )

    @zl.packet_handler(Say)
    async def say(self, msg: Say) -> None:
        self.said.append(msg.text)

    @zl.request_handler(Recall)
    async def recall(self, req: Recall) -> Said:
        return Said(list(self.said))

    @zl.packet_handler(Join)
    async def join(self, msg: Join) -> None:
        for _ in range(msg.times):
            call = self.context.join_spot(
                msg.spot_id, None if msg.request is None else Hello(msg.request)
            )
            if msg.timeout is not None:
                call = call.timeout(msg.timeout)
            call.defer()
        if msg.then_raise:
            raise RuntimeError("the turn fails after deferring")

    @zl.packet_handler(JoinBoth)
    async def join_both(self, msg: JoinBoth) -> None:
        self.context.join_spot(msg.first).defer()
        self.context.join_spot(msg.second).defer()

    @zl.packet_handler(DeferTwice)
    async def defer_twice(self, msg: DeferTwice) -> None:
        call = self.context.join_spot(msg.spot_id)
        call.defer()
        try:
            call.defer()
        except zl.ZLinkError as error:
            log.append((self.context.actor_id.value, f"twice:{error.kind.name}"))

    @zl.packet_handler(Leave)
    async def leave(self, msg: Leave) -> None:
        self.context.join_entry_spot().defer()

    @zl.packet_handler(Block)
    async def block(self, msg: Block) -> None:
        log.append((self.context.actor_id.value, f"block:{msg.mark}:start"))
        if msg.mark == "wait":
            signals.entered.set()
            await signals.release.wait()
        elif msg.mark == "meet":
            # Two Actors meet: each waits for the other, so they must run at the same time.
            if signals.entered.is_set():
                signals.other_entered.set()
            else:
                signals.entered.set()
                await signals.other_entered.wait()
        log.append((self.context.actor_id.value, f"block:{msg.mark}:end"))

    @zl.packet_handler(YieldOn)
    async def yield_on(self, msg: YieldOn) -> None:
        log.append((self.context.actor_id.value, "yield:start"))
        signals.entered.set()
        try:
            await self.context.route.request_to_spot(
                msg.spot_id, Block("wait"), reply_type=Said
            ).yield_()
        except zl.ZLinkError as error:
            log.append((self.context.actor_id.value, f"yield:refused:{error.kind.name}"))
            return
        log.append((self.context.actor_id.value, "yield:end"))

    @zl.request_handler(AskSelf)
    async def ask_self(self, req: AskSelf) -> Said:
        try:
            await self.context.route.request_to_actor(
                self.context.actor_id, Where(), reply_type=Here
            ).submit()
        except zl.ZLinkError as error:
            return Said([error.kind.name])
        return Said(["no error"])

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        log.append((self.context.actor_id.value, f"completed:{completion.outcome.name}"))
        signals.completions.append(completion)
        signals.completed.set()
        if completion.spot_id.startswith("hold"):
            await signals.release.wait()


@app.user_spot("act.Room")
class Room(zl.Spot):
    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        log.append((self.context.spot_id.value, f"on_actor_join:{actor_id.value}"))
        if isinstance(request, Hello):
            if request.text == "no":
                return zl.SpotActorJoinResult.reject(Welcome("full"))
            if request.text == "boom":
                raise RuntimeError("boom")
            if request.text == "slow":
                await trio.sleep_forever()
        return zl.SpotActorJoinResult.accept(Welcome("in"))

    async def on_joined_actor(self, actor: object) -> None:
        assert isinstance(actor, Player)
        log.append((self.context.spot_id.value, f"on_joined_actor:{actor.context.actor_id.value}"))

    async def on_leave_actor(self, actor: object) -> None:
        assert isinstance(actor, Player)
        if self.context.spot_id.value.startswith("slowleave"):
            await signals.release.wait()
        log.append((self.context.spot_id.value, f"on_leave_actor:{actor.context.actor_id.value}"))

    async def on_disconnect_actor(self, actor: object) -> None:
        assert isinstance(actor, Player)
        log.append(
            (self.context.spot_id.value, f"on_disconnect_actor:{actor.context.actor_id.value}")
        )

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        members = sorted(m.value for m in self.context.members)
        log.append((self.context.spot_id.value, f"on_closing:{closing.reason.name}:{members}"))

    @zl.request_handler(Block)
    async def block(self, msg: Block) -> Said:
        log.append((self.context.spot_id.value, f"block:{msg.mark}"))
        await signals.release.wait()
        return Said([msg.mark])

    @zl.packet_handler(Say)
    async def say(self, msg: Say) -> None:
        log.append((self.context.spot_id.value, f"say:{msg.text}"))


@app.user_spot("act.Closed")
class ClosedRoom(NoMembers):
    """Keeps the default on_actor_join, which rejects."""


@app.user_spot("act.Lanes", mode=zl.SpotFactoryMode.PER_ACTOR)
class Lanes(Room):
    @zl.packet_handler(Say)
    async def say(self, msg: Say) -> None:
        if msg.text == "hold":
            signals.entered.set()
            await signals.release.wait()
        log.append((self.context.spot_id.value, f"say:{msg.text}"))

    @zl.timer_handler("beat")
    async def beat(self, tick: zl.TimerTick) -> None:
        log.append((self.context.spot_id.value, f"beat:{tick.number}"))
        signals.other_entered.set()

    @zl.request_handler(Where)
    async def start_beat(self, req: Where) -> Here:
        self.context.timers.start("beat", 0.01)
        return Here(self.context.spot_id.value, None, 0)


@app.instance_spot("act.Counter")
class Counter(zl.InstanceSpot):
    @zl.packet_handler(Say)
    async def say(self, msg: Say) -> None:
        pass


def config(store_dsn: str, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, **values)  # type: ignore[arg-type]  # test values


def fresh(prefix: str = "p") -> str:
    """Actor ids are global in the store, so every test uses ids of its own."""
    return f"{prefix}-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def reset() -> None:
    global signals
    signals = Signals()
    log.clear()


def of(who: str) -> list[str]:
    return [what for name, what in log if name == who]


@asynccontextmanager
async def host_with(store_dsn: str, **values: object) -> AsyncIterator[zl.Host]:
    async with zl.open_host(app, config(store_dsn, **values)) as host:
        yield host


async def completed(count: int = 1) -> list[zl.ActorJoinCompletion]:
    with trio.fail_after(10):
        while len(signals.completions) < count:
            signals.completed = trio.Event()
            await signals.completed.wait()
    return list(signals.completions)


async def where(host: zl.Host, actor_id: str) -> Here:
    return await host.route.request_to_actor(actor_id, Where(), reply_type=Here).submit()


# --- the Entry Spot ---------------------------------------------------------------------------


@pytest.mark.spec("ACT-4", "SPOT-1", "SPOT-2", "SPOT-42", "ACT-2")
async def test_every_host_runs_its_entry_spot_from_start_to_shutdown(store_dsn: str) -> None:
    """The Entry Spot is initialized before the host is handed out, has a framework-issued id,
    cannot be made through the Spot manager, and closes with HOST_SHUTDOWN."""
    async with host_with(store_dsn) as host:
        assert ["on_initialize:ENTRY"] == of("entry")
        generation = host.node_generation.value
        entry_id = f"entry.{generation:016x}"
        player = fresh()
        await host.actors.create(player, "act.Player").submit()
        assert entry_id == (await where(host, player)).spot_id
        with pytest.raises(zl.ZLinkError) as caught:
            await host.spots.create(f"{Lobby.__module__}.Lobby").submit()
        assert caught.value.kind in (zl.ErrorKind.NOT_FOUND, zl.ErrorKind.INVALID_OPERATION)
    assert "on_closing:HOST_SHUTDOWN:1" == of("entry")[-1]


@pytest.mark.spec("ACT-2")
def test_two_entry_spots_fail_validation() -> None:
    """An application has one Entry Spot; a second fails start-up validation."""
    second = zl.Application()

    @second.entry_spot
    class One(zl.EntrySpot):
        pass

    @second.entry_spot
    class Two(zl.EntrySpot):
        pass

    with pytest.raises(zl.ConfigurationError, match="one Entry Spot"):
        second.freeze()
    with pytest.raises(TypeError):
        zl.Application().entry_spot(Room)


@pytest.mark.spec("ACT-1", "ACT-3")
def test_actor_declarations_are_checked_at_start() -> None:
    """A non-Actor class is refused at once; a repeated name, a handler for an undeclared
    message and an Actor timer are listed together in one ConfigurationError."""
    bad = zl.Application()

    @bad.message("bad.Msg")
    @attrs.frozen
    class Msg:
        pass

    @attrs.frozen
    class Undeclared:
        pass

    with pytest.raises(TypeError, match=r"subclass of zl\.Actor"):
        bad.actor("bad.NotActor")(Room)

    @bad.actor("bad.Msg")
    class Clash(zl.Actor):
        pass

    @bad.actor("bad.Ticker")
    class Ticker(zl.Actor):
        @zl.timer_handler("t")
        async def tick(self, tick: zl.TimerTick) -> None:
            pass

        @zl.packet_handler(Undeclared)
        async def undeclared(self, msg: Undeclared) -> None:
            pass

    with pytest.raises(zl.ConfigurationError) as caught:
        bad.freeze()
    text = str(caught.value)
    assert "bad.Msg is declared twice" in text
    assert "Actor timers are not supported" in text
    assert "Undeclared, which is not declared" in text


# --- creating and finding ---------------------------------------------------------------------


@pytest.mark.spec("ACT-5", "ACT-6", "ACT-12", "SPOT-51")
async def test_create_asks_the_entry_spot_and_makes_a_ready_member(store_dsn: str) -> None:
    """create() runs the constructor and on_create_actor only (no join callbacks); the Actor is
    Ready in the Entry Spot, findable, with the reply in the result."""
    player = fresh()
    async with host_with(store_dsn) as host:
        result = await host.actors.create(player, "act.Player").request(Hello("hi")).submit()
        assert zl.ActorCreateStatus.CREATED == result.status
        assert Welcome("hi") == result.response
        ref = result.actor_ref
        assert ref is not None
        assert zl.ActorRef(player, 1, host.mesh, host.node_rid) == ref
        assert ref == await host.actors.find(player)
        assert await host.actors.find(fresh()) is None
        assert ["init"] == of(player)
        assert [f"on_create_actor:{player}"] == of("entry")[1:]
        here = await where(host, player)
        assert player == here.actor_id


@pytest.mark.spec("ACT-7", "SPOT-52", "CMP-5.8")
async def test_a_rejected_actor_never_becomes_ready(store_dsn: str) -> None:
    """A rejection returns REJECTED with the reply and no ref; nothing can find or reach it, and
    the id stays free for a later create."""
    player = fresh()
    async with host_with(store_dsn) as host:
        result = await host.actors.create(player, "act.Player").request(Hello("no")).submit()
        assert zl.ActorCreateResult(zl.ActorCreateStatus.REJECTED, None, Welcome("refused")) == (
            result
        )
        assert await host.actors.find(player) is None
        for call in (
            host.route.send_to_actor(player, Say("x")).submit(),
            host.route.request_to_actor(player, Where(), reply_type=Here).submit(),
        ):
            with pytest.raises(zl.ZLinkError) as caught:
                await call
            assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        again = await host.actors.create(player, "act.Player").submit()
        assert zl.ActorCreateStatus.CREATED == again.status


@pytest.mark.spec("ACT-8", "ACT-9")
async def test_existing_ids_and_concurrent_get_or_create(store_dsn: str) -> None:
    """get_or_create returns EXISTING without callbacks; create of a taken id is ALREADY_EXISTS;
    an unknown type is NOT_FOUND; twenty concurrent get_or_create calls create once."""
    player = fresh()
    async with host_with(store_dsn) as host:
        results: list[zl.ActorCreateResult] = []

        async def one() -> None:
            results.append(await host.actors.get_or_create(player, "act.Player").submit())

        async with trio.open_nursery() as nursery:
            for _ in range(20):
                nursery.start_soon(one)
        statuses = sorted(r.status.value for r in results)
        assert ["created"] + ["existing"] * 19 == statuses
        assert 1 == len({r.actor_ref for r in results})
        assert ["init"] == of(player)
        with pytest.raises(zl.ZLinkError) as caught:
            await host.actors.create(player, "act.Player").submit()
        assert zl.ErrorKind.ALREADY_EXISTS == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            await host.actors.get_or_create(fresh(), "act.Nobody").submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind


@pytest.mark.spec("ACT-10", "ACT-11")
async def test_failed_and_slow_creations_leave_the_id_free(store_dsn: str) -> None:
    """An exception or a bad return value is INTERNAL_FAILURE (not REJECTED, no detail leaked);
    a creation past its deadline is DEADLINE_EXCEEDED; afterwards the id can be created."""
    player = fresh()
    async with host_with(store_dsn) as host:
        for request, kind in (
            ("boom", zl.ErrorKind.INTERNAL_FAILURE),
            ("odd", zl.ErrorKind.INTERNAL_FAILURE),
        ):
            with pytest.raises(zl.ZLinkError) as caught:
                await host.actors.create(player, "act.Player").request(Hello(request)).submit()
            assert kind == caught.value.kind
            assert "detail" not in str(caught.value)
        with trio.fail_after(10), pytest.raises(zl.ZLinkError) as caught:
            await (
                host.actors.create(player, "act.Player")
                .request(Hello("slow"))
                .timeout(0.3)
                .submit()
            )
        assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
        assert await host.actors.find(player) is None
        result = await host.actors.create(player, "act.Player").submit()
        assert zl.ActorCreateStatus.CREATED == result.status


@pytest.mark.spec("ACT-13", "ACT-29")
async def test_actor_ids_are_global_and_the_record_holds_no_membership(store_dsn: str) -> None:
    """The Actor's record is outside every mesh prefix, so a host of another mesh sees the id as
    taken; the record names owner, generation and type but no Spot, and a join leaves it as is."""
    player = fresh()
    room = fresh("room")
    async with host_with(store_dsn) as first, host_with(store_dsn) as second:
        await first.actors.create(player, "act.Player").submit()
        other = await second.actors.get_or_create(player, "act.Player").submit()
        assert zl.ActorCreateStatus.EXISTING == other.status
        assert first.node_rid == other.actor_ref.node_rid  # type: ignore[union-attr]
        async with open_stores(StoreConfig(dsn=store_dsn)) as stores:
            before = await stores.location.read(f"actor/{player}")
            assert isinstance(before, Found)
            record = cbor2.loads(before.value)
            fields = {"owner", "owner_generation", "generation", "kind", "type", "state", "mesh"}
            assert fields == set(record)
            await first.spots.get_or_create(room, "act.Room").submit()
            await first.route.send_to_actor(player, Join(room)).submit()
            await completed()
            after = await stores.location.read(f"actor/{player}")
            assert isinstance(after, Found)
            assert before.version == after.version


# --- messages ---------------------------------------------------------------------------------


@pytest.mark.spec("ACT-14", "ACT-15", "SPOT-59", "SPOT-73")
async def test_actors_have_their_own_instance_queue_and_order(store_dsn: str) -> None:
    """Each Actor has its own instance; messages to it are handled in the order sent, by the
    Actor (not the Spot), with its id and Spot in the context; Actor calls take no mesh."""
    one, two = fresh(), fresh()
    async with host_with(store_dsn) as host:
        await host.actors.create(one, "act.Player").submit()
        await host.actors.create(two, "act.Player").submit()
        first, second = await where(host, one), await where(host, two)
        assert first.identity != second.identity
        for number in range(50):
            await host.route.send_to_actor(one, Say(str(number))).metadata("n", "1").submit()
        said = await host.route.request_to_actor(one, Where(), reply_type=Here).submit()
        assert one == said.actor_id
        recalled = await host.route.request_to_actor(one, Recall(), reply_type=Said).submit()
        assert [str(number) for number in range(50)] == recalled.texts  # in send order (SPOT-73)
        assert (
            [] == (await host.route.request_to_actor(two, Recall(), reply_type=Said).submit()).texts
        )
        assert not hasattr(host.route.send_to_actor(one, Say("x")), "in_mesh")
        assert not hasattr(host.route.send_to_actor(one, Say("x")), "instance_spot")
    # The Entry Spot logged nothing for these messages: Actor payload never reaches a Spot.
    assert all(not what.startswith("say") for what in of("entry"))


@pytest.mark.spec("ACT-17")
async def test_a_request_to_itself_from_its_own_turn_is_refused(store_dsn: str) -> None:
    """The Actor's own turn holds its FIFO claim: a request to itself fails at once."""
    player = fresh()
    async with host_with(store_dsn) as host:
        await host.actors.create(player, "act.Player").submit()
        with trio.fail_after(5):
            reply = await host.route.request_to_actor(player, AskSelf(), reply_type=Said).submit()
    assert ["INVALID_OPERATION"] == reply.texts


# --- joins ------------------------------------------------------------------------------------


@pytest.mark.spec("ACT-22", "ACT-23", "ACT-24", "ACT-16", "SPOT-53", "SPOT-54", "SPOT-55")
async def test_join_and_leave_run_the_callbacks_in_order(store_dsn: str) -> None:
    """A join asks on_actor_join, then runs on_joined_actor at the target, on_leave_actor at the
    source and on_join_completed at the Actor; leaving runs the mirror callbacks."""
    player, room = fresh(), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(room, "hi")).submit()
        accepted = (await completed())[0]
        assert zl.ActorJoinOutcome.ACCEPTED == accepted.outcome
        assert Welcome("in") == accepted.reply
        assert room == accepted.spot_id
        assert accepted.actor_ref == await host.actors.find(player)
        assert 0 < accepted.join_id < 2**128
        assert room == (await where(host, player)).spot_id
        assert [f"on_actor_join:{player}", f"on_joined_actor:{player}"] == of(room)
        with trio.fail_after(5):
            while f"on_leave_actor:{player}" not in of("entry"):
                await trio.testing.wait_all_tasks_blocked()
        await host.route.send_to_actor(player, Leave()).submit()
        left = (await completed(2))[1]
        assert zl.ActorJoinOutcome.ACCEPTED == left.outcome
        with trio.fail_after(5):
            while f"on_leave_actor:{player}" not in of(room):
                await trio.testing.wait_all_tasks_blocked()
        assert f"on_joined_actor:{player}" in of("entry")
        assert f"on_actor_join:{player}" not in of("entry")
        assert (await where(host, player)).spot_id.startswith("entry.")


@pytest.mark.spec("ACT-22", "ACT-28", "ERR-9.7")
async def test_a_rejected_join_is_a_value_and_changes_nothing(store_dsn: str) -> None:
    """on_actor_join's rejection reaches the Actor as REJECTED with its reply; the Actor stays in
    the Entry Spot and no joined/leave callback runs; a Spot without on_actor_join rejects."""
    player, room, closed = fresh(), fresh("room"), fresh("closed")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.spots.get_or_create(closed, "act.Closed").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(room, "no")).submit()
        await host.route.send_to_actor(player, Join(closed)).submit()
        rejected, default = await completed(2)
        assert zl.ActorJoinOutcome.REJECTED == rejected.outcome
        assert Welcome("full") == rejected.reply
        assert rejected.error is None
        assert rejected.actor_ref is None
        assert zl.ActorJoinOutcome.REJECTED == default.outcome
        assert (await where(host, player)).spot_id.startswith("entry.")
        assert [f"on_actor_join:{player}"] == of(room)
        assert not any("leave" in what for what in of("entry"))


@pytest.mark.spec("ACT-26")
async def test_joins_that_cannot_be_decided_fail_with_their_cause(store_dsn: str) -> None:
    """No such Spot: NOT_FOUND; an Instance Spot: INVALID_OPERATION; on_actor_join raising:
    INTERNAL_FAILURE. The Actor stays where it was."""
    player, room, counter = fresh(), fresh("room"), fresh("counter")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.route.send_to_spot(counter, Say("x")).instance_spot("act.Counter").submit()
        await host.actors.create(player, "act.Player").submit()
        for join in (Join(fresh("missing")), Join(counter), Join(room, "boom")):
            await host.route.send_to_actor(player, join).submit()
        outcomes = await completed(3)
        assert [zl.ActorJoinOutcome.FAILED] * 3 == [c.outcome for c in outcomes]
        kinds = [c.error.kind if c.error else None for c in outcomes]
        assert [
            zl.ErrorKind.NOT_FOUND,
            zl.ErrorKind.INVALID_OPERATION,
            zl.ErrorKind.INTERNAL_FAILURE,
        ] == kinds
        assert (await where(host, player)).spot_id.startswith("entry.")


@pytest.mark.spec("ACT-21")
async def test_a_join_past_its_deadline_fails(store_dsn: str) -> None:
    """A join whose on_actor_join does not answer in time ends FAILED / DEADLINE_EXCEEDED."""
    player, room = fresh(), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(room, "slow", timeout=0.2)).submit()
        with trio.fail_after(3):  # its own 0.2 s, not the 5 s default
            (failed,) = await completed()
        assert zl.ActorJoinOutcome.FAILED == failed.outcome
        assert failed.error is not None
        assert zl.ErrorKind.DEADLINE_EXCEEDED == failed.error.kind
        assert (await where(host, player)).spot_id.startswith("entry.")


@pytest.mark.spec("ACT-25", "ACT-20")
async def test_joining_the_current_spot_is_an_accepted_no_op(store_dsn: str) -> None:
    """Joins deferred in one turn run in order; the second, to the Spot the Actor is now in, is
    ACCEPTED with no callback at all."""
    player, room = fresh(), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(room, times=2)).submit()
        first, second = await completed(2)
        assert [zl.ActorJoinOutcome.ACCEPTED] * 2 == [first.outcome, second.outcome]
        assert second.reply is None
        assert [f"on_actor_join:{player}", f"on_joined_actor:{player}"] == of(room)


@pytest.mark.spec("ACT-20", "ACT-24")
async def test_a_join_runs_before_the_next_message_and_a_failed_turn_discards_it(
    store_dsn: str,
) -> None:
    """A message sent right after the joining one is handled in the new Spot, after
    on_join_completed; joins deferred by a turn that then raised never run."""
    player, room, other = fresh(), fresh("room"), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.spots.get_or_create(other, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(other, then_raise=True)).submit()
        await host.route.send_to_actor(player, Join(room)).submit()
        here = await where(host, player)
        assert room == here.spot_id
        assert ["completed:ACCEPTED"] == [w for w in of(player) if w.startswith("completed")]
        assert [] == of(other)


@pytest.mark.spec("ACT-23")
async def test_a_join_does_not_wait_for_the_sources_on_leave_actor(store_dsn: str) -> None:
    """The source Spot's on_leave_actor is started, not awaited: the join completes while it is
    still running."""
    player, room = fresh(), fresh("slowleave")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(room)).submit()
        await completed()
        try:
            await host.route.send_to_actor(player, Leave()).submit()
            left = (await completed(2))[1]  # while the room's on_leave_actor still waits
            assert zl.ActorJoinOutcome.ACCEPTED == left.outcome
            assert f"on_leave_actor:{player}" not in of(room)
        finally:
            signals.release.set()
        with trio.fail_after(5):
            while f"on_leave_actor:{player}" not in of(room):
                await trio.testing.wait_all_tasks_blocked()


@pytest.mark.spec("ACT-24")
async def test_the_next_message_waits_for_on_join_completed(store_dsn: str) -> None:
    """on_join_completed is a turn of the Actor: a message sent after the join starts only once
    it has returned, even on a PER_ACTOR Spot where no Spot gate orders them."""
    player, lanes = fresh(), fresh("hold")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(lanes, "act.Lanes").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(lanes)).submit()
        await completed()  # on_join_completed now waits for signals.release
        await host.route.send_to_actor(player, Block("next")).submit()
        await trio.testing.wait_all_tasks_blocked()
        assert "block:next:start" not in of(player)
        signals.release.set()
        await where(host, player)
        steps = of(player)
        assert steps.index("completed:ACCEPTED") < steps.index("block:next:start")


@pytest.mark.spec("ACT-20")
async def test_joins_deferred_in_one_turn_run_in_the_order_deferred(store_dsn: str) -> None:
    """Two joins deferred by one turn, to two different Spots, run first to last: the Actor
    ends in the second Spot, and the completions come in the same order."""
    player, first, second = fresh(), fresh("room"), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(first, "act.Room").submit()
        await host.spots.get_or_create(second, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, JoinBoth(first, second)).submit()
        done = await completed(2)
        assert [first, second] == [c.spot_id for c in done]
        assert [zl.ActorJoinOutcome.ACCEPTED] * 2 == [c.outcome for c in done]
        assert second == (await where(host, player)).spot_id


@pytest.mark.spec("ACT-19")
async def test_a_second_defer_of_one_join_call_is_refused_and_records_nothing(
    store_dsn: str,
) -> None:
    """defer() twice on the same join call: the second raises INVALID_OPERATION inside the turn
    and the join runs once."""
    player, room = fresh(), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, DeferTwice(room)).submit()
        (done,) = await completed(1)
        assert zl.ActorJoinOutcome.ACCEPTED == done.outcome
        assert room == (await where(host, player)).spot_id
        assert ["twice:INVALID_OPERATION"] == [w for w in of(player) if w.startswith("twice")]
        assert 1 == len([w for w in of(player) if w.startswith("completed")])


@pytest.mark.spec("ACT-18", "ACT-19")
async def test_defer_is_checked_where_it_is_called(store_dsn: str) -> None:
    """defer() outside the Actor's turn, twice, or a 65th time in one turn raises
    INVALID_OPERATION; a join call offers no submit or yield_; timeout() is set once."""
    player, room = fresh(), fresh("room")
    captured: list[zl.ActorJoinCall] = []
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(room, times=65)).submit()
        # The 65th defer raised, so the turn failed and discarded all 64 joins (ACT-20).
        assert (await where(host, player)).spot_id.startswith("entry.")
        assert [] == of(room)
        actor = host._messaging.actors.actors[zl.ActorId(player)]  # the instance, for its context
        call = actor.instance.context.join_spot(room)
        captured.append(call)
        assert not hasattr(call, "submit")
        assert not hasattr(call, "yield_")
        call.timeout(1)
        with pytest.raises(zl.ZLinkError) as caught:
            call.timeout(2)
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            call.defer()  # not inside a turn of this Actor
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind


# --- execution modes --------------------------------------------------------------------------


@pytest.mark.spec("SPOT-67", "SPOT-78")
async def test_spot_wide_members_share_the_spot_gate(store_dsn: str) -> None:
    """A member Actor's turn in a SPOT_WIDE Spot waits while a Spot turn holds the gate; an
    Entry Spot Actor runs meanwhile and cannot yield."""
    member, loner, room = fresh(), fresh(), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(member, "act.Player").submit()
        await host.actors.create(loner, "act.Player").submit()
        await host.route.send_to_actor(member, Join(room)).submit()
        await completed()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(
                lambda: host.route.request_to_spot(room, Block("spot"), reply_type=Said).submit()
            )
            with trio.fail_after(5):
                while "block:spot" not in of(room):
                    await trio.testing.wait_all_tasks_blocked()
            await host.route.send_to_actor(member, Block("quick")).submit()
            await host.route.send_to_actor(loner, Block("quick")).submit()
            with trio.fail_after(5):
                while "block:quick:end" not in of(loner):
                    await trio.testing.wait_all_tasks_blocked()
            await trio.testing.wait_all_tasks_blocked()
            # The member still waits for the Spot's gate.
            assert not any(w.startswith("block") for w in of(member))
            signals.release.set()
        with trio.fail_after(5):
            while "block:quick:end" not in of(member):
                await trio.testing.wait_all_tasks_blocked()
        await host.route.send_to_actor(loner, YieldOn(room)).submit()
        await where(host, loner)
        assert ["yield:start", "yield:refused:INVALID_OPERATION"] == of(loner)[-2:]


@pytest.mark.spec("SPOT-69", "SPOT-70")
async def test_a_yielding_member_keeps_its_fifo_claim(store_dsn: str) -> None:
    """A member Actor that yields gives the Spot gate back (a Spot turn runs meanwhile) but its
    own next message waits until the yielding turn has ended."""
    member, room, slow = fresh(), fresh("room"), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.spots.get_or_create(slow, "act.Room").submit()
        await host.actors.create(member, "act.Player").submit()
        await host.route.send_to_actor(member, Join(room)).submit()
        await completed()
        await host.route.send_to_actor(member, YieldOn(slow)).submit()
        with trio.fail_after(5):
            await signals.entered.wait()
        await host.route.send_to_actor(member, Block("next")).submit()
        await host.route.send_to_spot(room, Say("spot turn")).submit()
        with trio.fail_after(5):
            while "say:spot turn" not in of(room):
                await trio.testing.wait_all_tasks_blocked()
        assert ["yield:start"] == of(member)[-1:]
        signals.release.set()
        with trio.fail_after(5):
            while "block:next:end" not in of(member):
                await trio.testing.wait_all_tasks_blocked()
        steps = of(member)
        assert steps.index("yield:end") < steps.index("block:next:start")


@pytest.mark.spec("SPOT-71", "SPOT-72", "TIMER-34")
async def test_per_actor_spots_run_actors_and_timers_on_their_own_lanes(store_dsn: str) -> None:
    """In a PER_ACTOR Spot two member Actors run at the same time, and a timer ticks while the
    Spot's own lane is held by a turn."""
    one, two, lanes = fresh(), fresh(), fresh("lanes")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(lanes, "act.Lanes").submit()
        for player in (one, two):
            await host.actors.create(player, "act.Player").submit()
            await host.route.send_to_actor(player, Join(lanes)).submit()
        await completed(2)
        with trio.fail_after(5):
            await host.route.send_to_actor(one, Block("meet")).submit()
            await host.route.send_to_actor(two, Block("meet")).submit()
            while "block:meet:end" not in of(one) or "block:meet:end" not in of(two):
                await trio.testing.wait_all_tasks_blocked()
        signals.entered = trio.Event()
        signals.other_entered = trio.Event()
        await host.route.request_to_spot(lanes, Where(), reply_type=Here).submit()
        await host.route.send_to_spot(lanes, Say("hold")).submit()
        with trio.fail_after(5):
            await signals.entered.wait()
            await signals.other_entered.wait()  # a tick ran while the Spot lane was held
        signals.release.set()
        await host.route.send_to_actor(one, YieldOn(lanes)).submit()
        await where(host, one)
        assert ["yield:start", "yield:refused:INVALID_OPERATION"] == of(one)[-2:]


# --- close, destroy, disconnect, shutdown ------------------------------------------------------


@pytest.mark.spec("SPOT-37", "ACT-30")
async def test_members_block_close_and_destroy_needs_the_entry_spot(store_dsn: str) -> None:
    """close() of a Spot with members returns False and leaves it running; destroy of a member is
    INVALID_OPERATION; after leaving, destroy ends it (no on_leave_actor), and the room closes."""
    player, room = fresh(), fresh("room")
    async with host_with(store_dsn) as host:
        created = await host.spots.get_or_create(room, "act.Room").submit()
        made = await host.actors.create(player, "act.Player").submit()
        ref = made.actor_ref
        assert ref is not None
        await host.route.send_to_actor(player, Join(room)).submit()
        await completed()
        assert await host.spots.close(created.spot_ref) is False
        await host.route.send_to_spot(room, Say("still here")).submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await host.actors.destroy(ref)
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        await host.route.send_to_actor(player, Leave()).submit()
        await completed(2)
        stale = zl.ActorRef(player, 2, host.mesh, host.node_rid)
        with pytest.raises(zl.ZLinkError) as caught:
            await host.actors.destroy(stale)
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        leaves_before = [w for w in of("entry") if w.startswith("on_leave")]
        assert await host.actors.destroy(ref) is True
        assert await host.actors.destroy(ref) is False
        assert await host.actors.find(player) is None
        assert leaves_before == [w for w in of("entry") if w.startswith("on_leave")]
        assert await host.spots.close(created.spot_ref) is True


@pytest.mark.spec("ACT-31")
async def test_notify_disconnected_runs_the_current_spots_callback(store_dsn: str) -> None:
    """notify_disconnected runs on_disconnect_actor of the Actor's current Spot, once per call,
    and changes nothing else; an unknown id gives False."""
    player, room = fresh(), fresh("room")
    async with host_with(store_dsn) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        assert await host.actors.notify_disconnected(player) is True
        assert [f"on_disconnect_actor:{player}"] == [
            w for w in of("entry") if w.startswith("on_disconnect")
        ]
        await host.route.send_to_actor(player, Join(room)).submit()
        await completed()
        assert await host.actors.notify_disconnected(player) is True
        assert f"on_disconnect_actor:{player}" in of(room)
        assert room == (await where(host, player)).spot_id
        assert await host.actors.notify_disconnected(fresh()) is False


@pytest.mark.spec("ACT-32")
async def test_shutdown_seals_actors_and_spots_still_see_their_members(store_dsn: str) -> None:
    """At shutdown a request queued behind a blocked Actor turn ends SHUTTING_DOWN, the Spot's
    on_closing still lists its members, and the Actor's record is released."""
    player, room = fresh(), fresh("room")
    errors: list[zl.ErrorKind] = []
    async with host_with(store_dsn, closing_timeout=0.5) as host:
        await host.spots.get_or_create(room, "act.Room").submit()
        await host.actors.create(player, "act.Player").submit()
        await host.route.send_to_actor(player, Join(room)).submit()
        await completed()
        await host.route.send_to_actor(player, Block("wait")).submit()
        with trio.fail_after(5):
            await signals.entered.wait()

        async def queued() -> None:
            try:
                await where(host, player)
            except zl.ZLinkError as error:
                errors.append(error.kind)

        await host.route.send_to_actor(player, Block("queued")).submit()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(queued)
            await trio.testing.wait_all_tasks_blocked()
            with trio.fail_after(10):
                nursery.start_soon(host.shutdown)
                await trio.testing.wait_all_tasks_blocked()  # sealed, waiting for the Actor
                signals.release.set()  # the running turn ends before the closing deadline
    assert [zl.ErrorKind.SHUTTING_DOWN] == errors
    assert "block:queued:start" not in of(player)  # what was queued is dropped, not run
    assert [f"on_closing:HOST_SHUTDOWN:{[player]}"] == [
        w for w in of(room) if w.startswith("on_closing")
    ]
    async with open_stores(StoreConfig(dsn=store_dsn)) as stores:
        assert not isinstance(await stores.location.read(f"actor/{player}"), Found)
