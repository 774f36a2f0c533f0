"""Bounded queues on one host: each Spot's and Actor's own queue limit, and the host's shared
application job queue (specs/errors.md ERR-5.10, ERR-8.1, ERR-8.2, ERR-9.4; specs/registration.md
REG-8.3)."""

from __future__ import annotations

import contextlib
import uuid
from pathlib import Path

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
handled: list[str] = []


class Gate:
    def __init__(self) -> None:
        self.release = trio.Event()
        self.entered = trio.Event()


gate = Gate()


@app.message("queue.Work")
@attrs.frozen
class Work:
    name: str


@app.message("queue.Done")
@attrs.frozen
class Done:
    name: str


class Worker:
    async def _work(self, msg: Work) -> Done:
        handled.append(msg.name)
        if msg.name == "first":
            gate.entered.set()
            await gate.release.wait()
        return Done(msg.name)


@app.user_spot("queue.Room")
class Room(Worker, NoMembers):
    @zl.request_handler(Work)
    async def work(self, msg: Work) -> Done:
        return await self._work(msg)

    @zl.packet_handler(Done)
    async def note(self, msg: Done) -> None:
        handled.append(msg.name)


@app.actor("queue.Player")
class Player(Worker, zl.Actor):
    @zl.request_handler(Work)
    async def work(self, msg: Work) -> Done:
        return await self._work(msg)

    @zl.packet_handler(Done)
    async def note(self, msg: Done) -> None:
        handled.append(msg.name)


@pytest.fixture(autouse=True)
def reset() -> None:
    global gate
    gate = Gate()
    handled.clear()


def config(store_dsn: str, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, **values)  # type: ignore[arg-type]  # test values


async def start_first(host: zl.Host, nursery: trio.Nursery, to_actor: bool, target: str) -> None:
    async def first() -> None:
        if to_actor:
            await host.route.request_to_actor(target, Work("first"), reply_type=Done).submit()
        else:
            await host.route.request_to_spot(target, Work("first"), reply_type=Done).submit()

    nursery.start_soon(first)
    with trio.fail_after(5):
        await gate.entered.wait()


@pytest.mark.parametrize("to_actor", [False, True], ids=["spot", "actor"])
@pytest.mark.spec("ERR-5.10", "ERR-9.4", "ERR-8.2")
async def test_a_full_queue_refuses_requests_and_makes_sends_wait(
    store_dsn: str, to_actor: bool
) -> None:
    """With mailbox_limit=2 and the first turn blocked, two more requests queue, the next one
    ends at once with CAPACITY_EXCEEDED, and a send waits for room instead of failing."""
    target = f"q-{uuid.uuid4().hex[:10]}"
    async with zl.open_host(app, config(store_dsn, mailbox_limit=2)) as host:
        if to_actor:
            await host.actors.create(target, "queue.Player").submit()
        else:
            await host.spots.get_or_create(target, "queue.Room").submit()

        def request(name: str) -> zl.SpotRequestCall[Done] | zl.ActorRequestCall[Done]:
            if to_actor:
                return host.route.request_to_actor(target, Work(name), reply_type=Done)
            return host.route.request_to_spot(target, Work(name), reply_type=Done)

        def send(name: str) -> zl.SpotSendCall | zl.ActorSendCall:
            if to_actor:
                return host.route.send_to_actor(target, Done(name))
            return host.route.send_to_spot(target, Done(name))

        replies: list[str] = []
        sent = trio.Event()

        async def queued(name: str) -> None:
            replies.append((await request(name).submit()).name)

        async def waiting_send() -> None:
            await send("late").submit()
            sent.set()

        async with trio.open_nursery() as nursery:
            await start_first(host, nursery, to_actor, target)
            nursery.start_soon(queued, "second")
            nursery.start_soon(queued, "third")
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(zl.ZLinkError) as caught:
                await request("fourth").submit()
            assert zl.ErrorKind.CAPACITY_EXCEEDED == caught.value.kind
            nursery.start_soon(waiting_send)
            await trio.testing.wait_all_tasks_blocked()
            assert not sent.is_set()
            gate.release.set()
            with trio.fail_after(5):
                await sent.wait()
        assert ["second", "third"] == sorted(replies)
        assert "fourth" not in handled
        with trio.fail_after(5):
            while "late" not in handled:
                await trio.testing.wait_all_tasks_blocked()


