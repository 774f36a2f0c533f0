"""A Spot moves to another host when its host relocates (specs/relocation.md RELOC-47..RELOC-50;
host/moving.py and routing/arrivals.py): its state through its adapter, its generation, and the
messages that waited at the seal, answered from the target."""

from __future__ import annotations

import logging
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.early_sender import send_early_after_commit
from tests.contract.peers import meet
from tests.members import NoMembers
from zlink_trio._integration.store import Applied, Batch, Found
from zlink_trio._runtime.declarations.system import RelocateAnswer, RelocateCommit
from zlink_trio._runtime.host import tree
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio.ids import StableTypeName
from zlink_trio.testing import TestHost, open_test_host, open_test_stores

app = zl.Application()


@app.message("move.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("move.Get")
@attrs.frozen
class Get:
    pass


@app.message("move.Count")
@attrs.frozen
class Count:
    value: int
    node: str


@app.message("move.Mark")
@attrs.frozen
class Mark:
    label: str


marks: list[tuple[str, str]] = []
"""(label, node) of every Mark handled, in the order handled."""


@app.message("move.Stall")
@attrs.frozen
class Stall:
    pass


stalled = trio.Event()
go_on = trio.Event()


class CounterState(zl.SpotRelocationAdapter["Counter"]):
    async def capture(self, target: Counter) -> bytes:
        return target.value.to_bytes(8, "big")

    async def restore(self, target: Counter, payload: bytes) -> None:
        target.value = int.from_bytes(payload, "big")


class Tally:
    """What every Spot of these tests does: keep a count, and say it with where it runs."""

    context: Any

    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Count:
        return Count(self.value, self.context.ref.node_rid.value)

    @zl.packet_handler(Mark)
    async def mark(self, msg: Mark) -> None:
        marks.append((msg.label, self.context.ref.node_rid.value))


@app.instance_spot("move.Counter", relocation=zl.preserve_state_with(CounterState))
class Counter(Tally, zl.InstanceSpot):
    @zl.request_handler(Stall)
    async def stall(self, req: Stall) -> Count:
        stalled.set()
        await go_on.wait()
        return Count(self.value, self.context.ref.node_rid.value)


class Broken(zl.SpotRelocationAdapter["Stubborn"]):
    async def capture(self, target: Stubborn) -> bytes:
        raise RuntimeError("this state cannot be written down")

    async def restore(self, target: Stubborn, payload: bytes) -> None:
        raise AssertionError("never captured, so never restored")


@app.user_spot("move.Stubborn", relocation=zl.preserve_state_with(Broken))
class Stubborn(Tally, NoMembers):
    pass


@app.user_spot("move.Room", relocation=zl.recreate_on_relocation())
class Room(Tally, NoMembers):
    pass


def _get(host: TestHost, spot_id: str, instance: bool = True) -> zl.SpotRequestCall:  # type: ignore[name-defined]
    call = host.route.request_to_spot(spot_id, Get(), reply_type=Count)
    return call.instance_spot("move.Counter") if instance else call


async def _sealing(host: TestHost, spot_id: str) -> None:
    """Return once ``host``'s relocation began to seal Spot ``spot_id`` (its hold is set): the
    relocation first waits for its node record to land (RELOC-72), so a test cannot take
    "every task blocked" for "the seal began"."""
    activation = host.host._tree.spots.activations[zl.SpotId(spot_id)]  # type: ignore[union-attr]
    with trio.fail_after(10):
        while activation.hold is None:  # noqa: ASYNC110  # the runtime has no event for a seal
            await trio.sleep(0.001)


async def _stalled(
    source: TestHost, spot_id: str, nursery: trio.Nursery, answers: dict[str, Count]
) -> None:
    """Counter ``spot_id`` (count 1) runs a turn that waits for ``go_on`` (its answer goes to
    ``answers["stall"]``), with ``Add(10)`` queued behind it."""
    global stalled, go_on
    stalled, go_on = trio.Event(), trio.Event()
    counter = "move.Counter"
    await source.route.send_to_spot(spot_id, Add(1)).instance_spot(counter).submit()

    async def stall() -> None:
        call = source.route.request_to_spot(spot_id, Stall(), reply_type=Count)
        answers["stall"] = await call.instance_spot(counter).submit()

    nursery.start_soon(stall)
    await stalled.wait()
    await source.route.send_to_spot(spot_id, Add(10)).instance_spot(counter).submit()


@pytest.mark.spec("RELOC-47", "RELOC-7", "RELOC-23", "RELOC-13", "DEC-6")
async def test_a_spot_moves_with_its_state_and_generation(store_dsn: str) -> None:
    """An Instance Spot with an adapter and a User Spot made anew: after the source relocates,
    both answer from the target, the first with its count, the second from a fresh instance,
    each with the generation it had; the source is RELOCATED and holds neither."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(
            app, dsn=store_dsn, stores=stores, relocation_payload_chunk_limit_bytes=3
        ) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        sent: list[str] = []
        source.host._node.set_trace(sent.append)
        for amount in (5, 6, 7):
            await (
                source.route.send_to_spot("c-1", Add(amount)).instance_spot("move.Counter").submit()
            )
        before = await _get(source, "c-1").submit()
        assert Count(18, source.node_rid.value) == before
        room = await source.spots.get_or_create("room", "move.Room").submit()
        await source.route.send_to_spot("room", Add(3)).submit()
        counter_generation = source.host._tree.spots.activations[zl.SpotId("c-1")].generation
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        assert zl.HostStatus.RELOCATED == source.host.status
        # The counter's 8 bytes went in chunks of at most 3 bytes.
        assert 3 == sum("request zlink.RelocateChunk to c-1" in line for line in sent)
        assert {} == {
            k: v
            for k, v in source.host._tree.spots.activations.items()
            if v.kind is not zl.SpotKind.ENTRY
        }
        assert Count(18, target.node_rid.value) == await _get(source, "c-1").submit()
        assert Count(18, target.node_rid.value) == await _get(target, "c-1").submit()
        moved = target.host._tree.spots.activations[zl.SpotId("c-1")]
        assert counter_generation == moved.generation
        answer = await target.route.request_to_spot("room", Get(), reply_type=Count).submit()
        assert Count(0, target.node_rid.value) == answer  # made anew: no state moved
        assert (
            room.spot_ref.object_generation
            == target.host._tree.spots.activations[zl.SpotId("room")].generation
        )


@pytest.mark.spec("RELOC-48")
async def test_what_waited_at_the_seal_is_answered_from_the_target_in_order(
    store_dsn: str,
) -> None:
    """A turn runs when the relocation starts, with a send and a request queued behind it: the
    turn ends on the source, then the queued send and request run on the target, in order, and
    the request's caller gets the target's answer."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        answers: dict[str, Count] = {}
        async with trio.open_nursery() as nursery:

            async def queued() -> None:
                answers["queued"] = await _get(source, "c-2").submit()

            await _stalled(source, "c-2", nursery, answers)
            nursery.start_soon(queued)
            await trio.testing.wait_all_tasks_blocked()
            results: list[zl.RelocationResult] = []

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=20.0))

            nursery.start_soon(relocate)
            await _sealing(source, "c-2")
            go_on.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        assert Count(1, source.node_rid.value) == answers["stall"]
        assert Count(11, target.node_rid.value) == answers["queued"]


