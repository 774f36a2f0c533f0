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
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.sealing import RestoredSpot, prepare_restore, seal
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
        call = self.context.route.request_to_spot(f"{self.key}-gk", Ask(msg.text), reply_type=Answer)
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
class Room(zl.Spot):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        pass


@app.user_spot("seal.Lanes", mode=zl.SpotFactoryMode.PER_ACTOR)
class Lanes(zl.Spot):
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


def activation_of(host: TestHost, spot_id: str) -> Activation:
    activation: Activation = host.host._tree.spots.activations[SpotId(spot_id)]
    return activation


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
