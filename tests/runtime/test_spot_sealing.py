"""One unit's move inside its Spot activation, on one host: seal at a turn boundary, the hold,
capture, abort, detach and restore (specs/relocation.md RELOC-34..RELOC-40; specs/spots.md
SPOT-35, SPOT-46, SPOT-75, SPOT-76; specs/timers.md TIMER-35).

Every interleaving is forced with events: a handler that waits on a ``trio.Event`` holds the
Spot's gate (or, through ``yield_()``, a continuation) until the test lets it go. Timer tests
run the host on a ``VirtualClock``. The sealing API is internal (spots/sealing.py), so the tests
reach the activation through the host's Spot catalog.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._runtime.spots.sealing import prepare_restore, seal
from zlink_trio.ids import SpotId
from zlink_trio.testing import TestHost, VirtualClock, open_test_host

app = zl.Application()
BOX = "seal.Box"


@app.message("seal.Note")
@attrs.frozen
class Note:
    text: str


@app.message("seal.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("seal.Block")
@attrs.frozen
class Block:
    text: str


@app.message("seal.Detour")
@attrs.frozen
class Detour:
    """Ask the gatekeeper through yield_(): the turn's continuation waits outside the gate."""

    text: str


@app.message("seal.Beat")
@attrs.frozen
class Beat:
    interval: float
    catch_up: int = 1


@app.message("seal.Answer")
@attrs.frozen
class Answer:
    text: str
    generation: int = 0