@pytest.mark.spec("RELOC-77", "RELOC-20")
async def test_a_turn_that_outlasts_the_deadline_keeps_the_spot_serving_here(
    store_dsn: str,
) -> None:
    """A turn runs past the relocation's deadline, with a send queued behind it: the relocation
    ends BLOCKED/DEADLINE_EXCEEDED at its deadline, not when the turn ends, and the Spot serves
    on the source with nothing lost, the queued send first."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        answers: dict[str, Count] = {}
        async with trio.open_nursery() as nursery:
            await _stalled(source, "c-9", nursery, answers)
            with trio.fail_after(10):  # without the bound it waits for the turn: for ever
                result = await source.host.relocate(deadline=0.3)
            assert zl.RelocationOutcome.BLOCKED == result.outcome, result
            assert zl.RelocationReason.DEADLINE_EXCEEDED == result.reason, result
            assert zl.HostStatus.SERVING == source.host.status
            go_on.set()
        assert Count(1, source.node_rid.value) == answers["stall"]
        with trio.fail_after(10):
            assert Count(11, source.node_rid.value) == await _get(source, "c-9").submit()


@pytest.mark.spec("SHUT-3.10", "RELOC-18")
async def test_a_move_that_fails_after_another_committed_keeps_both_where_they_are(
    store_dsn: str,
) -> None:
    """Spots move in id order: "a-room" moves, then "b-stubborn"'s adapter fails to capture. The
    operation ends blocked; "a-room" stays on the target, "b-stubborn" serves on the source with
    its state, and the source serves again (it places new Spots)."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.spots.get_or_create("a-room", "move.Room").submit()
        await source.spots.get_or_create("b-stubborn", "move.Stubborn").submit()
        await source.route.send_to_spot("b-stubborn", Add(4)).submit()
        result = await source.host.relocate(deadline=20.0)
        assert (zl.RelocationOutcome.BLOCKED, zl.RelocationReason.STATE_INCOMPATIBLE) == (
            result.outcome,
            result.reason,
        )
        assert zl.HostStatus.SERVING == source.host.status
        where = await source.route.request_to_spot("a-room", Get(), reply_type=Count).submit()
        assert target.node_rid.value == where.node
        stays = await target.route.request_to_spot("b-stubborn", Get(), reply_type=Count).submit()
        assert Count(4, source.node_rid.value) == stays
        await source.spots.get_or_create("c-new", "move.Room").submit()


