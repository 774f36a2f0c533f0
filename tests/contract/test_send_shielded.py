"""A one-way send cannot be cancelled by its caller (specs/decisions.md DEC-1; specs/completion.md
CMP-7.1..CMP-7.5, CMP-7.11, CMP-7.12; specs/overload.md OVL-2): its waits for room in a full
mailbox, for a job permit and for a peer's credit are shielded, as are those of resolving its
route (the owner's store read, a closing incarnation), and end only by admission, route loss or
shutdown.

Each test cancels the caller's scope while its send waits, then checks that the send was still
waiting (not ended by the cancellation), and that it then ends by admission (the handler records
the message; the caller sees its cancellation only at its next checkpoint after ``submit()``
returned) or by its host's shutdown (``SHUTTING_DOWN``) or its owner's departure
(``UNAVAILABLE``). The interleaving is forced with events and ``wait_all_tasks_blocked``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, ClassVar

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.peers import meet
from tests.members import NoMembers
from zlink_trio._runtime.declarations.system import Flush
from zlink_trio.testing import TestHost, VirtualClock, open_test_host, open_test_mesh

app = zl.Application()
noted: list[int] = []
BLOCKING = 0
"""The note whose turn waits for ``Gate.release``."""


class Gate:
    entered = trio.Event()
    release = trio.Event()


@pytest.fixture(autouse=True)
def reset() -> None:
    """Fresh events and records for each test (each runs its own Trio loop)."""
    Gate.entered, Gate.release = trio.Event(), trio.Event()
    Lodge.closing, Lodge.left = trio.Event(), trio.Event()
    Lodge.again_seen = []
    Starter.starting = trio.Event()
    noted.clear()


@app.message("shield.Note")
@attrs.frozen
class Note:
    n: int


async def _note(msg: Note) -> None:
    if msg.n == BLOCKING:
        Gate.entered.set()
        await Gate.release.wait()
    noted.append(msg.n)


@app.user_spot("shield.Room")
class Room(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        await _note(msg)


@app.message("shield.Leave")
@attrs.frozen
class Leave:
    """Close the Lodge, then send ``Note(1)`` to the Room ``r`` (which may wait for room)."""

    stuck: bool


@app.message("shield.Again")
@attrs.frozen
class Again:
    """Close the Lodge, then send its next incarnation ``Note(4)`` from the closing turn."""


@app.instance_spot("shield.Lodge")
class Lodge(zl.InstanceSpot):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        await _note(msg)

    @zl.packet_handler(Leave)
    async def leave(self, msg: Leave) -> None:
        await self.context.close()  # the close completes once this turn ends (SPOT-38)
        Lodge.closing.set()
        if msg.stuck:  # a send the closing deadline cannot cut (CMP-7.5)
            await self.context.route.send_to_spot("r", Note(3)).submit()
        Lodge.left.set()
        await Gate.release.wait()

    @zl.packet_handler(Again)
    async def again(self, msg: Again) -> None:
        await self.context.close()
        call = self.context.route.send_to_spot(self.context.spot_id, Note(4))
        try:
            await call.instance_spot("shield.Lodge").submit()
        except zl.ZLinkError as error:
            Lodge.again_seen.append(error.kind.name)
        else:
            Lodge.again_seen.append("admitted")

    closing = trio.Event()
    left = trio.Event()
    again_seen: ClassVar[list[str]] = []


@app.user_spot("shield.Starter")
class Starter(NoMembers):
    """Its start-up sends to the Room ``r`` (which may wait for room) before it is Ready."""

    starting = trio.Event()

    async def on_initialize(self) -> None:
        Starter.starting.set()
        await self.context.route.send_to_spot("r", Note(6)).submit()


@app.actor("shield.Player")
class Player(zl.Actor):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        await _note(msg)


class Caller:
    """One application task whose send is cancelled while it waits: what it saw, in order."""

    def __init__(self, call: zl.SpotSendCall | zl.ActorSendCall) -> None:
        self.call = call
        self.scope = trio.CancelScope()
        self.seen: list[str] = []
        self.done = trio.Event()

    async def run(self) -> None:
        try:
            with self.scope:
                try:
                    await self.call.submit()
                except zl.ZLinkError as error:
                    self.seen.append(error.kind.name)
                    return
                self.seen.append("admitted")
                await trio.lowlevel.checkpoint()  # the pending cancellation takes effect here
                self.seen.append("not cancelled")
            if self.scope.cancelled_caught:
                self.seen.append("cancelled")
        finally:
            self.done.set()

    async def ended(self, within: float) -> list[str]:
        """What the send ended with, once it ends or after ``within`` seconds (then ``[]``): a
        bound outside the shield, since ``fail_after`` cannot end a shielded wait."""
        with trio.move_on_after(within):
            await self.done.wait()
        return list(self.seen)

    async def cancel_while_waiting(
        self, nursery: trio.Nursery, waiting: Callable[[], bool] = lambda: True
    ) -> None:
        """Start the send, cancel its caller's scope once it waits (once ``waiting()`` says it
        is in the wait under test, not still resolving its owner); it must still be waiting."""
        nursery.start_soon(self.run)
        await trio.testing.wait_all_tasks_blocked()
        while not waiting():  # noqa: ASYNC110  # a store read may come first (CMP-7.1)
            await trio.sleep(0.001)
        assert [] == self.seen  # it waits
        self.scope.cancel()
        await trio.testing.wait_all_tasks_blocked()
        assert [] == self.seen  # still waiting: the cancellation did not end it


async def _target(host: TestHost, to_actor: bool) -> zl.SpotSendCall | zl.ActorSendCall:
    """Make the Spot or Actor ``t`` and start its blocking turn; a send of a note to it."""
    if to_actor:
        await host.actors.create("t", "shield.Player").submit()
    else:
        await host.spots.get_or_create("t", "shield.Room").submit()
    send = host.route.send_to_actor if to_actor else host.route.send_to_spot
    await send("t", Note(BLOCKING)).submit()
    await Gate.entered.wait()
    await send("t", Note(1)).submit()  # queued behind the blocked turn: the queue, or the permit
    return send("t", Note(2))


def _limits(full: str) -> dict[str, int]:
    """Host settings with one place for what ``full`` names: a mailbox or the job permits."""
    return {"mailbox_limit": 1} if full == "mailbox" else {"app_job_queue_size": 1}


@pytest.mark.parametrize("to_actor", [False, True], ids=["spot", "actor"])
@pytest.mark.parametrize("full", ["mailbox", "permits"])
@pytest.mark.spec("CMP-7.5", "CMP-7.2", "DEC-1")
async def test_a_cancelled_send_waiting_for_room_or_a_permit_is_still_admitted(
    store_dsn: str, full: str, to_actor: bool
) -> None:
    """A send waiting for room in a full Spot or Actor queue, or for the host's only job permit,
    whose caller's scope is cancelled, goes on waiting; once the blocked turn ends it is admitted
    and handled, and its caller sees the cancellation only after submit() returned."""
    async with open_test_host(app, dsn=store_dsn, **_limits(full)) as host:
        with trio.fail_after(20):
            caller = Caller(await _target(host, to_actor))
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery)
                assert [] == noted  # the blocked turn has not ended
                Gate.release.set()
            assert ["admitted", "cancelled"] == caller.seen
            await host.wait_quiet()
    assert [0, 1, 2] == noted


@pytest.mark.parametrize("to_actor", [False, True], ids=["spot", "actor"])
@pytest.mark.parametrize("full", ["mailbox", "permits"])
@pytest.mark.spec("CMP-7.5", "CMP-7.4", "CMP-7.9", "CMP-7.10", "DEC-1")
async def test_shutdown_ends_a_cancelled_send_waiting_for_room_or_a_permit(
    store_dsn: str, full: str, to_actor: bool
) -> None:
    """A send waiting for room or a permit whose caller's scope was cancelled still ends, with
    SHUTTING_DOWN, as soon as its host shuts down, while the turn that fills the queue is still
    blocked: the shield never leaves a wait that only a cancellation could end."""
    async with open_test_host(app, dsn=store_dsn, **_limits(full)) as host:
        with trio.fail_after(20):
            caller = Caller(await _target(host, to_actor))
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery)
                nursery.start_soon(host.shutdown)
                ended = await caller.ended(10)  # before the blocked turn is released
                Gate.release.set()  # also what ends the wait if shutdown did not
    assert ["SHUTTING_DOWN"] == ended
    assert 2 not in noted


def _credits(sender: TestHost) -> Any:
    remote: Any = sender.host._tree.remote
    return remote.credits


def _waiting_for_credit(sender: TestHost, owner: TestHost) -> Callable[[], bool]:
    """Whether a send of ``sender`` waits for ``owner``'s credit for ``t`` now."""
    paused = _credits(sender)._paused[(owner.node_rid, zl.SpotId("t"))]
    return lambda: paused.statistics().tasks_waiting == 1


