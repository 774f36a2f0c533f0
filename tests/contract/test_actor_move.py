"""An Actor of the Entry Spot moves to another host when its host relocates (specs/relocation.md
RELOC-61..RELOC-63; actors/sealing.py, host/moving.py ``move_actor``, routing/arrivals.py): its
state through its adapter, its generation, and the messages that waited at the seal, answered
from the target."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.early_sender import send_early_after_commit
from tests.contract.held_commit import hold_the_commit
from tests.contract.peers import meet
from zlink_trio._runtime.actors.sealing import seal_actor
from zlink_trio._runtime.spots.ingress import WAKE
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


@app.message("amove.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("amove.Get")
@attrs.frozen
class Get:
    pass


@app.message("amove.Count")
@attrs.frozen
class Count:
    value: int
    node: str
    spot: str


@app.message("amove.Stall")
@attrs.frozen
class Stall:
    pass


@app.message("amove.Join")
@attrs.frozen
class Join:
    spot: str


@app.message("amove.Mark")
@attrs.frozen
class Mark:
    label: str


stalled = trio.Event()
go_on = trio.Event()
marks: list[tuple[str, str]] = []
"""(label, node) of every Mark handled, in the order handled."""
callbacks: list[str] = []
"""The membership callbacks of every Room and Entry Spot, in the order called."""


class WalletState(zl.ActorRelocationAdapter["Wallet"]):
    async def capture(self, target: Wallet) -> bytes:
        return target.value.to_bytes(8, "big")

    async def restore(self, target: Wallet, payload: bytes) -> None:
        target.value = int.from_bytes(payload, "big")


class Tally:
    """What every Actor of these tests does: keep a count, say it with where it runs."""

    context: Any

    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        ref = self.context.ref
        return Count(self.value, ref.node_rid.value, self.context.spot_id.value)

    @zl.packet_handler(Mark)
    async def mark(self, msg: Mark) -> None:
        marks.append((msg.label, self.context.ref.node_rid.value))

    @zl.request_handler(Stall)
    async def stall(self, req: Stall) -> Count:
        stalled.set()
        await go_on.wait()
        ref = self.context.ref
        return Count(self.value, ref.node_rid.value, self.context.spot_id.value)

    @zl.packet_handler(Join)
    async def join(self, msg: Join) -> None:
        self.context.join_spot(msg.spot).defer()


@app.actor("amove.Wallet", relocation=zl.preserve_state_with(WalletState))
class Wallet(Tally, zl.Actor):
    pass


@app.actor("amove.Visitor", relocation=zl.recreate_on_relocation())
class Visitor(Tally, zl.Actor):
    pass


class Broken(zl.ActorRelocationAdapter["Stubborn"]):
    async def capture(self, target: Stubborn) -> bytes:
        raise RuntimeError("this state cannot be written down")

    async def restore(self, target: Stubborn, payload: bytes) -> None:
        raise AssertionError("never captured, so never restored")


@app.actor("amove.Stubborn", relocation=zl.preserve_state_with(Broken))
class Stubborn(Tally, zl.Actor):
    pass


class RoomState(zl.SpotRelocationAdapter["Room"]):
    async def capture(self, target: Room) -> bytes:
        return target.value.to_bytes(8, "big")

    async def restore(self, target: Room, payload: bytes) -> None:
        target.value = int.from_bytes(payload, "big")


@app.user_spot("amove.Room", relocation=zl.preserve_state_with(RoomState))
class Room(zl.Spot):
    def __init__(self) -> None:
        self.value = 0

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        callbacks.append(f"on_actor_join:{actor_id.value}")
        return zl.SpotActorJoinResult.accept()

    async def on_joined_actor(self, actor: object) -> None:
        callbacks.append("on_joined_actor")

    async def on_leave_actor(self, actor: object) -> None:
        callbacks.append("on_leave_actor")

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        ref = self.context.ref
        return Count(self.value, ref.node_rid.value, ref.spot_id.value)


@app.user_spot("amove.Hall", mode=zl.SpotFactoryMode.PER_ACTOR)
class Hall(zl.Spot):
    """A PER_ACTOR Spot: its own state does not move (it is recreated: RELOC-24, RELOC-25)."""

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    def __init__(self) -> None:
        self.value = 0

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        return zl.SpotActorJoinResult.accept()

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        ref = self.context.ref
        return Count(self.value, ref.node_rid.value, ref.spot_id.value)

    @zl.packet_handler(Stall)
    async def start_ticking(self, msg: Stall) -> None:
        self.context.timers.start("tick", 3600.0)

    @zl.timer_handler("tick")
    async def tick(self, tick: zl.TimerTick) -> None:
        pass


def _get(host: TestHost, actor_id: str) -> Any:
    return host.route.request_to_actor(actor_id, Get(), reply_type=Count)


async def _sealing(host: TestHost, actor_id: str) -> None:
    """Return once ``host``'s relocation began to seal Actor ``actor_id`` (its hold is set):
    the relocation first waits for its node record to land (RELOC-72), so a test cannot take
    "every task blocked" for "the seal began"."""
    actor = host.host._tree.actors.actors[zl.ActorId(actor_id)]  # type: ignore[union-attr]
    with trio.fail_after(10):
        while actor.hold is None:  # noqa: ASYNC110  # the runtime has no event for a seal
            await trio.sleep(0.001)


async def _stalled(
    source: TestHost, actor_id: str, nursery: trio.Nursery, answers: dict[str, Count]
) -> None:
    """Wallet ``actor_id`` (count 1) runs a turn that waits for ``go_on`` (its answer goes to
    ``answers["stall"]``)."""
    global stalled, go_on
    stalled, go_on = trio.Event(), trio.Event()
    await source.actors.create(actor_id, "amove.Wallet").submit()
    await source.route.send_to_actor(actor_id, Add(1)).submit()

    async def stall() -> None:
        call = source.route.request_to_actor(actor_id, Stall(), reply_type=Count)
        answers["stall"] = await call.submit()

    nursery.start_soon(stall)
    await stalled.wait()


@pytest.mark.spec("RELOC-61", "RELOC-23")
async def test_an_entry_actor_moves_with_its_state_and_generation(store_dsn: str) -> None:
    """A Wallet with an adapter and a Visitor made anew: after the source relocates, both answer
    from the target's Entry Spot, the first with its count, the second from a fresh instance,
    each with the generation it had; find() names the target and the source holds neither."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(
            app, dsn=store_dsn, stores=stores, relocation_payload_chunk_limit_bytes=3
        ) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        wallet = await source.actors.create("w-1", "amove.Wallet").submit()
        visitor = await source.actors.create("v-1", "amove.Visitor").submit()
        assert wallet.actor_ref is not None
        assert visitor.actor_ref is not None
        for amount in (5, 6, 7):
            await source.route.send_to_actor("w-1", Add(amount)).submit()
        await source.route.send_to_actor("v-1", Add(3)).submit()
        assert 18 == (await _get(source, "w-1").submit()).value
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        moved_to = target.node_rid.value
        entry = target.host._tree.spots.entry.spot_id.value  # type: ignore[union-attr]
        # Asked from the source (its follow window relays) and from the target itself.
        for asking in (source, target):
            assert Count(18, moved_to, entry) == await _get(asking, "w-1").submit()
            assert Count(0, moved_to, entry) == await _get(asking, "v-1").submit()
        found = await target.actors.find("w-1")
        assert found is not None
        assert wallet.actor_ref.object_generation == found.object_generation
        assert target.node_rid == found.node_rid
        found_visitor = await target.actors.find("v-1")
        assert found_visitor is not None
        assert visitor.actor_ref.object_generation == found_visitor.object_generation
        actors = source.host._tree.actors  # type: ignore[union-attr]
        assert not actors.actors
        assert not actors.live