@pytest.mark.spec("RELOC-49")
async def test_what_reaches_the_old_owner_after_the_move_is_relayed(store_dsn: str) -> None:
    """A third host whose route still names the source sends and asks after the move: the send
    is not lost and the request is answered, both by the Spot on the target."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as caller,
    ):
        await meet(source, target)
        await meet(caller, source)
        await source.route.send_to_spot("c-3", Add(2)).instance_spot("move.Counter").submit()
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        # The caller's route to the Spot still names the source, as a cache that has not heard
        # of the move yet would: it sends there.
        remote = caller.host._tree.remote
        assert remote is not None
        stale = Owner(source.node_rid)
        spot = zl.SpotId("c-3")
        kind = zl.StableTypeName("move.Counter")
        await remote.send(stale, spot, Add(40), {}, kind)
        await caller.wait_quiet()  # the send has reached the Spot, wherever it is
        deadline = caller.host._node.clock.now() + 10
        answer = await remote.request(stale, spot, Get(), Count, {}, kind, deadline)
        assert Count(42, target.node_rid.value) == answer


class LostAnswers:
    """The Location Store with one injected fault: the write that hands ``key`` over commits
    but its answer is lost, and the next ``reads`` reads of ``key`` fail too (a store outage)."""

    def __init__(self, location: object, key: str, reads: int) -> None:
        self._location = location
        self._key = key
        self._reads = reads
        self.lost = False
        self.armed = False
        """Set by the test once only the move's own write of ``key`` can follow."""

    def __getattr__(self, name: str) -> object:
        return getattr(self._location, name)

    async def write(self, batch: Batch) -> object:
        written = await self._location.write(batch)  # type: ignore[attr-defined]
        hands_over = any(m.key == self._key for m in batch.mutations) and batch.conditions
        if hands_over and self.armed and not self.lost and isinstance(written, Applied):
            self.lost = True
            raise zl.ZLinkError(zl.ErrorKind.UNAVAILABLE, "injected: the answer was lost")
        return written

    async def read(self, key: str) -> object:
        if key == self._key and self.lost and self._reads > 0:
            self._reads -= 1
            raise zl.ZLinkError(zl.ErrorKind.UNAVAILABLE, "injected: the store is down")
        return await self._location.read(key)  # type: ignore[attr-defined]