async def _paused_send(sender: TestHost, owner: TestHost) -> Caller:
    """The Spot ``t`` on ``owner``, known to ``sender``, which holds a ``zlink.Pause`` for it
    (what its reader does with the owner's word, credit.py Rule 1); a send to it from
    ``sender``."""
    await meet(sender, owner)
    await owner.spots.get_or_create("t", "shield.Room").submit()
    await sender.route.send_to_spot("t", Note(1)).submit()  # the route and the owner are known
    await owner.wait_quiet()
    _credits(sender).pause(owner.node_rid, zl.SpotId("t"))
    return Caller(sender.route.send_to_spot("t", Note(2)))


@pytest.mark.spec("CMP-7.5", "CMP-7.2", "OVL-2", "DEC-1")
async def test_a_cancelled_send_waiting_for_credit_is_still_sent(store_dsn: str) -> None:
    """A send paused by its owner whose caller's scope is cancelled goes on waiting; once the
    owner resumes it is sent and handled, and its caller sees the cancellation only after
    submit() returned."""
    async with open_test_mesh(app, hosts=2, dsn=store_dsn) as mesh:
        sender, owner = mesh[0], mesh[1]
        with trio.fail_after(30):
            caller = await _paused_send(sender, owner)
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery, _waiting_for_credit(sender, owner))
                _credits(sender).resume(owner.node_rid, zl.SpotId("t"))
            assert ["admitted", "cancelled"] == caller.seen
            await mesh.wait_quiet()
    assert [1, 2] == noted