@pytest.mark.spec("ERR-8.1")
async def test_the_shared_job_queue_is_a_wait_a_request_can_cancel(store_dsn: str) -> None:
    """A running turn holds no permit; with both permits held by queued messages, a request
    waiting for a permit is cancelled by its caller's scope and admits nothing, another ends
    with its deadline; a send waits instead of failing (shielded from its caller, DEC-1: see
    test_send_shielded.py) and is admitted once a queued turn starts."""
    target = f"q-{uuid.uuid4().hex[:10]}"
    async with zl.open_host(app, config(store_dsn, app_job_queue_size=2)) as host:
        await host.spots.get_or_create(target, "queue.Room").submit()
        async with trio.open_nursery() as nursery:
            await start_first(host, nursery, False, target)
            await host.route.send_to_spot(target, Done("queued")).submit()
            await host.route.send_to_spot(target, Done("queued 2")).submit()
            with trio.move_on_after(0.2) as waited:
                cancelled = host.route.request_to_spot(target, Work("cancelled"), reply_type=Done)
                await cancelled.timeout(60).submit()
            assert waited.cancelled_caught
            with pytest.raises(zl.ZLinkError) as caught:
                await (
                    host.route.request_to_spot(target, Work("timed"), reply_type=Done)
                    .timeout(0.2)
                    .submit()
                )
            assert zl.ErrorKind.DEADLINE_EXCEEDED == caught.value.kind
            admitted = trio.Event()

            async def later() -> None:
                await host.route.send_to_spot(target, Done("later")).submit()
                admitted.set()

            nursery.start_soon(later)
            await trio.testing.wait_all_tasks_blocked()
            assert not admitted.is_set()
            gate.release.set()
            with trio.fail_after(5):
                await admitted.wait()
        reply = await host.route.request_to_spot(target, Work("check"), reply_type=Done).submit()
        assert "check" == reply.name
    assert ["first", "queued", "queued 2", "later", "check"] == handled


@pytest.mark.spec("REG-8.3")
def test_the_queue_limit_is_checked_with_the_config() -> None:
    """mailbox_limit outside 1..2**31-1 or not an int fails when the config is made."""
    for bad in (0, -1, 2**31, 1.5, True, "8"):
        with pytest.raises(zl.ConfigurationError, match="mailbox_limit"):
            zl.HostConfig(mesh="m", mailbox_limit=bad)  # type: ignore[arg-type]  # bad on purpose
    assert 2**31 - 1 == zl.HostConfig(mesh="m", mailbox_limit=2**31 - 1).mailbox_limit


async def start_first_until_shutdown(
    host: zl.Host, nursery: trio.Nursery, to_actor: bool, target: str
) -> None:
    """``start_first`` whose request may end SHUTTING_DOWN: these tests shut the host down."""

    async def first() -> None:
        call = (
            host.route.request_to_actor(target, Work("first"), reply_type=Done)
            if to_actor
            else host.route.request_to_spot(target, Work("first"), reply_type=Done)
        )
        with contextlib.suppress(zl.ZLinkError):
            await call.submit()

    nursery.start_soon(first)
    with trio.fail_after(5):
        await gate.entered.wait()


async def _waiting_send_ends(
    store_dsn: str, to_actor: bool, end: str, **values: object
) -> zl.ZLinkError:
    """With the first turn blocked and the queue full, start a send that waits for room, end the
    wait with ``end`` ("close" the target, or "shutdown" the host) and return the send's error."""
    target = f"q-{uuid.uuid4().hex[:10]}"
    errors: list[zl.ZLinkError] = []
    async with zl.open_host(app, config(store_dsn, mailbox_limit=1, **values)) as host:
        if to_actor:
            ref: zl.ActorRef | zl.SpotRef | None = (
                await host.actors.create(target, "queue.Player").submit()
            ).actor_ref
            send = host.route.send_to_actor
        else:
            ref = (await host.spots.get_or_create(target, "queue.Room").submit()).spot_ref
            send = host.route.send_to_spot
        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.deadline = trio.current_time() + 30  # a hang fails, never waits
            await start_first_until_shutdown(host, nursery, to_actor, target)
            await send(target, Done("queued")).submit()  # fills the queue of one

            async def waiting() -> None:
                try:
                    await send(target, Done("waiting")).submit()
                except zl.ZLinkError as error:
                    errors.append(error)

            nursery.start_soon(waiting)
            await trio.testing.wait_all_tasks_blocked()
            assert [] == errors  # still waiting for room
            if end == "shutdown":
                nursery.start_soon(host.shutdown)
            elif isinstance(ref, zl.ActorRef):
                nursery.start_soon(host.actors.destroy, ref)
            else:
                assert ref is not None
                nursery.start_soon(host.spots.close, ref)
            await trio.testing.wait_all_tasks_blocked()
            waited = list(errors)  # what the wait ended with, before anything is released
            gate.release.set()
    assert 1 == len(waited), waited
    assert "waiting" not in handled
    return waited[0]