@pytest.mark.spec("RELOC-50")
async def test_a_commit_whose_answer_is_lost_is_settled_by_reading_until_known(
    store_dsn: str,
) -> None:
    """The hand-over commits, its answer is lost and the store then fails three reads: the
    source reads until it knows the record names the target, and the move completes there
    (the source does not serve the Spot again while the store names the target)."""
    async with open_test_stores(store_dsn) as real:
        mesh = f"move-{uuid.uuid4().hex[:12]}"
        faulty = LostAnswers(real.location, f"m/{mesh}/spot/c-4", reads=3)
        async with (
            open_test_host(
                app, dsn=store_dsn, stores=attrs.evolve(real, location=faulty), mesh=mesh
            ) as source,
            open_test_host(app, dsn=store_dsn, stores=real, mesh=mesh) as target,
        ):
            await meet(source, target)
            await source.route.send_to_spot("c-4", Add(9)).instance_spot("move.Counter").submit()
            assert Count(9, source.node_rid.value) == await _get(source, "c-4").submit()
            faulty.armed = True  # the Spot is Ready: the next write of its record is the move's
            result = await source.host.relocate(deadline=20.0)
            assert faulty.lost
            assert zl.RelocationOutcome.RELOCATED == result.outcome, result
            assert Count(9, target.node_rid.value) == await _get(target, "c-4").submit()
            assert zl.SpotId("c-4") not in source.host._tree.spots.activations


@pytest.mark.spec("RELOC-60")
async def test_a_sender_that_learns_the_new_owner_early_is_not_served_before_the_relay(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ "before" waits on the source at the seal. Once the target's reader took the commit, the
    target host sends "after" straight to the Spot there, and the source relays "before" only
    after "after" was admitted: the target runs "before" first."""
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
        after = target.route.send_to_spot("c-3", Mark("after"))
        send_early_after_commit(monkeypatch, target, senders, after.submit)
        call = source.route.send_to_spot("c-3", Mark("first")).instance_spot("move.Counter")
        await call.submit()
        results: list[zl.RelocationResult] = []
        async with trio.open_nursery() as nursery:

            async def stall() -> None:
                call = source.route.request_to_spot("c-3", Stall(), reply_type=Count)
                await call.instance_spot("move.Counter").submit()

            nursery.start_soon(stall)
            await stalled.wait()
            await source.route.send_to_spot("c-3", Mark("before")).submit()

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=20.0))

            nursery.start_soon(relocate)
            await _sealing(source, "c-3")
            go_on.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        # Queued behind "after" on the target: answered once all three ran.
        await target.route.request_to_spot("c-3", Get(), reply_type=Count).submit()
        moved_to = target.node_rid.value
        assert [
            ("first", source.node_rid.value),
            ("before", moved_to),
            ("after", moved_to),
        ] == marks


@pytest.mark.spec("RELOC-73", "RELOC-60")
async def test_the_commit_the_relay_and_the_open_travel_together_and_are_taken_in_order(
    store_dsn: str,
) -> None:
    """ "before" waits on the source at the seal; "after" is sent on the target while the unit
    waits there for its commit. The target's reader holds back the move's messages from the
    commit on and hands them over together once ``RelocateOpen`` has come: that happens only if
    the source sent all three without waiting for the commit's answer, and "before" runs first
    only if the reader took the commit before the relay behind it."""
    global stalled, go_on
    stalled, go_on = trio.Event(), trio.Event()
    marks.clear()
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores, request_timeout=30) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        names = []
        reader = target.host._tree.remote.mesh._application_inbound  # type: ignore[union-attr]
        deliver = reader._deliver
        held: list[tuple[Any, Any]] = []

        async def hold_from_the_commit_to_the_open(origin: Any, message: Any) -> None:
            name = message.message_type.value
            if name == "zlink.RelocateCommit" or held:
                names.append(name)
                held.append((origin, message))
                if name != "zlink.RelocateOpen":
                    return
                for one in held:  # back to back, as one read of the socket would
                    await deliver(*one)
                held.clear()
                return
            await deliver(origin, message)

        reader._deliver = hold_from_the_commit_to_the_open
        authority = source.host._node.authority
        hand_over = authority.hand_over

        async def after_first(*args: Any, **kwargs: Any) -> Any:
            target.host._messaging.reroutes._previous.clear()  # type: ignore[attr-defined]
            await target.route.send_to_spot("c-8", Mark("after")).submit()
            return await hand_over(*args, **kwargs)

        authority.hand_over = after_first
        await source.route.send_to_spot("c-8", Mark("first")).instance_spot("move.Counter").submit()
        results: list[zl.RelocationResult] = []
        with trio.fail_after(10):  # a source that waited for the commit's answer: 30 s
            async with trio.open_nursery() as nursery:

                async def stall() -> None:
                    call = source.route.request_to_spot("c-8", Stall(), reply_type=Count)
                    await call.instance_spot("move.Counter").submit()

                nursery.start_soon(stall)
                await stalled.wait()
                await source.route.send_to_spot("c-8", Mark("before")).submit()

                async def relocate() -> None:
                    results.append(await source.host.relocate(deadline=10.0))

                nursery.start_soon(relocate)
                await _sealing(source, "c-8")
                go_on.set()
            assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
            await target.route.request_to_spot("c-8", Get(), reply_type=Count).submit()
        assert ["zlink.RelocateCommit", "move.Mark", "zlink.RelocateOpen"] == names
        moved_to = target.node_rid.value
        assert [
            ("first", source.node_rid.value),
            ("before", moved_to),
            ("after", moved_to),
        ] == marks


@pytest.mark.spec("RELOC-73")
async def test_a_commit_with_no_move_of_its_unit_under_way_is_dropped(
    store_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The commit is one way: a ``RelocateCommit`` that reaches a host where its unit is not
    moving in is dropped with an error that names it, never handed on as a send to a Spot."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await target.route.send_to_spot("c-9", Add(1)).instance_spot("move.Counter").submit()
        remote = source.host._tree.remote
        assert remote is not None
        await remote.tell(Owner(target.node_rid), zl.SpotId("c-9"), RelocateCommit(1))
        sent = remote.mesh.traffic.sent[target.node_rid]  # type: ignore[union-attr]
        traffic = target.host._tree.remote.mesh.traffic  # type: ignore[union-attr]
        with trio.fail_after(10):
            while traffic.received[source.node_rid] < sent:  # noqa: ASYNC110  # libzmq's thread
                await trio.sleep(0.01)
        await target.wait_quiet()
        count = await target.route.request_to_spot("c-9", Get(), reply_type=Count).submit()
        assert 1 == count.value
    dropped = [r for r in caplog.records if "no move of it is under way here" in r.getMessage()]
    assert [logging.ERROR] == [record.levelno for record in dropped]
    assert "zlink.RelocateCommit" in dropped[0].getMessage()
    assert not [r for r in caplog.records if "was not admitted" in r.getMessage()]


@pytest.mark.spec("RELOC-60")
async def test_a_unit_whose_source_never_says_open_opens_after_the_request_timeout(
    store_dsn: str,
) -> None:
    """The target never takes the source's ``RelocateOpen``: the moved Spot still serves there
    once ``request_timeout`` has passed since the commit."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=source.mesh, request_timeout=0.5
        ) as target,
    ):
        await meet(source, target)
        arrivals = target.host._tree.inbound.arrivals  # type: ignore[union-attr]
        arrivals.open = lambda source_rid, spot: RelocateAnswer(True)  # the word is lost
        await source.route.send_to_spot("c-4", Add(2)).instance_spot("move.Counter").submit()
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        with trio.fail_after(5):
            call = target.route.request_to_spot("c-4", Get(), reply_type=Count).timeout(4)
            count = await call.submit()
        assert Count(2, target.node_rid.value) == count


