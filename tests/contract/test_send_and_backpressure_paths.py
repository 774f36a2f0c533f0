"""One-way sends at their admission boundary, and calls kept apart (specs/completion.md CMP-2.9,
CMP-4.1, CMP-4.9, CMP-5.1..CMP-5.4, CMP-5.7, CMP-5.17, CMP-5.19, CMP-5.20).

The backpressure test drives three RouteMesh nodes on 127.0.0.1: the transport is where a
one-way send to another host waits at the high-water mark. The other tests run hosts of the
testing kit on the real store.
"""

from __future__ import annotations

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.integration.transport.conftest import BIG, WINDOW, connect, node, numbered, until
from tests.members import NoMembers
from zlink_trio._integration.transport import RouteMesh
from zlink_trio.ids import NodeRid
from zlink_trio.testing import open_test_host, open_test_mesh

app = zl.Application()
B = NodeRid("b")
COUNT = 1_000
"""Sends of ``BIG`` bytes: far more than the queues and socket buffers between two nodes hold."""


@app.message("paths.Note")
@attrs.frozen
class Note:
    n: int


@app.message("paths.Ask")
@attrs.frozen
class Ask:
    text: str


@app.message("paths.Answer")
@attrs.define
class Answer:
    """A mutable reply: a caller that changes its list must not change anyone else's."""

    items: list[int]


class State:
    """What the Spots saw, and the events a test holds a handler with."""

    def __init__(self) -> None:
        self.notes: list[int] = []
        self.asked: list[str] = []
        self.entered = trio.Event()
        self.release = trio.Event()
        self.ticked = trio.Event()
        self.refusals: dict[str, str] = {}
        self.shared = Answer([1, 2])
        """The one reply object the Room's handler returns to every request."""


state = State()


@pytest.fixture(autouse=True)
def fresh_state() -> None:
    global state
    state = State()


def submit_sync_outcome(call: zl.SpotSendCall) -> str:
    """What ``call.submit_sync()`` did: the name of its error kind, or ``submitted``."""
    try:
        call.submit_sync()
    except zl.ZLinkError as error:
        return error.kind.name
    return "submitted"