@pytest.mark.parametrize("end", ["sender shuts down", "owner leaves"])
@pytest.mark.spec("CMP-7.5", "CMP-7.3", "CMP-7.4", "OVL-2", "DEC-1")
async def test_shutdown_or_route_loss_ends_a_cancelled_send_waiting_for_credit(
    store_dsn: str, end: str
) -> None:
    """A paused send whose caller's scope was cancelled still ends: SHUTTING_DOWN when its own
    host shuts down, UNAVAILABLE when the owner leaves the mesh; never by the cancellation."""
    async with open_test_mesh(app, hosts=2, dsn=store_dsn) as mesh:
        sender, owner = mesh[0], mesh[1]
        with trio.fail_after(30):
            caller = await _paused_send(sender, owner)
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery, _waiting_for_credit(sender, owner))
                nursery.start_soon(
                    sender.shutdown if end == "sender shuts down" else owner.shutdown
                )
                ended = await caller.ended(10)
                _credits(sender).resume(owner.node_rid, zl.SpotId("t"))  # ends it if that did not
    expected = "SHUTTING_DOWN" if end == "sender shuts down" else "UNAVAILABLE"
    assert [expected] == ended
    assert [1] == noted


async def _closing_lodge(host: TestHost, *, stuck: bool) -> Caller:
    """The Instance Spot ``i`` closing while its turn waits for ``Gate.release``; with
    ``stuck`` that turn first sends to the Room ``r``, whose queue is full behind its own blocked
    turn, so the closing deadline cannot end it. A send to the next ``i`` with instance_spot()."""
    send = host.route.send_to_spot
    if stuck:
        await host.spots.get_or_create("r", "shield.Room").submit()
        await send("r", Note(BLOCKING)).submit()
        await Gate.entered.wait()
        await send("r", Note(1)).submit()  # r's mailbox (limit 1) is full now
    await send("i", Leave(stuck)).instance_spot("shield.Lodge").submit()
    await Lodge.closing.wait()
    await trio.testing.wait_all_tasks_blocked()  # in the send to r, or waiting for the release
    return Caller(send("i", Note(2)).instance_spot("shield.Lodge"))


@pytest.mark.spec("CMP-7.11", "CMP-7.2", "DEC-1")
async def test_a_cancelled_send_waiting_for_a_closing_incarnation_reaches_the_next(
    store_dsn: str,
) -> None:
    """A send with instance_spot() that finds its Instance Spot's incarnation closing waits for
    it to close; its caller's cancellation does not end that wait: the next incarnation gets the
    message, and the caller sees the cancellation only after submit() returned."""
    async with open_test_host(app, dsn=store_dsn, closing_timeout=60.0) as host:
        with trio.fail_after(20):
            caller = await _closing_lodge(host, stuck=False)
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery)
                Gate.release.set()  # the closing turn ends, the incarnation closes
            assert ["admitted", "cancelled"] == caller.seen
            await host.wait_quiet()
    assert [2] == noted