@pytest.mark.spec("DEC-25")
async def test_a_move_commits_although_the_sources_node_record_was_renewed_meanwhile(
    store_dsn: str,
) -> None:
    """The source renews its node record between the move's start and its commit (as its lease
    does every lease / 3): the commit, conditional on the moving record only, still applies."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.route.send_to_spot("c-5", Add(3)).instance_spot("move.Counter").submit()
        authority = source.host._node.authority
        hand_over = authority.hand_over
        lease = source.host._tree.membership._own  # type: ignore[union-attr]
        renewed: list[int | None] = []

        async def renew_then_hand_over(*args: Any, **kwargs: Any) -> Any:
            before = lease._version
            await lease.publish(first=False)
            renewed.append(before if lease._version != before else None)
            return await hand_over(*args, **kwargs)

        authority.hand_over = renew_then_hand_over
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        assert renewed
        assert None not in renewed  # the renewal did change the node record's version
        count = await target.route.request_to_spot("c-5", Get(), reply_type=Count).submit()
        assert Count(3, target.node_rid.value) == count


@pytest.mark.spec("RELOC-66")
async def test_a_target_that_never_hears_the_commit_reads_it_from_the_store(
    store_dsn: str,
) -> None:
    """The target takes the source's ``RelocateCommit`` without acting on it (the word lost):
    it reads the record, which names it, commits by itself and serves the Spot."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=source.mesh, request_timeout=0.5
        ) as target,
    ):
        await meet(source, target)
        arrivals = target.host._tree.inbound.arrivals  # type: ignore[union-attr]

        def lose_the_commit(source_rid: Any, spot: Any, message: Any) -> Any:
            return RelocateAnswer(True)

        arrivals.commit = lose_the_commit
        await source.route.send_to_spot("c-6", Add(6)).instance_spot("move.Counter").submit()
        result = await source.host.relocate(deadline=20.0)
        assert zl.RelocationOutcome.RELOCATED == result.outcome, result
        with trio.fail_after(10):
            call = target.route.request_to_spot("c-6", Get(), reply_type=Count).timeout(8)
            count = await call.submit()
        assert Count(6, target.node_rid.value) == count
        activation = target.host._tree.spots.activations[zl.SpotId("c-6")]  # type: ignore[union-attr]
        assert activation.claim is not None
        assert target.node_rid == activation.claim.record.owner