class Probe:
    """What one Spot id did, across its incarnations."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.instances = 0
        self.initialized = 0
        self.restored: list[bytes] = []
        self.closing: list[zl.SpotCloseReason] = []
        self.closed = trio.Event()
        self.blocking = trio.Event()
        self.release = trio.Event()
        self.block_ticks: set[int] = set()
        self._changed = trio.Event()

    def note(self, text: str) -> None:
        self.log.append(text)
        self._changed.set()
        self._changed = trio.Event()

    async def wait_log(self, count: int) -> None:
        with trio.fail_after(10):
            while len(self.log) < count:
                await self._changed.wait()


probes: dict[str, Probe] = {}
gate_opened = trio.Event()  # replaced per test


class BoxAdapter(zl.SpotRelocationAdapter["Box"]):
    async def capture(self, target: Box) -> bytes:
        return f"{target.incarnation}:{len(probes[target.key].log)}".encode()

    async def restore(self, target: Box, payload: bytes) -> None:
        probes[target.key].restored.append(payload)


@app.instance_spot(BOX, relocation=zl.preserve_state_with(BoxAdapter))
class Box(zl.InstanceSpot):
    def __init__(self) -> None:
        self.key = self.context.spot_id.value
        probe = probes[self.key]
        probe.instances += 1
        self.incarnation = probe.instances

    @property
    def probe(self) -> Probe:
        return probes[self.key]

    async def on_initialize(self) -> None:
        self.probe.initialized += 1

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        self.probe.closing.append(closing.reason)
        self.probe.closed.set()

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        self.probe.note(f"{msg.text}@{self.incarnation}")

    @zl.request_handler(Ask)
    async def ask(self, msg: Ask) -> Answer:
        self.probe.note(f"{msg.text}@{self.incarnation}")
        return Answer(msg.text, self.context.ref.object_generation.value)

    @zl.request_handler(Block)
    async def block(self, msg: Block) -> Answer:
        self.probe.note(f"{msg.text}@{self.incarnation}")
        self.probe.blocking.set()
        await self.probe.release.wait()  # holds the gate until the test lets go
        return Answer(msg.text)

    @zl.request_handler(Detour)
    async def detour(self, msg: Detour) -> Answer:
        self.probe.note(f"{msg.text}-out@{self.incarnation}")
        keeper = f"{self.key}-gk"
        call = self.context.route.request_to_spot(keeper, Ask(msg.text), reply_type=Answer)
        await call.instance_spot("seal.Gatekeeper").yield_()
        self.probe.note(f"{msg.text}-back@{self.incarnation}")
        return Answer(msg.text)

    @zl.packet_handler(Beat)
    async def beat_every(self, msg: Beat) -> None:
        policy = zl.TimerOverrunPolicy.CATCH_UP_BOUNDED
        options = zl.TimerOptions(overrun_policy=policy, max_catch_up_ticks=msg.catch_up)
        self.context.timers.start("beat", msg.interval, options)

    @zl.timer_handler("beat")
    async def beat(self, tick: zl.TimerTick) -> None:
        self.probe.note(f"tick{tick.number}@{self.incarnation}")
        if tick.number in self.probe.block_ticks:
            self.probe.blocking.set()
            await self.probe.release.wait()


@app.instance_spot("seal.Gatekeeper")
class Gatekeeper(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, msg: Ask) -> Answer:
        await gate_opened.wait()
        return Answer(msg.text)


@app.user_spot("seal.Room")
class Room(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        pass


@app.user_spot("seal.Lanes", mode=zl.SpotFactoryMode.PER_ACTOR)
class Lanes(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        pass


# --- helpers ------------------------------------------------------------------------------------


def new_box() -> tuple[str, Probe]:
    global gate_opened
    gate_opened = trio.Event()
    spot_id = f"box-{uuid.uuid4().hex[:8]}"
    probes[spot_id] = Probe()
    return spot_id, probes[spot_id]


@asynccontextmanager
async def host_on(store_dsn: str, clock: VirtualClock | None = None) -> AsyncIterator[TestHost]:
    if clock is not None:
        # The barrier would wait for held messages to run; a sealed Spot keeps them.
        clock.settle = trio.testing.wait_all_tasks_blocked
    async with open_test_host(app, dsn=store_dsn, clock=clock) as host:
        yield host


def catalog_of(host: TestHost) -> SpotCatalog[Activation]:
    spots = host.host._tree.spots
    assert spots is not None
    return spots


def activation_of(host: TestHost, spot_id: str) -> Activation:
    return catalog_of(host).activations[SpotId(spot_id)]


async def send(host: TestHost, spot_id: str, message: object) -> None:
    with trio.fail_after(10):
        await host.route.send_to_spot(spot_id, message).instance_spot(BOX).submit()


async def ask(host: TestHost, spot_id: str, message: object) -> Answer:
    with trio.fail_after(10):
        call = host.route.request_to_spot(spot_id, message, reply_type=Answer)
        reply: Answer = await call.instance_spot(BOX).submit()
        return reply


class Background:
    """Requests that run in the background and keep their answers, in the order asked."""

    def __init__(self, nursery: trio.Nursery, host: TestHost, spot_id: str) -> None:
        self.nursery, self.host, self.spot_id = nursery, host, spot_id
        self.answers: dict[str, Answer | zl.ZLinkError] = {}

    async def ask(self, message: Ask | Block | Detour) -> None:
        """Start the request and return once the Spot (or its hold) has admitted it."""

        async def run(task_status: trio.TaskStatus[None]) -> None:
            call = self.host.route.request_to_spot(self.spot_id, message, reply_type=Answer)
            task_status.started()
            try:
                self.answers[message.text] = await call.instance_spot(BOX).submit()
            except zl.ZLinkError as error:
                self.answers[message.text] = error

        await self.nursery.start(run)
        await trio.testing.wait_all_tasks_blocked()


async def started_seal(nursery: trio.Nursery, activation: Activation) -> list[Any]:
    """Start ``seal(activation)`` in the background; the list gets the sealed Spot when it
    returns."""
    result: list[Any] = []

    async def run() -> None:
        result.append(await seal(activation))

    nursery.start_soon(run)
    await trio.testing.wait_all_tasks_blocked()
    return result


# --- seal, hold, abort --------------------------------------------------------------------------


@pytest.mark.spec("RELOC-34", "RELOC-35", "RELOC-36")
async def test_a_seal_waits_for_the_running_turn_holds_new_messages_and_abort_serves_all_in_order(
    store_dsn: str,
) -> None:
    """Sealed behind a running turn: queued messages stay unrun, later ones are admitted into the
    hold at once; the capture lists both, in order; abort serves them all once, in that order,
    before anything offered after it."""
    spot_id, probe = new_box()
    async with host_on(store_dsn) as host, trio.open_nursery() as nursery:
        await send(host, spot_id, Note("first"))
        asks = Background(nursery, host, spot_id)
        await asks.ask(Block("block"))
        with trio.fail_after(10):
            await probe.blocking.wait()
        await send(host, spot_id, Note("m1"))
        await asks.ask(Ask("m2"))
        activation = activation_of(host, spot_id)
        sealing = await started_seal(nursery, activation)
        assert [] == sealing  # the turn still runs
        await send(host, spot_id, Note("h1"))  # admitted into the hold, not waiting
        await asks.ask(Ask("h2"))
        probe.release.set()
        with trio.fail_after(10):
            while not sealing:
                await trio.testing.wait_all_tasks_blocked()
        sealed = sealing[0]
        await trio.testing.wait_all_tasks_blocked()
        assert ["first@1", "block@1"] == probe.log  # nothing ran after the turn
        snapshot = sealed.capture()
        assert [Note("m1"), Ask("m2"), Note("h1"), Ask("h2")] == [
            e.message for e in snapshot.entries
        ]
        assert [None, "request", None, "request"] == [
            None if e.reply_route is None else "request" for e in snapshot.entries
        ]
        again = sealed.capture()  # capturing changes nothing
        assert snapshot == attrs.evolve(again, captured_at=snapshot.captured_at)
        await send(host, spot_id, Note("h3"))
        sealed.abort()
        await send(host, spot_id, Note("after"))
        await probe.wait_log(8)
        await trio.testing.wait_all_tasks_blocked()
    assert ["first", "block", "m1", "m2", "h1", "h2", "h3", "after"] == [
        entry.split("@")[0] for entry in probe.log
    ]
    assert {"block", "m2", "h2"} == set(asks.answers)
    assert all(isinstance(answer, Answer) for answer in asks.answers.values())
    assert 1 == probe.instances


@pytest.mark.spec("RELOC-34", "SPOT-75")
async def test_a_seal_waits_for_a_yield_continuation_to_end(store_dsn: str) -> None:
    """A turn that gave its gate back in yield_() is still running: the seal returns only once
    its continuation has run; a message offered meanwhile is held, not run."""
    spot_id, probe = new_box()
    async with host_on(store_dsn) as host, trio.open_nursery() as nursery:
        asks = Background(nursery, host, spot_id)
        await asks.ask(Detour("d"))
        await probe.wait_log(1)  # the detour's turn has started and given its gate back
        await send(host, spot_id, Note("m1"))
        await probe.wait_log(2)  # m1 ran: the detour waits outside the gate
        sealing = await started_seal(nursery, activation_of(host, spot_id))
        await send(host, spot_id, Note("m2"))
        await trio.testing.wait_all_tasks_blocked()
        assert [] == sealing  # the gate is free, but the continuation has not run
        gate_opened.set()
        with trio.fail_after(10):
            while not sealing:
                await trio.testing.wait_all_tasks_blocked()
        assert ["d-out@1", "m1@1", "d-back@1"] == probe.log
        assert [Note("m2")] == [e.message for e in sealing[0].capture().entries]
        sealing[0].abort()
        await probe.wait_log(4)
    assert ["d-out@1", "m1@1", "d-back@1", "m2@1"] == probe.log
    assert isinstance(asks.answers["d"], Answer)


# --- detach and restore -------------------------------------------------------------------------


async def wait_sealed(nursery: trio.Nursery, activation: Activation) -> Any:
    sealing = await started_seal(nursery, activation)
    with trio.fail_after(10):
        while not sealing:
            await trio.testing.wait_all_tasks_blocked()
    return sealing[0]


@pytest.mark.spec("RELOC-35", "RELOC-37", "RELOC-38", "SPOT-46")
async def test_a_detached_spot_is_restored_with_its_queue_state_and_timers_in_order(
    store_dsn: str,
) -> None:
    """On one host: the source's running tick ends there; the restored instance, same id and
    generation, gets the adapter payload, runs no lifecycle callback, runs the captured messages,
    then the one held after the capture, then a new one; its timer goes on from the captured
    tick without being started again and ticks only once Ready; the source closes with
    RELOCATION_OUT and leaves the store record to the target."""
    clock = VirtualClock()
    spot_id, probe = new_box()
    probe.block_ticks = {1}
    async with host_on(store_dsn, clock) as host, trio.open_nursery() as nursery:
        before = await ask(host, spot_id, Ask("hello"))
        await send(host, spot_id, Beat(10.0, catch_up=5))
        await trio.testing.wait_all_tasks_blocked()  # the timer starts at 0 s
        await clock.advance(10.0)  # tick 1 starts and blocks
        with trio.fail_after(10):
            await probe.blocking.wait()
        source = activation_of(host, spot_id)
        sealing = await started_seal(nursery, source)
        await send(host, spot_id, Note("q1"))  # held
        assert [] == sealing  # the running tick ends first (TIMER-17)
        await clock.advance(25.0)  # ticks 2 and 3 fall due while sealed: none runs
        probe.release.set()
        with trio.fail_after(10):
            while not sealing:
                await trio.testing.wait_all_tasks_blocked()
        sealed = sealing[0]
        assert ["hello@1", "tick1@1"] == probe.log
        snapshot = sealed.capture()
        (state,) = snapshot.timers
        assert (1, [2, 3]) == (state.last_sequence, [tick.number for tick in state.pending])
        payload = await sealed.capture_payload()
        assert b"1:2" == payload
        restored = await prepare_restore(catalog_of(host), snapshot, sealed.claim, payload)
        await clock.advance(0.0)
        await trio.testing.wait_all_tasks_blocked()
        assert [b"1:2"] == probe.restored
        assert (2, 1) == (probe.instances, probe.initialized)  # no on_initialize on the target
        assert ["hello@1", "tick1@1"] == probe.log  # nothing runs before it is open
        await send(host, spot_id, Note("late"))  # held after the capture: forwarded at detach
        sealed.detach(restored.take)
        restored.open()
        await send(host, spot_id, Note("new"))
        with trio.fail_after(10):
            await probe.closed.wait()
        await probe.wait_log(7)
        after = await ask(host, spot_id, Ask("bye"))
        await clock.advance(10.0)  # tick 4 is due at 40 s
        await probe.wait_log(9)
        assert activation_of(host, spot_id) is restored.activation
        record = await host.host._node.authority.read(SpotId(spot_id))
        assert record is not None  # the source's close left the record to the target
        assert (before.generation, "ready") == (record.generation.value, record.state)
    assert [zl.SpotCloseReason.RELOCATION_OUT, zl.SpotCloseReason.HOST_SHUTDOWN] == probe.closing
    assert before.generation == after.generation
    # on_initialize ran once for the generation, on the source
    assert (2, 1) == (probe.instances, probe.initialized)
    moved = [entry for entry in probe.log[2:] if entry.endswith("@2")]
    assert len(probe.log) - 2 == len(moved)  # everything after the seal ran on the target
    notes = [entry.split("@")[0] for entry in moved if not entry.startswith("tick")]
    assert ["q1", "late", "new", "bye"] == notes
    ticks = [entry.split("@")[0] for entry in moved if entry.startswith("tick")]
    assert ["tick2", "tick3", "tick4"] == ticks


# --- what cannot be sealed, and what breaks a seal ----------------------------------------------


@pytest.mark.spec("RELOC-39", "SPOT-35")
async def test_what_cannot_be_sealed_and_a_close_while_sealed_is_unavailable(
    store_dsn: str,
) -> None:
    """Entry and PER_ACTOR Spots and a sealed one cannot be sealed (INVALID_OPERATION), a
    closing one neither (UNAVAILABLE); closing a sealed User Spot is UNAVAILABLE, and after the
    abort it closes."""
    async with host_on(store_dsn) as host, trio.open_nursery() as nursery:
        spots = catalog_of(host)
        lanes = await host.spots.get_or_create(f"l-{uuid.uuid4().hex[:8]}", "seal.Lanes").submit()
        room = await host.spots.get_or_create(f"r-{uuid.uuid4().hex[:8]}", "seal.Room").submit()
        for activation in (spots.entry, spots.activations[lanes.spot_ref.spot_id]):
            with pytest.raises(zl.ZLinkError) as refused:
                await seal(activation)
            assert zl.ErrorKind.INVALID_OPERATION == refused.value.kind
        sealed = await wait_sealed(nursery, spots.activations[room.spot_ref.spot_id])
        with pytest.raises(zl.ZLinkError) as twice:
            await seal(sealed.activation)
        assert zl.ErrorKind.INVALID_OPERATION == twice.value.kind
        with pytest.raises(zl.ZLinkError) as closing, trio.fail_after(10):
            await host.spots.close(room.spot_ref)
        assert zl.ErrorKind.UNAVAILABLE == closing.value.kind
        sealed.abort()
        with trio.fail_after(10):
            assert await host.spots.close(room.spot_ref)
        with pytest.raises(zl.ZLinkError) as closed:
            await seal(sealed.activation)
        assert zl.ErrorKind.UNAVAILABLE == closed.value.kind


@pytest.mark.spec("RELOC-40")
async def test_host_shutdown_breaks_a_seal_and_ends_every_held_request(store_dsn: str) -> None:
    """Shutting the host down while a Spot is sealed ends its queued and held requests with an
    error instead of leaving them waiting, and on_closing gets HOST_SHUTDOWN."""
    spot_id, probe = new_box()
    async with trio.open_nursery() as nursery:
        async with host_on(store_dsn) as host:
            await send(host, spot_id, Note("first"))
            await probe.wait_log(1)
            asks = Background(nursery, host, spot_id)
            sealed = await wait_sealed(nursery, activation_of(host, spot_id))
            await asks.ask(Ask("held"))
            with trio.fail_after(10):
                await host.shutdown()
            assert sealed.activation.closed.is_set()
        with trio.fail_after(10):
            while "held" not in asks.answers:
                await trio.testing.wait_all_tasks_blocked()
    assert isinstance(asks.answers["held"], zl.ZLinkError)
    assert ["first@1"] == probe.log
    assert [zl.SpotCloseReason.HOST_SHUTDOWN] == probe.closing


@pytest.mark.spec("SPOT-76", "RELOC-34")
async def test_a_seal_whose_barrier_fails_restores_admission_as_it_was(store_dsn: str) -> None:
    """A seal cancelled while the turn it waits for still runs is abandoned: what it held runs
    after what was queued, in order, each once, and later messages are admitted as before."""
    spot_id, probe = new_box()
    async with host_on(store_dsn) as host, trio.open_nursery() as nursery:
        asks = Background(nursery, host, spot_id)
        await asks.ask(Block("block"))
        with trio.fail_after(10):
            await probe.blocking.wait()
        await send(host, spot_id, Note("m1"))
        activation = activation_of(host, spot_id)
        with trio.CancelScope() as barrier:
            async with trio.open_nursery() as sealing:
                sealing.start_soon(seal, activation)
                await trio.testing.wait_all_tasks_blocked()
                assert activation.hold is not None
                await send(host, spot_id, Note("h1"))  # held
                barrier.cancel()  # the barrier fails: the seal is abandoned
        assert activation.hold is None
        await send(host, spot_id, Note("after"))
        probe.release.set()
        await probe.wait_log(4)
        await trio.testing.wait_all_tasks_blocked()
    assert ["block@1", "m1@1", "h1@1", "after@1"] == probe.log