@pytest.mark.spec("CMP-7.11", "CMP-7.4", "DEC-1")
async def test_shutdown_ends_a_cancelled_send_waiting_for_a_closing_incarnation(
    store_dsn: str,
) -> None:
    """A send waiting for a closing incarnation whose caller's scope was cancelled ends with
    SHUTTING_DOWN once its host shuts down (the shutdown cuts the closing turn), not by the
    cancellation and not by the turn's own end."""
    async with open_test_host(app, dsn=store_dsn, closing_timeout=1.0) as host:
        with trio.fail_after(20):
            caller = await _closing_lodge(host, stuck=False)
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery)
                nursery.start_soon(host.shutdown)
                ended = await caller.ended(10)  # before the closing turn is released
                Gate.release.set()
    assert ["SHUTTING_DOWN"] == ended
    assert 2 not in noted


@pytest.mark.spec("CMP-7.12", "CMP-7.11", "DEC-1")
async def test_a_send_waiting_for_an_incarnation_whose_close_is_overdue_is_unavailable(
    store_dsn: str,
) -> None:
    """The closing incarnation's turn is stuck in a shielded send to a full queue, so its
    closing deadline cannot end it: a send waiting for that incarnation, its caller's scope
    cancelled, ends UNAVAILABLE once the close is overdue (the closing deadline and
    store_release_timeout passed), while the stuck turn still waits; nothing of it is handled."""
    clock = VirtualClock()
    clock.settle = trio.testing.wait_all_tasks_blocked  # not wait_quiet: a turn stays stuck
    config = {"closing_timeout": 1.0, "mailbox_limit": 1}
    async with open_test_host(app, dsn=store_dsn, clock=clock, **config) as host:
        with trio.fail_after(30):
            caller = await _closing_lodge(host, stuck=True)
            overdue = clock.now() + 1.0 + zl.HostConfig("m", **config).store_release_timeout
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery)
                await clock.advance_to(overdue - 0.5)  # the closing deadline passed, not more
                assert [] == caller.seen
                await clock.advance_to(overdue)
                ended = await caller.ended(10)
                assert not Lodge.left.is_set()  # the stuck turn still waits for room in r
                Gate.release.set()
            await host.wait_quiet()
    assert ["UNAVAILABLE"] == ended
    assert 2 not in noted
    assert [0, 1, 3] == noted  # r's turns, then the stuck send once r had room


def _held_reads(host: TestHost) -> tuple[trio.Event, trio.Event]:
    """From now on each store read of a Location record by ``host`` waits, once it has begun
    (the first event), until the second event is set, then reads: an injected slow store."""
    authority: Any = host.host._node.authority
    read = authority.read
    reading, go = trio.Event(), trio.Event()

    async def held(target: object) -> object:
        reading.set()
        await go.wait()
        return await read(target)

    authority.read = held
    return reading, go


def _held_flushes(host: TestHost) -> tuple[trio.Event, trio.Event]:
    """From now on each ``zlink.Flush`` ``host`` sends a peer (the flush of a changed route)
    waits, once begun (the first event), until the second event is set: an injected slow old
    owner."""
    remote: Any = host.host._tree.remote
    request = remote.request
    flushing, go = trio.Event(), trio.Event()

    async def held(owner: object, target: object, message: object, *args: Any, **kw: Any) -> Any:
        if isinstance(message, Flush):
            flushing.set()
            await go.wait()
        return await request(owner, target, message, *args, **kw)

    remote.request = held
    return flushing, go


async def _make_t(host: TestHost, to_actor: bool) -> None:
    if to_actor:
        await host.actors.create("t", "shield.Player").submit()
    else:
        await host.spots.get_or_create("t", "shield.Room").submit()


async def _owner_being_read(
    sender: TestHost, other: TestHost, to_actor: bool
) -> tuple[trio.Event, trio.Event]:
    """``t`` lives on ``other``: the send first reads its owner from the store, which is held."""
    await _make_t(other, to_actor)
    return _held_reads(sender)


async def _old_route_flushing(
    sender: TestHost, other: TestHost, to_actor: bool
) -> tuple[trio.Event, trio.Event]:
    """``t`` lives on ``sender`` now, whose cache forgot ``other`` as its owner on a store change
    (as after a move here, RELOC-70): the send first flushes the route to ``other``, which is
    held."""
    await _make_t(sender, to_actor)
    target = zl.ActorId("t") if to_actor else zl.SpotId("t")
    sender.host._messaging.reroutes.forgot(target, other.node_rid)
    return _held_flushes(sender)