@pytest.mark.spec("RELOC-62")
async def test_what_waited_in_an_actors_queue_runs_on_the_target_in_order(
    store_dsn: str,
) -> None:
    """A turn runs when the relocation starts, with sends and a request queued behind it: the
    turn ends on the source, then what was queued runs on the target in order, and the
    request's caller gets the target's answer."""
    marks.clear()
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        answers: dict[str, Count] = {}
        results: list[zl.RelocationResult] = []
        async with trio.open_nursery() as nursery:

            async def queued() -> None:
                answers["queued"] = await _get(source, "w-2").submit()

            await _stalled(source, "w-2", nursery, answers)
            await source.route.send_to_actor("w-2", Mark("one")).submit()
            await source.route.send_to_actor("w-2", Add(10)).submit()
            await source.route.send_to_actor("w-2", Mark("two")).submit()
            nursery.start_soon(queued)
            await trio.testing.wait_all_tasks_blocked()

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=20.0))

            nursery.start_soon(relocate)
            await _sealing(source, "w-2")
            go_on.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        assert (1, source.node_rid.value) == (answers["stall"].value, answers["stall"].node)
        assert (11, target.node_rid.value) == (answers["queued"].value, answers["queued"].node)
        moved_to = target.node_rid.value
        assert [("one", moved_to), ("two", moved_to)] == marks


