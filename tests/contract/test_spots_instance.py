"""Instance Spots, cold activation, the SPOT_WIDE gate and yield_() (specs/spots.md)."""

from __future__ import annotations

import gc
import uuid
import weakref
from typing import ClassVar

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.ownership.authority import Claim, SpotAuthority

app = zl.Application()
log: list[tuple[str, str]] = []
contexts: list[zl.SpotContext] = []


@app.message("inst.Note")
@attrs.frozen
class Note:
    text: str


@app.message("inst.Ask")
@attrs.frozen
class Ask:
    how: str


@app.message("inst.Answer")
@attrs.frozen
class Answer:
    text: str


@app.message("inst.Quit")
@attrs.frozen
class Quit:
    pass


class Signals:
    def __init__(self) -> None:
        self.release = trio.Event()
        self.waiting = trio.Event()
        self.noted = trio.Event()


signals = Signals()


@app.instance_spot("inst.Counter")
class Counter(zl.InstanceSpot):
    def __init__(self) -> None:
        self.count = 0
        log.append((self.context.spot_id.value, "init"))
        contexts.append(self.context)

    async def on_initialize(self) -> None:
        log.append((self.context.spot_id.value, "on_initialize"))

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        log.append((self.context.spot_id.value, f"on_closing:{closing.reason.name}"))

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        log.append((self.context.spot_id.value, f"note:{msg.text}"))
        # A turn keeps the gate across ordinary awaits: nothing interleaves with it.
        await trio.lowlevel.checkpoint()
        log.append((self.context.spot_id.value, f"done:{msg.text}"))
        if msg.text == "wake":
            signals.noted.set()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        if req.how == "generation":
            return Answer(str(self.context.ref.object_generation.value))
        call = self.context.route.request_to_spot("holder", Ask("hold"), reply_type=Answer)
        call.instance_spot("inst.Holder")
        signals.waiting.set()
        if req.how == "yield":
            return await call.yield_()
        return await call.submit()

    @zl.packet_handler(Quit)
    async def quit(self, msg: Quit) -> None:
        await self.context.close()