@pytest.mark.spec("RELOC-66")
async def test_a_target_drops_a_restored_unit_whose_source_is_gone(store_dsn: str) -> None:
    """The source restores the Spot on the target, then never commits and shuts down: the target
    reads that the record's owner run is gone and drops the unit; a send and a request the
    target's own callers made meanwhile (they waited in the admitted unit) go on to a new
    incarnation."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(
            app, dsn=store_dsn, stores=stores, mesh=f"m-{uuid.uuid4().hex[:8]}"
        ) as target,
    ):
        async with open_test_host(app, dsn=store_dsn, stores=stores, mesh=target.mesh) as source:
            await meet(source, target)
            await meet(target, source)
            await source.route.send_to_spot("c-7", Add(7)).instance_spot("move.Counter").submit()
            authority = source.host._node.authority
            restored = trio.Event()

            async def never_commit(*args: Any, **kwargs: Any) -> Any:
                restored.set()
                await trio.sleep_forever()

            authority.hand_over = never_commit
            results: list[zl.RelocationResult] = []
            async with trio.open_nursery() as nursery:

                async def relocate() -> None:
                    results.append(await source.host.relocate(deadline=30.0))

                nursery.start_soon(relocate)
                await restored.wait()
                spots = target.host._tree.spots  # type: ignore[union-attr]
                admitted = spots.activations[zl.SpotId("c-7")]  # admitted, sealed
                # Sent here meanwhile: it waits in the admitted unit, then goes on.
                await (
                    target.route.send_to_spot("c-7", Add(5)).instance_spot("move.Counter").submit()
                )

                async def asked_meanwhile() -> None:
                    call = target.route.request_to_spot("c-7", Get(), reply_type=Count)
                    answers.append(await call.instance_spot("move.Counter").timeout(20).submit())

                answers: list[Count] = []
                nursery.start_soon(asked_meanwhile)
                await trio.testing.wait_all_tasks_blocked()
                await source.host.shutdown()
        assert zl.RelocationReason.SHUTDOWN_REQUESTED == results[0].reason
        with trio.fail_after(15):
            await admitted.closed.wait()
        # What waited went on as the target's own calls, to a new incarnation.
        assert [Count(5, target.node_rid.value)] == answers


async def _relocate_then_shutdown(host: zl.Host) -> None:
    """What the demo's rolling update does: ``relocate()``, then ``shutdown()`` on its own."""
    assert (await host.relocate()).relocated
    await host.shutdown()


@pytest.mark.spec("RELOC-69")
@pytest.mark.parametrize("stop", [zl.Host.relocate_and_shutdown, _relocate_then_shutdown])
async def test_relocate_and_shutdown_relays_stale_routes_before_it_stops(
    store_dsn: str, stop: Callable[[zl.Host], Awaitable[object]]
) -> None:
    """The source relocates and shuts down (in one call, or ``shutdown()`` right after
    ``relocate()``); right after it is RELOCATED, a host whose route still names the source
    sends to the moved Spot there. The source relays it before it stops: the Spot's new owner
    (either peer) handles it."""
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as target,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=target.mesh) as caller,
    ):
        async with open_test_host(app, dsn=store_dsn, stores=stores, mesh=target.mesh) as source:
            await meet(source, target)
            await meet(caller, source)
            await source.route.send_to_spot("c-9", Add(1)).instance_spot("move.Counter").submit()
            statuses = source.host.observe()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(stop, source.host)
                async for status in statuses:
                    if status is zl.HostStatus.RELOCATED:
                        break
                remote = caller.host._tree.remote  # type: ignore[union-attr]
                assert remote is not None
                stale = Owner(source.node_rid)
                counter = StableTypeName("move.Counter")
                await remote.send(stale, zl.SpotId("c-9"), Add(10), {}, counter)
        # The source chose one of its two serving peers as the target.
        count = await target.route.request_to_spot("c-9", Get(), reply_type=Count).submit()
        assert 11 == count.value
        assert count.node in {target.node_rid.value, caller.node_rid.value}