@pytest.mark.spec("ERR-5.16")
async def test_what_a_move_relays_to_an_actor_holds_the_targets_job_permits(
    store_dsn: str,
) -> None:
    """Both hosts have 4 job permits. With the move held at its commit, a ``Stall`` and 12
    sends wait in the Wallet's hold on the source, more than its permits. On the target the
    Wallet runs the ``Stall`` first; while it waits, the sends relayed behind it hold the
    target's permits: a request to another Actor there gets none until the ``Stall`` ends."""
    global stalled, go_on
    stalled, go_on = trio.Event(), trio.Event()
    jobs, sends = 4, 12
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores, app_job_queue_size=jobs) as source,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=source.mesh, app_job_queue_size=jobs
        ) as target,
    ):
        await meet(source, target)
        await source.actors.create("w-16", "amove.Wallet").submit()
        await target.actors.create("other", "amove.Visitor").submit()
        reached, release = hold_the_commit(source)
        answers: dict[str, Count] = {}
        results: list[zl.RelocationResult] = []
        async with trio.open_nursery() as nursery:

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=60.0))

            async def stall() -> None:
                call = source.route.request_to_actor("w-16", Stall(), reply_type=Count)
                answers["stall"] = await call.timeout(60).submit()

            async def send_all() -> None:  # a send's wait is not its caller's (CMP-7.5)
                for _ in range(sends):
                    await source.route.send_to_actor("w-16", Add(1)).submit()

            nursery.start_soon(relocate)
            actor = source.host._tree.actors.actors[zl.ActorId("w-16")]  # type: ignore[union-attr]
            try:
                with trio.fail_after(20):
                    await reached.wait()
                    nursery.start_soon(stall)
                    while actor.hold is None or len(actor.hold.held) < 1:  # noqa: ASYNC110
                        await trio.sleep(0.01)
                    nursery.start_soon(send_all)
                    while len(actor.hold.held) < 1 + sends:  # noqa: ASYNC110
                        await trio.sleep(0.01)
            finally:
                release.set()
            try:
                with trio.fail_after(20):
                    await stalled.wait()
                with pytest.raises(zl.ZLinkError) as waited:
                    await _get(target, "other").timeout(0.5).submit()
                assert zl.ErrorKind.DEADLINE_EXCEEDED == waited.value.kind
            finally:
                go_on.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        moved_to = target.node_rid.value
        assert (0, moved_to) == (answers["stall"].value, answers["stall"].node)
        with trio.fail_after(20):
            assert 0 == (await _get(target, "other").submit()).value
            assert sends == (await _get(target, "w-16").submit()).value


@pytest.mark.spec("RELOC-77")
async def test_an_actor_turn_that_outlasts_the_deadline_keeps_the_actor_here(
    store_dsn: str,
) -> None:
    """An Actor's turn runs past the relocation's deadline with a send queued behind it: the
    relocation ends BLOCKED/DEADLINE_EXCEEDED at its deadline, and the Actor serves on the
    source, the queued send first."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        answers: dict[str, Count] = {}
        async with trio.open_nursery() as nursery:
            await _stalled(source, "w-7", nursery, answers)
            await source.route.send_to_actor("w-7", Add(10)).submit()
            with trio.fail_after(10):  # without the bound it waits for the turn: for ever
                result = await source.host.relocate(deadline=0.3)
            assert zl.RelocationOutcome.BLOCKED == result.outcome, result
            assert zl.RelocationReason.DEADLINE_EXCEEDED == result.reason, result
            go_on.set()
        assert (1, source.node_rid.value) == (answers["stall"].value, answers["stall"].node)
        with trio.fail_after(10):
            after = await _get(source, "w-7").submit()
        assert (11, source.node_rid.value) == (after.value, after.node)


@pytest.mark.spec("RELOC-63", "RELOC-18")
async def test_an_actor_whose_capture_fails_serves_on_where_it_was(store_dsn: str) -> None:
    """The Stubborn Actor's adapter cannot capture: the relocation ends blocked with
    STATE_INCOMPATIBLE, the Actor serves on the source with its state, and the source serves
    again."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.actors.create("s-1", "amove.Stubborn").submit()
        await source.route.send_to_actor("s-1", Add(4)).submit()
        result = await source.host.relocate(deadline=20.0)
        assert (zl.RelocationOutcome.BLOCKED, zl.RelocationReason.STATE_INCOMPATIBLE) == (
            result.outcome,
            result.reason,
        )
        assert zl.HostStatus.SERVING == source.host.status
        count = await _get(target, "s-1").submit()
        assert (4, source.node_rid.value) == (count.value, count.node)