@app.instance_spot("inst.Holder")
class Holder(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        await signals.release.wait()
        return Answer("held")


@app.instance_spot("inst.Sleepy")
class Sleepy(zl.InstanceSpot):
    async def on_initialize(self) -> None:
        await trio.sleep_forever()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer("never")


class Gate:
    def __init__(self) -> None:
        self.open = trio.Event()
        self.handled: list[str] = []
        self.instances: list[weakref.ref[object]] = []
        self.closing = trio.Event()


gate = Gate()


@app.instance_spot("inst.Late")
class Late(zl.InstanceSpot):
    def __init__(self) -> None:
        gate.instances.append(weakref.ref(self))

    async def on_initialize(self) -> None:
        await gate.open.wait()

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        gate.handled.append("on_closing")
        gate.closing.set()

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        gate.handled.append(msg.text)

    @zl.packet_handler(Quit)
    async def quit(self, msg: Quit) -> None:
        await self.context.close()


class Yielding:
    """What ``inst.Yielder`` turns did, in order, and the events that hold them."""

    trace: ClassVar[list[str]] = []
    note_entered = trio.Event()
    note_release = trio.Event()


@app.instance_spot("inst.Yielder")
class Yielder(zl.InstanceSpot):
    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        call = self.context.route.request_to_spot("holder-y", Ask("hold"), reply_type=Answer)
        signals.waiting.set()
        answer = await call.instance_spot("inst.Holder").yield_()
        Yielding.trace.append("after yield")
        return answer

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        Yielding.trace.append("note begins")
        Yielding.note_entered.set()
        await Yielding.note_release.wait()
        Yielding.trace.append("note ends")


@app.user_spot("inst.Room")
class Room(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        pass


def config(store_dsn: str, closing_timeout: float = 5.0) -> zl.HostConfig:
    return zl.HostConfig(
        mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, closing_timeout=closing_timeout
    )


def of(spot_id: str) -> list[str]:
    return [what for who, what in log if who == spot_id]


async def flush(host: zl.Host, spot_id: str) -> None:
    """Wait until every message sent to the Counter so far has been handled."""
    with trio.fail_after(10):
        await host.route.request_to_spot(spot_id, Ask("generation"), reply_type=Answer).submit()


@pytest.mark.spec("SPOT-20", "SPOT-26", "SPOT-41", "SPOT-28")
async def test_first_message_activates_cold_and_is_handled_first(store_dsn: str) -> None:
    """A send with instance_spot() to a missing id completes at admission, creates the Instance
    Spot, and its message runs right after on_initialize, before later ones."""
    async with zl.open_host(app, config(store_dsn)) as host:
        await host.route.send_to_spot("c-1", Note("first")).instance_spot("inst.Counter").submit()
        assert [] == of("c-1")  # admitted: the send did not wait for the Spot to become Ready
        await host.route.send_to_spot("c-1", Note("second")).submit()
        await flush(host, "c-1")
    assert [
        "init",
        "on_initialize",
        "note:first",
        "done:first",
        "note:second",
        "done:second",
        "on_closing:HOST_SHUTDOWN",
    ] == of("c-1")


@pytest.mark.spec("SPOT-68", "SPOT-74")
async def test_one_turn_at_a_time_in_admission_order(store_dsn: str) -> None:
    """Many messages to one Instance Spot run one turn at a time, in the order admitted."""
    async with zl.open_host(app, config(store_dsn)) as host:
        for i in range(20):
            await (
                host.route.send_to_spot("c-2", Note(str(i))).instance_spot("inst.Counter").submit()
            )
        await flush(host, "c-2")
    expected = [f"{step}:{i}" for i in range(20) for step in ("note", "done")]
    assert expected == [what for what in of("c-2") if what[:4] in ("note", "done")]


@pytest.mark.spec("SPOT-22", "SPOT-23", "SPOT-24", "SPOT-25")
async def test_instance_type_selection(store_dsn: str) -> None:
    """instance_spot() without a type is INVALID_OPERATION with two Instance types; an unknown
    type is NOT_FOUND; a User Spot id is TYPE_MISMATCH; an existing Instance Spot is reached
    without instance_spot()."""
    async with zl.open_host(app, config(store_dsn)) as host:
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("c-3", Note("x")).instance_spot().submit()
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("c-3", Note("x")).instance_spot("inst.Nope").submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        await host.spots.get_or_create("room", "inst.Room").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("room", Note("x")).instance_spot("inst.Counter").submit()
        assert zl.ErrorKind.TYPE_MISMATCH == caught.value.kind
        await host.route.send_to_spot("c-3", Note("x")).instance_spot("inst.Counter").submit()
        await host.route.send_to_spot("c-3", Note("y")).submit()
        await flush(host, "c-3")
    assert ["note:x", "done:x", "note:y", "done:y"] == [w for w in of("c-3") if ":" in w][:4]


single = zl.Application()
single_seen: list[str] = []


@single.message("inst1.Poke")
@attrs.frozen
class Poke:
    pass


@single.instance_spot("inst1.Only")
class Only(zl.InstanceSpot):
    @zl.packet_handler(Poke)
    async def poke(self, msg: Poke) -> None:
        single_seen.append(self.context.spot_id.value)
        signals.noted.set()


@pytest.mark.spec("SPOT-22")
async def test_instance_spot_without_a_type_uses_the_only_instance_type(store_dsn: str) -> None:
    """With exactly one Instance type declared, instance_spot() infers it."""
    global signals
    signals = Signals()
    async with zl.open_host(single, config(store_dsn)) as host:
        await host.route.send_to_spot("o-1", Poke()).instance_spot().submit()
        with trio.fail_after(10):
            await signals.noted.wait()
    assert ["o-1"] == single_seen


@pytest.mark.spec("SPOT-19")
async def test_a_call_without_instance_spot_activates_nothing(store_dsn: str) -> None:
    """Even where instance_spot() could infer the only Instance type, a send or request without
    it to a missing id ends NOT_FOUND and activates no Spot."""
    global signals
    signals = Signals()
    single_seen.clear()
    async with zl.open_host(single, config(store_dsn)) as host:
        with pytest.raises(zl.ZLinkError) as sent:
            await host.route.send_to_spot("o-none", Poke()).submit()
        with pytest.raises(zl.ZLinkError) as asked:
            await host.route.request_to_spot("o-none", Poke(), reply_type=Poke).submit()
        await trio.testing.wait_all_tasks_blocked()
    assert [zl.ErrorKind.NOT_FOUND] * 2 == [sent.value.kind, asked.value.kind]
    assert [] == single_seen


@pytest.mark.spec("SPOT-38", "SHUT-4.3")
async def test_context_close_closes_the_instance_spot_and_it_can_come_back(store_dsn: str) -> None:
    """context.close() closes the Instance Spot with EXPLICIT_CLOSE; the next instance_spot()
    message activates a new incarnation with a higher generation."""
    async with zl.open_host(app, config(store_dsn)) as host:
        first = (
            await host.route.request_to_spot("c-4", Ask("generation"), reply_type=Answer)
            .instance_spot("inst.Counter")
            .submit()
        )
        await host.route.send_to_spot("c-4", Quit()).submit()
        # Admitted before the close began, so the closing incarnation still answers it.
        drained = await host.route.request_to_spot(
            "c-4", Ask("generation"), reply_type=Answer
        ).submit()
        assert first == drained
        second = (
            await host.route.request_to_spot("c-4", Ask("generation"), reply_type=Answer)
            .instance_spot("inst.Counter")
            .submit()
        )
        assert int(second.text) > int(first.text)
        # The first incarnation's context now refuses to act (SHUT-4.3).
        stale = next(c for c in contexts if c.spot_id == zl.SpotId("c-4"))
        with pytest.raises(zl.ZLinkError) as caught:
            stale.route.send_to_spot("c-4", Note("from the past"))
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
    assert ["init", "on_initialize", "on_closing:EXPLICIT_CLOSE", "init"] == of("c-4")[:4]


@pytest.mark.spec("SPOT-70", "CMP-2.7")
async def test_yield_gives_the_gate_back_while_waiting(store_dsn: str) -> None:
    """While a turn waits in yield_(), the next message of the same Spot runs."""
    global signals
    signals = Signals()
    async with zl.open_host(app, config(store_dsn)) as host:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    reply = (
                        await host.route.request_to_spot("c-5", Ask("yield"), reply_type=Answer)
                        .instance_spot("inst.Counter")
                        .submit()
                    )
                    assert Answer("held") == reply

                nursery.start_soon(ask)
                await signals.waiting.wait()
                await host.route.send_to_spot("c-5", Note("wake")).submit()
                await signals.noted.wait()
                signals.release.set()


@pytest.mark.spec("SPOT-70", "CMP-2.7", "SPOT-74")
async def test_yield_takes_the_gate_again_before_the_code_after_it(store_dsn: str) -> None:
    """The result of a yield_() comes while another turn of the Spot holds the gate: the code
    after yield_() waits until that turn has ended, so it runs in a new turn of its own: the
    Instance Spot never runs two turns at once (SPOT-74)."""
    global signals
    signals = Signals()
    Yielding.trace = []
    Yielding.note_entered, Yielding.note_release = trio.Event(), trio.Event()
    async with zl.open_host(app, config(store_dsn)) as host:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    request = host.route.request_to_spot("y-1", Ask("yield"), reply_type=Answer)
                    assert Answer("held") == await request.instance_spot("inst.Yielder").submit()

                nursery.start_soon(ask)
                await signals.waiting.wait()
                await host.route.send_to_spot("y-1", Note("hold the gate")).submit()
                await Yielding.note_entered.wait()  # the note's turn holds the gate now
                signals.release.set()  # the yield_() gets its result while the gate is held
                await trio.testing.wait_all_tasks_blocked(0.05)
                Yielding.note_release.set()
    assert ["note begins", "note ends", "after yield"] == Yielding.trace


@pytest.mark.spec("CMP-2.4", "SPOT-68")
async def test_submit_inside_a_turn_keeps_the_gate(store_dsn: str) -> None:
    """While a turn waits in submit(), no other message of the same Spot runs."""
    global signals
    signals = Signals()
    async with zl.open_host(app, config(store_dsn)) as host:
        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:

                async def ask() -> None:
                    await (
                        host.route.request_to_spot("c-6", Ask("submit"), reply_type=Answer)
                        .instance_spot("inst.Counter")
                        .submit()
                    )

                nursery.start_soon(ask)
                await signals.waiting.wait()
                await host.route.send_to_spot("c-6", Note("wake")).submit()
                await trio.testing.wait_all_tasks_blocked(0.05)
                assert not signals.noted.is_set()
                signals.release.set()
                await signals.noted.wait()


@pytest.mark.spec("SPOT-78", "SPOT-77", "CMP-2.1")
async def test_yield_outside_a_spot_turn_is_invalid_before_submitting(store_dsn: str) -> None:
    """yield_() from application code raises INVALID_OPERATION and submits nothing; one-way
    calls offer no yield_()."""
    async with zl.open_host(app, config(store_dsn)) as host:
        call = host.route.request_to_spot("c-7", Ask("generation"), reply_type=Answer)
        with pytest.raises(zl.ZLinkError) as caught:
            await call.instance_spot("inst.Counter").yield_()
        assert zl.ErrorKind.INVALID_OPERATION == caught.value.kind
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("c-7", Note("x")).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        assert not hasattr(host.route.send_to_spot("c-7", Note("x")), "yield_")
        assert hasattr(host.spots.create("inst.Room"), "yield_")


@pytest.mark.spec("SPOT-29", "CMP-9.4")
async def test_a_cold_activating_request_has_one_deadline_across_activation(
    store_dsn: str,
) -> None:
    """A request whose cold activation never becomes Ready ends with DEADLINE_EXCEEDED at its
    own timeout."""
    async with zl.open_host(app, config(store_dsn, closing_timeout=0.2)) as host:
        started = trio.current_time()
        with pytest.raises(zl.ZLinkError) as caught:
            await (
                host.route.request_to_spot("z-1", Ask("x"), reply_type=Answer)
                .instance_spot("inst.Sleepy")
                .timeout(0.3)
                .submit()
            )
        assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
        assert trio.current_time() - started < 5


@pytest.mark.spec("SPOT-61", "SPOT-26")
async def test_no_handler_runs_before_on_initialize_or_after_on_closing(store_dsn: str) -> None:
    """Messages wait while on_initialize runs, none runs once on_closing has started, and the
    closed activation's instance is not kept alive."""
    global gate
    gate = Gate()
    async with zl.open_host(app, config(store_dsn)) as host:
        await host.route.send_to_spot("l-1", Note("a")).instance_spot("inst.Late").submit()
        await host.route.send_to_spot("l-1", Note("b")).submit()
        await trio.testing.wait_all_tasks_blocked(0.05)
        assert [] == gate.handled
        gate.open.set()
        await host.route.send_to_spot("l-1", Quit()).submit()
        with trio.fail_after(10):
            await gate.closing.wait()
        assert ["a", "b", "on_closing"] == gate.handled
        with pytest.raises(zl.ZLinkError) as caught:
            await host.route.send_to_spot("l-1", Note("after")).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
    gc.collect()
    assert [None] == [ref() for ref in gate.instances]


@pytest.mark.spec("SPOT-91")
async def test_a_ready_write_with_a_lost_answer_leaves_no_record_behind(
    store_dsn: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Ready write of a cold activation commits but its answer is lost (an injected fault):
    the activation fails, reads the record back and deletes it, so the next message to the id
    activates it again instead of finding it held by this host for good."""
    spot_id = f"lost-{uuid.uuid4().hex[:10]}"
    real = SpotAuthority.mark_ready
    lost: list[str] = []

    async def answer_lost(self: SpotAuthority, claim: Claim) -> Claim:
        written = await real(self, claim)
        if claim.spot_id.value == spot_id and not lost:
            lost.append(spot_id)
            raise zl.ZLinkError(zl.ErrorKind.UNAVAILABLE, "the store's answer was lost")
        return written

    monkeypatch.setattr(SpotAuthority, "mark_ready", answer_lost)
    async with zl.open_host(app, config(store_dsn)) as host:
        ask = host.route.request_to_spot(spot_id, Ask("generation"), reply_type=Answer)
        with pytest.raises(zl.ZLinkError) as caught:
            await ask.instance_spot("inst.Counter").timeout(10).submit()
        assert [spot_id] == lost
        assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        again = host.route.request_to_spot(spot_id, Ask("generation"), reply_type=Answer)
        reply = await again.instance_spot("inst.Counter").timeout(10).submit()
        assert "2" == reply.text  # a new incarnation; generations only grow