@app.user_spot("paths.Room")
class Room(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        state.notes.append(msg.n)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        state.asked.append(req.text)
        if req.text == "hold":
            state.entered.set()
            await state.release.wait()
        return state.shared


@app.user_spot("paths.Prober")
class Prober(NoMembers):
    async def on_initialize(self) -> None:
        state.refusals["lifecycle callback"] = self._try_sync("initialize")
        self.context.timers.start("probe", 0.01)

    @zl.timer_handler("probe")
    async def probe(self, tick: zl.TimerTick) -> None:
        self.context.timers.stop("probe")
        state.refusals["timer tick"] = self._try_sync("timer")
        state.ticked.set()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        state.refusals["handler"] = self._try_sync(req.text)
        return Answer([])

    def _try_sync(self, text: str) -> str:
        return submit_sync_outcome(self.context.route.send_to_spot("room", Note(len(text))))


async def send_all(mesh: RouteMesh, peer: NodeRid, results: list[object]) -> None:
    """Send ``COUNT`` numbered messages of ``BIG`` bytes to ``peer``, noting what each returned."""
    for number in range(COUNT):
        results.append(await mesh.send(peer, numbered(number, BIG)))


@pytest.mark.spec("CMP-5.1", "CMP-5.2", "CMP-5.3", "CMP-5.4", "CMP-5.7", "CMP-5.17", "CMP-5.19")
async def test_a_send_at_the_hwm_waits_without_limit_then_goes_once_to_its_own_peer() -> None:
    """A send to held b waits at the HWM for two liveness windows without ending while c has
    room; once b reads, every send returned None, b got each message once and in order, and c
    got none of them."""
    async with (
        node("a", send_hwm=1) as (a, _),
        node("b", receive_hwm=1) as (b, held),
        node("c") as (c, idle),
    ):
        await connect(a, b)
        await connect(a, c)
        held.hold = trio.Event()
        results: list[object] = []
        done = trio.Event()

        async def sender() -> None:
            await send_all(a, B, results)
            done.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(sender)
            try:
                with trio.fail_after(10):
                    await until(lambda: a.waiting_sends(B) == 1)
                with trio.move_on_after(2 * WINDOW):
                    await done.wait()
                assert not done.is_set()  # still waiting: no time limit ended it
                assert 1 == a.waiting_sends(B)
                assert 0 < len(results) < COUNT
            finally:
                held.hold.set()  # a waiting send cannot be cancelled: b reads again instead
        with trio.fail_after(30):
            await a.send(B, numbered(COUNT))  # behind every earlier send on the connection
            await held.wait_for(COUNT + 1)
        assert [None] * COUNT == results
        numbers = [int.from_bytes(message.payload[:8], "big") for _, message in held.messages]
        assert list(range(COUNT + 1)) == numbers
        assert [] == idle.messages
        assert [] == [kind.name for kind in zl.ErrorKind if "BACKPRESS" in kind.name]


@pytest.mark.spec("CMP-4.1")
async def test_one_way_calls_offer_submit_and_submit_sync_and_no_try_variant(
    store_dsn: str,
) -> None:
    """The one-way calls (a send to a Spot, a send to an Actor) have submit() and submit_sync()
    and no non-blocking try variant; neither has the route client that makes them."""
    async with open_test_host(app, dsn=store_dsn) as host:
        route = host.route
        calls = [route.send_to_spot("room", Note(1)), route.send_to_actor("user", Note(1))]
        for call in calls:
            assert callable(call.submit)
            assert callable(call.submit_sync)
        for holder in (*calls, route):
            names = [name.lower() for name in dir(holder) if not name.startswith("_")]
            assert [] == [name for name in names if "try" in name or "nowait" in name]


@pytest.mark.spec("CMP-4.9")
async def test_submit_sync_is_refused_in_every_runtime_execution_context(store_dsn: str) -> None:
    """submit_sync() raises INVALID_OPERATION, submitting nothing, from a Spot's lifecycle
    callback, its handler, its timer tick, another task of the host's loop and a CPU worker
    callback."""
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("room", "paths.Room").submit()
        await host.spots.get_or_create("prober", "paths.Prober").submit()
        with trio.fail_after(10):
            await host.route.request_to_spot("prober", Ask("ask"), reply_type=Answer).submit()
            await state.ticked.wait()
        call = host.route.send_to_spot("room", Note(-1))
        state.refusals["trio task"] = submit_sync_outcome(call)
        worker = host.workers.run_cpu_worker(submit_sync_outcome, call)
        with trio.fail_after(10):
            state.refusals["cpu worker"] = await worker.submit()
        await host.wait_quiet()
    refused = dict.fromkeys(
        ["lifecycle callback", "timer tick", "handler", "trio task", "cpu worker"],
        "INVALID_OPERATION",
    )
    assert refused == state.refusals
    assert [] == state.notes


@pytest.mark.spec("CMP-2.9")
async def test_cancelling_or_consuming_one_call_leaves_every_other_call_alone(
    store_dsn: str,
) -> None:
    """Cancelling the wait of one request does not end another request to the same Spot; each
    caller gets a reply of its own although the handler returns one shared object, so changing
    one result changes no other; a call made before the others were consumed is still usable."""
    async with open_test_host(app, dsn=store_dsn) as host:
        await host.spots.get_or_create("room", "paths.Room").submit()
        route = host.route
        spare = route.request_to_spot("room", Ask("spare"), reply_type=Answer)
        first = route.request_to_spot("room", Ask("hold"), reply_type=Answer)
        second = route.request_to_spot("room", Ask("queued"), reply_type=Answer)
        results: dict[str, Answer] = {}
        cancelled = trio.CancelScope()

        async def wait_first() -> None:
            with cancelled:
                results["first"] = await first.submit()

        async def wait_second() -> None:
            results["second"] = await second.submit()

        with trio.fail_after(10):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_first)
                await state.entered.wait()
                nursery.start_soon(wait_second)
                await trio.testing.wait_all_tasks_blocked()
                assert {} == results  # the second waits behind the held turn
                cancelled.cancel()
                await trio.testing.wait_all_tasks_blocked()
                state.release.set()
            assert cancelled.cancelled_caught
            assert ["second"] == list(results)
            results["second"].items.append(3)  # consumed and changed by its caller
            third = await route.request_to_spot("room", Ask("x"), reply_type=Answer).submit()
            third.items.append(4)
            assert Answer([1, 2]) == await spare.submit()
        assert Answer([1, 2]) == state.shared
        assert Answer([1, 2, 3]) == results["second"]
        assert Answer([1, 2, 4]) == third
        with pytest.raises(zl.ZLinkError) as again:
            await second.submit()
        assert zl.ErrorKind.INVALID_OPERATION == again.value.kind


@pytest.mark.spec("CMP-5.20")
async def test_completed_sends_to_another_host_are_never_sent_again(store_dsn: str) -> None:
    """Sends and requests from one host to a Spot on another each complete once; when the mesh
    is quiet the owner has handled every one of them exactly once, in order."""
    async with open_test_mesh(app, hosts=2, dsn=store_dsn) as mesh:
        await mesh[1].spots.get_or_create("room", "paths.Room").submit()
        route = mesh[0].route
        results: list[object] = []
        with trio.fail_after(20):
            for number in range(50):
                results.append(await route.send_to_spot("room", Note(number)).submit())
            for text in ("one", "two"):
                await route.request_to_spot("room", Ask(text), reply_type=Answer).submit()
            await mesh.wait_quiet()
        assert [None] * 50 == results
        assert list(range(50)) == state.notes
        assert ["one", "two"] == state.asked