@pytest.mark.spec("RELOC-60")
async def test_an_actors_early_sender_is_not_served_before_the_relay(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As for a Spot (test_spot_move.py): "before" waits at the seal; the target host sends
    "after" straight to the moved Actor once it took the commit, before the source relays
    "before"; "before" runs first."""
    global stalled, go_on
    stalled, go_on = trio.Event(), trio.Event()
    marks.clear()
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
        trio.open_nursery() as senders,
    ):
        await meet(source, target)
        after = target.route.send_to_actor("w-3", Mark("after"))
        send_early_after_commit(monkeypatch, target, senders, after.submit)
        await source.actors.create("w-3", "amove.Wallet").submit()
        results: list[zl.RelocationResult] = []
        async with trio.open_nursery() as nursery:

            async def stall() -> None:
                await source.route.request_to_actor("w-3", Stall(), reply_type=Count).submit()

            nursery.start_soon(stall)
            await stalled.wait()
            await source.route.send_to_actor("w-3", Mark("before")).submit()

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=20.0))

            nursery.start_soon(relocate)
            await _sealing(source, "w-3")
            go_on.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        await _get(target, "w-3").submit()  # queued behind "after" on the target
        moved_to = target.node_rid.value
        assert [("before", moved_to), ("after", moved_to)] == marks


@app.entry_spot
class Entry(zl.EntrySpot):
    async def on_joined_actor(self, actor: object) -> None:
        callbacks.append("entry.on_joined_actor")

    async def on_leave_actor(self, actor: object) -> None:
        callbacks.append("entry.on_leave_actor")


@pytest.mark.spec("RELOC-64", "RELOC-6", "SPOT-57", "SPOT-58")
async def test_a_user_spot_moves_with_its_member_actors(store_dsn: str) -> None:
    """A Room with two members (a Wallet with an adapter, a Visitor made anew) and a third Actor
    in the Entry Spot: after the source relocates, the Room answers from the target with its
    state, both members answer from the target as members of the Room (the Wallet with its
    count, a send queued at the seal run there), and the third from the target's Entry Spot;
    every generation is kept. No membership callback of any Spot runs for the move."""
    global stalled, go_on
    stalled, go_on = trio.Event(), trio.Event()
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        room = await source.spots.get_or_create("room", "amove.Room").submit()
        await source.route.send_to_spot("room", Add(9)).submit()
        created = {}
        for actor_id, type_name in (("m-1", "amove.Wallet"), ("m-2", "amove.Visitor")):
            created[actor_id] = await source.actors.create(actor_id, type_name).submit()
            await source.route.send_to_actor(actor_id, Join("room")).submit()
        await source.actors.create("e-1", "amove.Wallet").submit()
        await source.route.send_to_actor("m-1", Add(4)).submit()
        await source.route.send_to_actor("m-2", Add(2)).submit()
        before = await _get(source, "m-1").submit()
        assert ("room", 4) == (before.spot, before.value)
        called = list(callbacks)
        assert {"on_joined_actor", "entry.on_leave_actor"} <= set(called)  # the joins called them
        results: list[zl.RelocationResult] = []
        async with trio.open_nursery() as nursery:

            async def stall() -> None:
                await source.route.request_to_actor("m-1", Stall(), reply_type=Count).submit()

            nursery.start_soon(stall)
            await stalled.wait()
            await source.route.send_to_actor("m-1", Add(30)).submit()

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=20.0))

            nursery.start_soon(relocate)
            await _sealing(source, "m-1")
            go_on.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        moved_to = target.node_rid.value
        entry = target.host._tree.spots.entry.spot_id.value  # type: ignore[union-attr]
        at_room = await target.route.request_to_spot("room", Get(), reply_type=Count).submit()
        assert Count(9, moved_to, "room") == at_room
        assert Count(34, moved_to, "room") == await _get(source, "m-1").submit()
        assert Count(0, moved_to, "room") == await _get(target, "m-2").submit()
        assert Count(0, moved_to, entry) == await _get(target, "e-1").submit()
        assert room.spot_ref is not None
        spots = target.host._tree.spots  # type: ignore[union-attr]
        restored = spots.activations[zl.SpotId("room")]
        assert room.spot_ref.object_generation == restored.generation
        assert {"m-1", "m-2"} == {member.actor_id.value for member in restored.members}
        for actor_id, result in created.items():
            found = await target.actors.find(actor_id)
            assert found is not None
            assert result.actor_ref is not None
            assert (result.actor_ref.object_generation, target.node_rid) == (
                found.object_generation,
                found.node_rid,
            )
        assert not source.host._tree.actors.live  # type: ignore[union-attr]
        await trio.testing.wait_all_tasks_blocked()
        assert called == callbacks  # the move called none


@pytest.mark.spec("RELOC-25", "RELOC-26", "RELOC-28", "RELOC-30", "SPOT-58")
async def test_a_per_actor_spot_moves_as_a_shell_then_its_actors_one_by_one(
    store_dsn: str,
) -> None:
    """A PER_ACTOR Hall with two member Wallets: after the source relocates, the Hall answers
    from the target as a fresh shell (its own count is not carried) with its generation, and each
    Wallet answers from the target as a member of the Hall, with its count and generation; no
    membership callback runs for the move."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        hall = await source.spots.get_or_create("hall", "amove.Hall").submit()
        await source.route.send_to_spot("hall", Add(8)).submit()
        wallets = {}
        for actor_id, amount in (("p-1", 3), ("p-2", 5)):
            wallets[actor_id] = await source.actors.create(actor_id, "amove.Wallet").submit()
            await source.route.send_to_actor(actor_id, Join("hall")).submit()
            await source.route.send_to_actor(actor_id, Add(amount)).submit()
        assert "hall" == (await _get(source, "p-1").submit()).spot
        await trio.testing.wait_all_tasks_blocked()  # the joins' on_leave_actor run unawaited
        called = list(callbacks)
        arrivals = target.host._tree.inbound.arrivals  # type: ignore[union-attr]
        commit = arrivals.commit
        commits: list[tuple[str, tuple[tuple[str, int], ...]]] = []

        def record_commits(source_rid: Any, unit: Any, message: Any) -> Any:
            commits.append((unit.value, message.members))
            return commit(source_rid, unit, message)

        arrivals.commit = record_commits
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        moved_to = target.node_rid.value
        at_hall = await source.route.request_to_spot("hall", Get(), reply_type=Count).submit()
        assert Count(0, moved_to, "hall") == at_hall  # a fresh shell: nothing of it carried
        assert Count(3, moved_to, "hall") == await _get(source, "p-1").submit()
        assert Count(5, moved_to, "hall") == await _get(target, "p-2").submit()
        spots = target.host._tree.spots  # type: ignore[union-attr]
        shell = spots.activations[zl.SpotId("hall")]
        assert hall.spot_ref is not None
        assert hall.spot_ref.object_generation == shell.generation
        assert {"p-1", "p-2"} == {member.actor_id.value for member in shell.members}
        for actor_id, created in wallets.items():
            found = await target.actors.find(actor_id)
            assert found is not None
            assert created.actor_ref is not None
            assert created.actor_ref.object_generation == found.object_generation
        await trio.testing.wait_all_tasks_blocked()
        assert called == callbacks
        # The shell's record first, alone; then each Actor's, each in a commit of its own.
        assert ("hall", ()) == commits[0]
        assert {("p-1", ()), ("p-2", ())} == set(commits[1:])


@pytest.mark.spec("RELOC-27")
async def test_what_moves_here_is_not_seen_by_lookups_before_its_commit(store_dsn: str) -> None:
    """While the source holds each commit back, the target already holds the restored unit
    (the shell of a PER_ACTOR Hall, then a Wallet), but its lookups do not see it: get_or_create
    of the Hall waits, find of the Wallet names the source; after each commit they name the
    target."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.spots.get_or_create("hall-2", "amove.Hall").submit()
        await source.actors.create("w-9", "amove.Wallet").submit()
        authority = source.host._node.authority
        hand_over = authority.hand_over
        held = {"hall-2": trio.Event(), "w-9": trio.Event()}
        go = {"hall-2": trio.Event(), "w-9": trio.Event()}

        async def hold_commits(claims: Any, *args: Any, **kwargs: Any) -> Any:
            unit = claims[0].spot_id.value
            held[unit].set()
            await go[unit].wait()
            return await hand_over(claims, *args, **kwargs)

        authority.hand_over = hold_commits
        looked_up: list[zl.SpotCreateResult] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(source.host.relocate)

            async def look_up() -> None:
                looked_up.append(await target.spots.get_or_create("hall-2", "amove.Hall").submit())

            await held["hall-2"].wait()
            spots = target.host._tree.spots  # type: ignore[union-attr]
            assert zl.SpotId("hall-2") in spots.activations  # restored here, sealed
            nursery.start_soon(look_up)
            await trio.testing.wait_all_tasks_blocked()
            assert not looked_up  # not seen before its commit
            go["hall-2"].set()
            await held["w-9"].wait()
            actors = target.host._tree.actors  # type: ignore[union-attr]
            assert zl.ActorId("w-9") in actors.actors  # restored here, sealed
            before = await target.actors.find("w-9")
            assert before is not None
            assert source.node_rid == before.node_rid  # the record still names the source
            go["w-9"].set()
        spot_ref = looked_up[0].spot_ref
        assert spot_ref is not None
        assert target.node_rid == spot_ref.node_rid
        after = await target.actors.find("w-9")
        assert after is not None
        assert target.node_rid == after.node_rid


@pytest.mark.spec("TIMER-18")
async def test_a_per_actor_spots_own_timer_stays_behind(store_dsn: str) -> None:
    """A PER_ACTOR Hall with a timer of its own: after the move the shell on the target has no
    timer (Spot-level timers of a PER_ACTOR Spot do not move)."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.spots.get_or_create("hall-3", "amove.Hall").submit()
        await source.route.send_to_spot("hall-3", Stall()).submit()
        await source.route.request_to_spot("hall-3", Get(), reply_type=Count).submit()
        here = source.host._tree.spots.activations[zl.SpotId("hall-3")]  # type: ignore[union-attr]
        assert ["tick"] == [state.name for state in here.timers.states(trio.current_time())]
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        at = await source.route.request_to_spot("hall-3", Get(), reply_type=Count).submit()
        assert target.node_rid.value == at.node
        shell = target.host._tree.spots.activations[zl.SpotId("hall-3")]  # type: ignore[union-attr]
        assert () == tuple(shell.timers.states(trio.current_time()))


@pytest.mark.spec("RELOC-44")
async def test_a_relocated_host_finds_what_lives_elsewhere(store_dsn: str) -> None:
    """A host that has relocated places nothing new, but its get_or_create of a Spot or Actor
    that lives on another host finds it there (EXISTING, with that host's ref), and an id that
    lives nowhere is refused UNAVAILABLE."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as relocated,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=relocated.mesh) as other,
    ):
        await meet(relocated, other)
        room = await other.spots.get_or_create("room-e", "amove.Room").submit()
        wallet = await other.actors.create("w-e", "amove.Wallet").submit()
        result = await relocated.host.relocate(deadline=5.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        found = await relocated.spots.get_or_create("room-e", "amove.Room").submit()
        assert (zl.SpotCreateStatus.EXISTING, room.spot_ref) == (found.status, found.spot_ref)
        actor = await relocated.actors.get_or_create("w-e", "amove.Wallet").submit()
        assert (zl.ActorCreateStatus.EXISTING, wallet.actor_ref) == (actor.status, actor.actor_ref)
        for attempt in (
            relocated.spots.get_or_create("room-new", "amove.Room").submit(),
            relocated.actors.get_or_create("w-new", "amove.Wallet").submit(),
        ):
            with pytest.raises(zl.ZLinkError) as refused:
                await attempt
            assert zl.ErrorKind.UNAVAILABLE == refused.value.kind


@pytest.mark.spec("SHUT-3.1")
@pytest.mark.parametrize("intent", ["relocate_and_shutdown", "shutdown"])
async def test_only_relocate_then_shutdown_moves_what_the_host_held(
    store_dsn: str, intent: str
) -> None:
    """A host holding a Room with a member Wallet and a Wallet of the Entry Spot, each with a
    count: relocate-then-shutdown moves all three to the other host with their counts before it
    stops; an immediate shutdown moves nothing, so afterwards none of them exists anywhere."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as target,
    ):
        async with open_test_host(app, dsn=store_dsn, stores=stores, mesh=target.mesh) as source:
            await meet(source, target)
            await source.spots.get_or_create("s-room", "amove.Room").submit()
            await source.route.send_to_spot("s-room", Add(3)).submit()
            for actor_id in ("s-member", "s-entry"):
                await source.actors.create(actor_id, "amove.Wallet").submit()
                await source.route.send_to_actor(actor_id, Add(5)).submit()
            await source.route.send_to_actor("s-member", Join("s-room")).submit()
            assert "s-room" == (await _get(source, "s-member").submit()).spot
            if intent == "shutdown":
                await source.host.shutdown()
            else:
                result = await source.host.relocate_and_shutdown(deadline=20.0)
                assert zl.RelocationOutcome.RELOCATED == result.outcome, result
            assert zl.HostStatus.STOPPED == source.host.status
        here = target.node_rid.value
        room = target.route.request_to_spot("s-room", Get(), reply_type=Count)
        if intent == "shutdown":
            for actor_id in ("s-member", "s-entry"):
                assert await target.actors.find(actor_id) is None
            with pytest.raises(zl.ZLinkError) as missing:
                await room.submit()
            assert zl.ErrorKind.NOT_FOUND == missing.value.kind
        else:
            assert Count(3, here, "s-room") == await room.submit()
            assert Count(5, here, "s-room") == await _get(target, "s-member").submit()
            entry = target.host._tree.spots.entry.spot_id.value  # type: ignore[union-attr]
            assert Count(5, here, entry) == await _get(target, "s-entry").submit()