@pytest.mark.parametrize(
    "stage", [_owner_being_read, _old_route_flushing], ids=["owner read", "old route flush"]
)
@pytest.mark.parametrize("to_actor", [False, True], ids=["spot", "actor"])
@pytest.mark.spec("CMP-7.11", "CMP-7.2", "DEC-1")
async def test_a_cancelled_send_resolving_its_route_is_still_admitted(
    store_dsn: str,
    to_actor: bool,
    stage: Callable[[TestHost, TestHost, bool], Awaitable[tuple[trio.Event, trio.Event]]],
) -> None:
    """A send to a Spot or Actor whose route is being resolved (its owner read from the store,
    or its old route flushed): its caller's scope cancelled during that stage, the send goes
    on, is admitted and handled, and the caller sees the cancellation only after submit()
    returned."""
    async with open_test_mesh(app, hosts=2, dsn=store_dsn) as mesh:
        sender, other = mesh[0], mesh[1]
        with trio.fail_after(30):
            await meet(sender, other)
            waiting, go = await stage(sender, other, to_actor)
            send = sender.route.send_to_actor if to_actor else sender.route.send_to_spot
            caller = Caller(send("t", Note(2)))
            async with trio.open_nursery() as nursery:
                await caller.cancel_while_waiting(nursery, waiting.is_set)
                go.set()
            assert ["admitted", "cancelled"] == caller.seen
            await mesh.wait_quiet()
    assert [2] == noted


@pytest.mark.spec("CMP-7.12", "DEC-32")
async def test_a_closing_turn_sending_to_its_own_next_incarnation_is_unavailable_at_once(
    store_dsn: str,
) -> None:
    """An Instance Spot that closes itself and, in the same turn, sends with instance_spot() to
    its own id: the next incarnation can start only after this turn, so the send ends
    UNAVAILABLE at once instead of waiting (virtual time stands still, so any wait would be
    for good); the Spot then closes and nothing of the send is handled."""
    clock = VirtualClock()
    clock.settle = trio.testing.wait_all_tasks_blocked
    async with open_test_host(app, dsn=store_dsn, clock=clock) as host:
        with trio.fail_after(20):
            await host.route.send_to_spot("i", Again()).instance_spot("shield.Lodge").submit()
            while not Lodge.again_seen:  # noqa: ASYNC110  # the turn runs on the host's tasks
                await trio.sleep(0.01)
    assert ["UNAVAILABLE"] == Lodge.again_seen
    assert 4 not in noted


@pytest.mark.spec("CMP-7.12", "CMP-7.11", "SPOT-90")
async def test_a_send_waiting_for_a_creation_that_is_overdue_is_unavailable(
    store_dsn: str,
) -> None:
    """A User Spot's on_initialize is stuck in a shielded send to a full queue, so its creation's
    deadline cannot end it: a send to that Spot, its caller's scope cancelled, waits for the
    creation and ends UNAVAILABLE once the creation is overdue (its deadline and
    store_release_timeout passed), while the start-up still waits; nothing of it is handled."""
    clock = VirtualClock()
    clock.settle = trio.testing.wait_all_tasks_blocked  # not wait_quiet: a start-up stays stuck
    config = {"request_timeout": 2.0, "mailbox_limit": 1}
    creating: list[str] = []

    async def create(host: TestHost) -> None:
        try:
            await host.spots.get_or_create("a", "shield.Starter").submit()
            creating.append("created")
        except zl.ZLinkError as error:
            creating.append(error.kind.name)

    async with open_test_host(app, dsn=store_dsn, clock=clock, **config) as host:
        with trio.fail_after(30):
            send = host.route.send_to_spot
            await host.spots.get_or_create("r", "shield.Room").submit()
            await send("r", Note(BLOCKING)).submit()
            await Gate.entered.wait()
            await send("r", Note(1)).submit()  # r's mailbox (limit 1) is full now
            overdue = clock.now() + 2.0 + zl.HostConfig("m", **config).store_release_timeout
            async with trio.open_nursery() as nursery:
                nursery.start_soon(create, host)
                await Starter.starting.wait()
                caller = Caller(send("a", Note(2)))
                await caller.cancel_while_waiting(nursery)
                await clock.advance_to(overdue - 0.5)  # the creation's deadline passed, not more
                assert [] == caller.seen
                await clock.advance_to(overdue)
                ended = await caller.ended(10)
                assert [] == creating  # the start-up still waits for room in r
                Gate.release.set()
            await host.wait_quiet()
    assert ["UNAVAILABLE"] == ended
    assert ["DEADLINE_EXCEEDED"] == creating
    assert 2 not in noted
    assert [0, 1, 6] == noted  # r's turns, then the start-up's send once r had room