@pytest.mark.spec("RELOC-69")
async def test_a_relocated_hosts_shutdown_waits_for_the_answer_of_a_request_it_relays(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A stale route's request is relayed by the relocated source and stalls at the Spot's new
    owner; the source's shutdown starts, and its quiet period (shortened here) passes. The
    source stays up until the relayed request has its answer, so the caller gets the Spot's
    answer and not ``UNAVAILABLE`` for a shutdown that is not the Spot's."""
    global stalled, go_on
    stalled, go_on = trio.Event(), trio.Event()
    monkeypatch.setattr(tree, "STALE_ROUTES_QUIET", 0.05)
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as target,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=target.mesh) as caller,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=target.mesh) as source,
    ):
        await meet(source, target)
        await meet(caller, source)
        await source.route.send_to_spot("c-7", Add(1)).instance_spot("move.Counter").submit()
        assert (await source.host.relocate()).relocated
        remote = caller.host._tree.remote  # type: ignore[union-attr]
        assert remote is not None
        answers: list[object] = []
        stopped = trio.Event()

        async def ask_the_stale_route() -> None:
            deadline = trio.current_time() + 20
            stale, counter = Owner(source.node_rid), StableTypeName("move.Counter")
            answers.append(
                await remote.request(stale, zl.SpotId("c-7"), Stall(), Count, {}, counter, deadline)
            )

        async def shut_down() -> None:
            await source.host.shutdown()
            stopped.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(ask_the_stale_route)
            with trio.fail_after(10):
                await stalled.wait()
            nursery.start_soon(shut_down)
            # Twenty quiet periods: long enough for a shutdown that did not wait to end.
            with trio.move_on_after(1.0):
                await stopped.wait()
            assert not stopped.is_set(), "the source stopped with a relayed request open"
            go_on.set()
        assert stopped.is_set()
    assert 1 == len(answers)
    assert isinstance(answers[0], Count)
    assert 1 == answers[0].value


@pytest.mark.spec("RELOC-72")
async def test_a_relocation_seals_its_first_unit_once_its_record_says_relocating(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The source's node record is row-locked by the test, so its ``relocating`` write cannot
    land; the adapter's capture of the first (and only) unit reads the record. The lock goes
    once the capture ran or half a second passed (a relocation that waits cannot capture
    before): the capture saw ``relocating``, never ``serving``."""
    seen: list[str] = []
    captured = trio.Event()
    capture = CounterState.capture
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        key = f"m/{source.mesh.value}/node/{source.node_rid.value}"

        async def looking(self: CounterState, spot: Counter) -> bytes:
            found = await stores.location.read(key)
            assert isinstance(found, Found)
            seen.append(NodeRecord.decode(found.value).state)
            captured.set()
            return await capture(self, spot)

        monkeypatch.setattr(CounterState, "capture", looking)
        await meet(source, target)
        await source.route.send_to_spot("c-3", Add(1)).instance_spot("move.Counter").submit()
        blocker = await stores.database.begin(isolation="read_committed")
        try:
            await blocker.execute(
                "SELECT 1 FROM zlink_location_record "
                f"WHERE key = '\\x{key.encode().hex()}'::bytea FOR UPDATE"
            )
            async with trio.open_nursery() as nursery:
                nursery.start_soon(source.host.relocate)
                with trio.move_on_after(0.5):
                    await captured.wait()
                await blocker.close()
        finally:
            await blocker.close()
        assert zl.HostStatus.RELOCATED == source.host.status
    assert ["relocating"] == seen
