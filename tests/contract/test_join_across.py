"""An Actor that joins a User Spot of another host moves there as part of the join
(specs/actors.md ACT-27; actors/activation.py Rule 6, host/joining.py, routing/joins_in.py):
the Spot's host decides with ``on_actor_join``; an accepted Actor arrives with its state and
generation, and the Spot's ``on_joined_actor`` and the Actor's ``on_join_completed`` run there
before any message; a rejected or failed join leaves the Actor where it was."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from zlink_trio._runtime.host import relocation
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


@app.message("ajoin.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("ajoin.Get")
@attrs.frozen
class Get:
    pass


@app.message("ajoin.Count")
@attrs.frozen
class Count:
    value: int
    node: str
    spot: str


@app.message("ajoin.Join")
@attrs.frozen
class Join:
    spots: tuple[str, ...]
    """Joined in this order, all deferred by one turn."""
    ask: str = ""


@app.message("ajoin.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("ajoin.Note")
@attrs.frozen
class Note:
    text: str


events: list[str] = []
"""What every callback and handler did, in order, with the host it ran on."""
completed: list[tuple[zl.ActorJoinCompletion, str, int]] = []
"""(completion, host, the Actor's count then) of every on_join_completed."""
settled = trio.Event()
"""Set once ``wanted`` completions have run."""
wanted = 1


def _node(context: Any) -> str:
    return context.ref.node_rid.value


class Tally:
    """A count, said with where it runs; joins as told."""

    context: Any

    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount
        events.append(f"add {msg.amount} on {_node(self.context)}")

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(self.value, _node(self.context), self.context.spot_id.value)

    @zl.packet_handler(Join)
    async def join(self, msg: Join) -> None:
        for spot in msg.spots:
            request = Ask(msg.ask) if msg.ask else None
            self.context.join_spot(spot, request).defer()

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        completed.append((completion, _node(self.context), self.value))
        events.append(f"completed {completion.spot_id} on {_node(self.context)}")
        if len(completed) >= wanted:
            settled.set()


class PurseState(zl.ActorRelocationAdapter["Purse"]):
    async def capture(self, target: Purse) -> bytes:
        return target.value.to_bytes(8, "big")

    async def restore(self, target: Purse, payload: bytes) -> None:
        target.value = int.from_bytes(payload, "big")


@app.actor("ajoin.Purse", relocation=zl.preserve_state_with(PurseState))
class Purse(Tally, zl.Actor):
    pass


@app.actor("ajoin.Homebody")
class Homebody(Tally, zl.Actor):
    """Declared without ``relocation=``: it never leaves its host."""


@app.user_spot("ajoin.Lobby")
class Lobby(zl.Spot):
    """Takes every Actor unless asked with "no", and says so with a Note."""

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        events.append(f"on_actor_join {actor_id.value} {request!r} on {_node(self.context)}")
        if isinstance(request, Ask) and request.text == "no":
            return zl.SpotActorJoinResult.reject(Note("full"))
        return zl.SpotActorJoinResult.accept(Note("welcome"))

    async def on_joined_actor(self, actor: object) -> None:
        events.append(f"on_joined_actor on {_node(self.context)}")

    async def on_leave_actor(self, actor: object) -> None:
        events.append(f"{self.context.ref.spot_id.value}.on_leave_actor")


@app.entry_spot
class Entry(zl.EntrySpot):
    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        events.append("entry.on_leave_actor")


def _get(host: TestHost, actor_id: str) -> Any:
    return host.route.request_to_actor(actor_id, Get(), reply_type=Count)


@contextlib.asynccontextmanager
async def _two_hosts(store_dsn: str) -> AsyncIterator[tuple[TestHost, TestHost]]:
    """A source and a target host that see each other, with the Lobby on the target."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        with trio.fail_after(10):
            for one, other in ((source, target), (target, source)):
                await one.host._tree.membership.wait_for_peer(other.node_rid)  # type: ignore[union-attr]
        await target.spots.get_or_create("lobby", "ajoin.Lobby").submit()
        yield source, target


def _reset(completions: int = 1) -> None:
    global settled, wanted
    events.clear()
    completed.clear()
    settled, wanted = trio.Event(), completions


@pytest.mark.spec("ACT-27", "ACT-23", "ACT-24")
async def test_a_join_to_a_spot_of_another_host_moves_the_actor_there(store_dsn: str) -> None:
    """A Purse with a count of 5 joins the Lobby of the other host, with two sends queued
    behind the join: the Lobby decides there, the Purse arrives with its count and generation,
    ``on_joined_actor`` and then ``on_join_completed`` (ACCEPTED, the new ref, the Lobby's
    reply) run there before the queued sends, the source's Entry Spot runs
    ``on_leave_actor``, and the source holds the Actor no more."""
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        created = await source.actors.create("p-1", "ajoin.Purse").submit()
        assert created.actor_ref is not None
        here = source.host._tree.actors.actors[zl.ActorId("p-1")]  # type: ignore[union-attr]
        await source.route.send_to_actor("p-1", Add(5)).submit()
        await source.route.send_to_actor("p-1", Join(("lobby",), ask="please")).submit()
        await source.route.send_to_actor("p-1", Add(1)).submit()
        await source.route.send_to_actor("p-1", Add(2)).submit()
        with trio.fail_after(10):
            await settled.wait()
            # Asked from the source (its follow window relays) and from the target itself.
            for asking in (source, target):
                count = await _get(asking, "p-1").submit()
                assert Count(8, target.node_rid.value, "lobby") == count
        there = target.node_rid.value
        [(completion, ran_on, value_then)] = completed
        assert (zl.ActorJoinOutcome.ACCEPTED, there, 5) == (
            completion.outcome,
            ran_on,
            value_then,
        )
        assert Note("welcome") == completion.reply
        assert completion.actor_ref is not None
        assert there == completion.actor_ref.node_rid.value
        assert created.actor_ref.object_generation == completion.actor_ref.object_generation
        mine = [event for event in events if event != "entry.on_leave_actor"]
        assert [
            f"add 5 on {source.node_rid.value}",
            f"on_actor_join p-1 {Ask('please')!r} on {there}",
            f"on_joined_actor on {there}",
            f"completed lobby on {there}",
            f"add 1 on {there}",
            f"add 2 on {there}",
        ] == mine
        assert "entry.on_leave_actor" in events
        found = await source.actors.find("p-1")
        assert found is not None
        assert (target.node_rid, created.actor_ref.object_generation) == (
            found.node_rid,
            found.object_generation,
        )
        lobby = target.host._tree.spots.activations[zl.SpotId("lobby")]  # type: ignore[union-attr]
        assert {"p-1"} == {member.actor_id.value for member in lobby.members}
        with trio.fail_after(10):
            await here.closed.wait()
        assert not source.host._tree.actors.live  # type: ignore[union-attr]


@pytest.mark.spec("ACT-27", "ACT-22")
async def test_a_rejected_join_to_another_host_leaves_the_actor_where_it_was(
    store_dsn: str,
) -> None:
    """The Lobby rejects with a Note: the Purse's completion is REJECTED with that reply and
    runs on the source before the send queued behind the join, which the source handles."""
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        await source.actors.create("p-2", "ajoin.Purse").submit()
        await source.route.send_to_actor("p-2", Join(("lobby",), ask="no")).submit()
        await source.route.send_to_actor("p-2", Add(4)).submit()
        with trio.fail_after(10):
            await settled.wait()
            count = await _get(source, "p-2").submit()
        here = source.node_rid.value
        entry = source.host._tree.spots.entry.spot_id.value  # type: ignore[union-attr]
        assert Count(4, here, entry) == count
        [(completion, ran_on, _)] = completed
        assert (zl.ActorJoinOutcome.REJECTED, Note("full"), here) == (
            completion.outcome,
            completion.reply,
            ran_on,
        )
        assert [f"completed lobby on {here}", f"add 4 on {here}"] == events[-2:]
        assert "on_joined_actor" not in " ".join(events)
        assert not target.host._tree.actors.live  # type: ignore[union-attr]


@pytest.mark.spec("ACT-27", "DEC-26")
async def test_an_actor_that_cannot_move_fails_a_join_to_another_host(store_dsn: str) -> None:
    """A Homebody (``disable_relocation()`` by default) that joins the other host's Lobby ends
    FAILED with INVALID_OPERATION, nobody is asked, and it serves on where it was; a join to a
    Spot that lives nowhere ends FAILED with NOT_FOUND."""
    _reset(2)
    async with _two_hosts(store_dsn) as (source, _target):
        await source.actors.create("h-1", "ajoin.Homebody").submit()
        await source.route.send_to_actor("h-1", Join(("lobby", "nowhere"))).submit()
        with trio.fail_after(10):
            await settled.wait()
            count = await _get(source, "h-1").submit()
        assert source.node_rid.value == count.node
        kinds = [(c.spot_id, c.outcome, c.error.kind if c.error else None) for c, _, _ in completed]
        failed = zl.ActorJoinOutcome.FAILED
        assert [
            ("lobby", failed, zl.ErrorKind.INVALID_OPERATION),
            ("nowhere", failed, zl.ErrorKind.NOT_FOUND),
        ] == kinds
        assert not [event for event in events if "on_actor_join" in event]


@pytest.mark.spec("ACT-27", "ACT-20")
async def test_joins_deferred_after_one_that_moved_the_actor_end_failed_there(
    store_dsn: str,
) -> None:
    """One turn defers two joins to the other host's Lobby: the first moves the Purse; the
    second does not run and ends FAILED (UNAVAILABLE), reported on the target after the
    first's ACCEPTED."""
    _reset(2)
    async with _two_hosts(store_dsn) as (source, target):
        await source.actors.create("p-3", "ajoin.Purse").submit()
        await source.route.send_to_actor("p-3", Join(("lobby", "lobby"))).submit()
        with trio.fail_after(10):
            await settled.wait()
        there = target.node_rid.value
        outcomes = [(c.outcome, c.error.kind if c.error else None, on) for c, on, _ in completed]
        assert [
            (zl.ActorJoinOutcome.ACCEPTED, None, there),
            (zl.ActorJoinOutcome.FAILED, zl.ErrorKind.UNAVAILABLE, there),
        ] == outcomes


asked = trio.Event()
answer_now = trio.Event()


@app.user_spot("ajoin.SlowLobby")
class SlowLobby(zl.Spot):
    """Decides only when the test says so."""

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        asked.set()
        await answer_now.wait()
        return zl.SpotActorJoinResult.accept()


@pytest.mark.spec("ACT-27", "RELOC-61")
async def test_a_host_relocating_while_a_join_moves_an_actor_lets_the_join_move_it(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source relocates while its Purse's join to the other host's SlowLobby waits for
    ``on_actor_join``: the relocation reaches the Actor's move then, waits for the join
    instead of refusing the sealed Actor, the join moves it, and the relocation ends
    RELOCATED."""
    global asked, answer_now
    _reset()
    asked, answer_now = trio.Event(), trio.Event()
    moving = trio.Event()
    move_actor = relocation.move_actor

    async def entered(*args: Any) -> zl.RelocationReason | None:
        moving.set()
        return await move_actor(*args)

    monkeypatch.setattr(relocation, "move_actor", entered)
    async with _two_hosts(store_dsn) as (source, target):
        await target.spots.get_or_create("slow", "ajoin.SlowLobby").submit()
        await source.actors.create("p-4", "ajoin.Purse").submit()
        await source.route.send_to_actor("p-4", Add(6)).submit()
        await source.route.send_to_actor("p-4", Join(("slow",))).submit()
        results: list[zl.RelocationResult] = []
        with trio.fail_after(20):
            await asked.wait()
            async with trio.open_nursery() as nursery:

                async def relocate() -> None:
                    results.append(await source.host.relocate(deadline=15.0))

                nursery.start_soon(relocate)
                await moving.wait()
                await trio.testing.wait_all_tasks_blocked()
                answer_now.set()
            await settled.wait()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        [(completion, ran_on, value_then)] = completed
        assert (zl.ActorJoinOutcome.ACCEPTED, target.node_rid.value, 6) == (
            completion.outcome,
            ran_on,
            value_then,
        )


@pytest.mark.spec("ACT-27")
async def test_a_join_that_moved_the_actor_leaves_it_forwarding_when_it_returns(
    store_dsn: str,
) -> None:
    """The moment the join's move returns to the Actor's lane (the relay still to come), the
    Actor already forwards what reaches it: a relocation that looks at it next sees it on its
    way out rather than sealed by another move, which it would refuse (``STATE_INCOMPATIBLE``)."""
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        catalog = source.host._tree.actors  # type: ignore[union-attr]
        join_elsewhere = catalog.join_elsewhere
        forwarding: list[bool] = []

        async def watched(actor: Any, *args: Any) -> zl.ActorJoinCompletion | None:
            completion = await join_elsewhere(actor, *args)
            if completion is None:  # it moved: no checkpoint between the return and this look
                forwarding.append(actor.hold is not None and actor.hold.forward is not None)
            return completion

        catalog.join_elsewhere = watched
        await source.actors.create("p-5", "ajoin.Purse").submit()
        await source.route.send_to_actor("p-5", Join(("lobby",))).submit()
        with trio.fail_after(10):
            await settled.wait()
        assert [True] == forwarding
        assert target.node_rid.value == completed[0][1]


@pytest.mark.spec("SPOT-60")
async def test_a_join_here_keeps_the_instance_and_a_move_makes_a_new_one(store_dsn: str) -> None:
    """A Purse joins a Lobby on its own host: the same instance serves it there. It then joins
    the Lobby of the other host: a new instance serves it there, with its count. A Purse alone
    on a third host that relocates is served by a new instance where it went, with its count."""
    _reset()
    async with _two_hosts(store_dsn) as (source, target):
        await source.spots.get_or_create("lobby-here", "ajoin.Lobby").submit()
        await source.actors.create("p-60", "ajoin.Purse").submit()
        await source.route.send_to_actor("p-60", Add(6)).submit()

        def instance(host: TestHost, actor_id: str) -> object:
            actors = host.host._tree.actors.actors  # type: ignore[union-attr]
            return actors[zl.ActorId(actor_id)].instance

        first = instance(source, "p-60")
        await source.route.send_to_actor("p-60", Join(("lobby-here",))).submit()
        assert Count(6, source.node_rid.value, "lobby-here") == await _get(source, "p-60").submit()
        assert instance(source, "p-60") is first
        await source.route.send_to_actor("p-60", Join(("lobby",))).submit()
        with trio.fail_after(10):
            await settled.wait()
        assert Count(6, target.node_rid.value, "lobby") == await _get(target, "p-60").submit()
        assert instance(target, "p-60") is not first

        async with open_test_host(app, dsn=store_dsn, mesh=source.mesh) as third:
            for other in (source, target):
                with trio.fail_after(10):
                    await third.host._tree.membership.wait_for_peer(other.node_rid)  # type: ignore[union-attr]
            await third.actors.create("p-61", "ajoin.Purse").submit()
            await third.route.send_to_actor("p-61", Add(7)).submit()
            before = instance(third, "p-61")
            result = await third.host.relocate(deadline=20.0)
            assert zl.RelocationOutcome.RELOCATED == result.outcome, result
            count = await _get(source, "p-61").submit()
            assert 7 == count.value
            now = source if count.node == source.node_rid.value else target
            assert instance(now, "p-61") is not before