@pytest.mark.parametrize("to_actor", [False, True], ids=["spot", "actor"])
@pytest.mark.spec("CMP-7.9")
async def test_a_send_waiting_for_room_ends_unavailable_when_its_target_closes(
    store_dsn: str, to_actor: bool
) -> None:
    """A one-way send waiting for room in a full queue ends UNAVAILABLE when the Spot is closed
    or the Actor destroyed before it was admitted, not NOT_FOUND."""
    error = await _waiting_send_ends(store_dsn, to_actor, "close")
    assert zl.ErrorKind.UNAVAILABLE == error.kind


@pytest.mark.parametrize("to_actor", [False, True], ids=["spot", "actor"])
@pytest.mark.spec("CMP-7.9", "SHUT-4.7")
async def test_a_send_waiting_for_room_ends_shutting_down_with_its_host(
    store_dsn: str, to_actor: bool
) -> None:
    """A one-way send waiting for room in a full queue ends SHUTTING_DOWN when its host shuts
    down."""
    error = await _waiting_send_ends(store_dsn, to_actor, "shutdown")
    assert zl.ErrorKind.SHUTTING_DOWN == error.kind


@pytest.mark.parametrize("call", ["send", "send to actor", "request"])
@pytest.mark.spec("CMP-7.10")
async def test_waits_for_a_job_permit_end_shutting_down_as_shutdown_begins(
    store_dsn: str, call: str
) -> None:
    """With the only job permit held by a queued message behind a blocked turn, a send (to a
    Spot or an Actor) or a request waiting for a permit ends SHUTTING_DOWN as soon as shutdown
    begins, not when the blocked turn is cut at the closing deadline."""
    target, player = f"q-{uuid.uuid4().hex[:10]}", f"p-{uuid.uuid4().hex[:10]}"
    errors: list[zl.ZLinkError] = []
    async with zl.open_host(app, config(store_dsn, app_job_queue_size=1)) as host:
        await host.spots.get_or_create(target, "queue.Room").submit()
        await host.actors.create(player, "queue.Player").submit()
        async with trio.open_nursery() as nursery:
            nursery.cancel_scope.deadline = trio.current_time() + 30  # a hang fails, never waits
            await start_first_until_shutdown(host, nursery, False, target)
            await host.route.send_to_spot(target, Done("queued")).submit()  # the only permit

            async def waiting() -> None:
                try:
                    if call == "send":
                        await host.route.send_to_spot(target, Done("waiting")).submit()
                    elif call == "send to actor":
                        await host.route.send_to_actor(player, Done("waiting")).submit()
                    else:
                        request = host.route.request_to_spot(target, Work("w"), reply_type=Done)
                        await request.timeout(60).submit()
                except zl.ZLinkError as error:
                    errors.append(error)

            nursery.start_soon(waiting)
            await trio.testing.wait_all_tasks_blocked()
            assert [] == errors  # still waiting for a permit
            nursery.start_soon(host.shutdown)
            await trio.testing.wait_all_tasks_blocked()
            waited = list(errors)
            gate.release.set()
    assert [zl.ErrorKind.SHUTTING_DOWN] == [error.kind for error in waited]
    assert "waiting" not in handled
    assert "w" not in handled


@pytest.mark.spec("REG-8.4")
def test_the_store_data_dir_is_a_path() -> None:
    """A str (or anything but a Path) for store_data_dir is a ConfigurationError naming it, when
    the config is made; a Path and None pass."""
    for bad in ("/tmp/zlink-data", 3, b"/tmp"):
        with pytest.raises(zl.ConfigurationError, match=r"store_data_dir takes a pathlib\.Path"):
            zl.HostConfig(mesh="m", store_data_dir=bad)  # type: ignore[arg-type]  # bad on purpose
    zl.HostConfig(mesh="m", store_data_dir=Path("/tmp/zlink-data"))
    zl.HostConfig(mesh="m", store_data_dir=None)