@pytest.mark.spec("SHUT-4.11")
async def test_what_a_host_that_shut_down_held_can_be_made_again_elsewhere(
    store_dsn: str,
) -> None:
    """After an immediate shutdown of the host holding a Room and a Wallet, the other host
    creates both again under their ids: the Room with a newer generation, the Wallet anew."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as other,
    ):
        async with open_test_host(app, dsn=store_dsn, stores=stores, mesh=other.mesh) as host:
            await meet(host, other)
            old = await host.spots.get_or_create("g-room", "amove.Room").submit()
            await host.actors.create("g-wallet", "amove.Wallet").submit()
            await host.route.send_to_actor("g-wallet", Add(5)).submit()
            await host.host.shutdown()
        authority = other.host._node.authority
        assert await authority.read(zl.SpotId("g-room")) is None  # released, not left stale
        assert await authority.read(zl.ActorId("g-wallet")) is None
        room = await other.spots.get_or_create("g-room", "amove.Room").submit()
        assert room.spot_ref is not None
        assert old.spot_ref is not None
        assert other.node_rid == room.spot_ref.node_rid
        assert room.spot_ref.object_generation.value > old.spot_ref.object_generation.value
        created = await other.actors.create("g-wallet", "amove.Wallet").submit()
        assert created.actor_ref is not None
        assert other.node_rid == created.actor_ref.node_rid
        entry = other.host._tree.spots.entry.spot_id.value  # type: ignore[union-attr]
        assert Count(0, other.node_rid.value, entry) == await _get(other, "g-wallet").submit()


@pytest.mark.spec("RELOC-62")
async def test_a_seal_that_begins_while_the_lane_takes_a_wake_up_still_holds(
    store_dsn: str,
) -> None:
    """The seal of a move begins just after an idle Actor's lane was handed a wake-up (no
    message): the lane goes back to wait in its mailbox, and the seal holds at once instead of
    waiting for a turn that never comes (the relocation bench's hang)."""
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.actors.create("w-9", "amove.Wallet").submit()
        await host.route.send_to_actor("w-9", Add(1)).submit()
        await host.wait_quiet()
        actor = host.host._tree.actors.actors[zl.ActorId("w-9")]  # type: ignore[union-attr]
        assert actor.mailbox.try_put(WAKE, "")  # the lane has it in hand, not a message
        with trio.fail_after(5):
            sealed = await seal_actor(actor)
        sealed.abort()  # it serves on
        assert 1 == (await _get(host, "w-9").submit()).value
