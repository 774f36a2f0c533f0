"""One slow Spot never stalls its host (specs/overload.md OVL-1, OVL-3, OVL-4)."""

from __future__ import annotations

import uuid

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers
from zlink_trio._runtime.routing.backlog import Backlogs

app = zl.Application()
noted: list[int] = []


class Slow:
    release = trio.Event()
    entered = trio.Event()


@app.message("overload.Note")
@attrs.frozen
class Note:
    n: int


@app.message("overload.Ask")
@attrs.frozen
class Ask:
    n: int


@app.message("overload.Answer")
@attrs.frozen
class Answer:
    n: int


@app.user_spot("overload.Slow")
class SlowRoom(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        Slow.entered.set()
        await Slow.release.wait()
        noted.append(msg.n)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.n)


@app.actor("overload.SlowActor")
class SlowActor(zl.Actor):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        Slow.entered.set()
        await Slow.release.wait()
        noted.append(msg.n)

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.n)


@app.user_spot("overload.Quick")
class QuickRoom(NoMembers):
    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        pass

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(req.n)


@pytest.mark.spec("OVL-1")
async def test_a_full_spot_does_not_stall_requests_to_the_other_spots_of_its_host(
    store_dsn: str,
) -> None:
    """Another host floods a Spot whose handler is stuck, far past its mailbox: requests to the
    other Spots of that host are answered, a request to the full Spot is refused UNAVAILABLE at
    once, and once the Spot moves again every note is handled, in order."""
    noted.clear()
    Slow.release, Slow.entered = trio.Event(), trio.Event()
    mesh = f"ovl-{uuid.uuid4().hex[:8]}"
    slow, quick = f"slow-{uuid.uuid4().hex[:6]}", f"quick-{uuid.uuid4().hex[:6]}"
    sender_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn)
    owner_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, mailbox_limit=8)
    count = 200
    async with (
        zl.open_host(app, owner_config) as owner,
        zl.open_host(app, sender_config) as sender,
    ):
        await owner.spots.get_or_create(slow, "overload.Slow").submit()
        await owner.spots.get_or_create(quick, "overload.Quick").submit()
        with trio.fail_after(30):
            for n in range(count):
                await sender.route.send_to_spot(slow, Note(n)).submit()
            await Slow.entered.wait()
            # The request travels the same connection as the notes, behind all of them: it is
            # read only once the reader has passed every note, admitted or parked.
            answered = sender.route.request_to_spot(quick, Ask(7), reply_type=Answer)
            assert Answer(7) == await answered.timeout(3).submit()
            started = trio.current_time()
            with pytest.raises(zl.ZLinkError) as full:
                await (
                    sender.route.request_to_spot(slow, Ask(1), reply_type=Answer)
                    .timeout(3)
                    .submit()
                )
            assert zl.ErrorKind.UNAVAILABLE == full.value.kind
            assert trio.current_time() - started < 1.0
            Slow.release.set()
            while len(noted) < count:  # noqa: ASYNC110  # handled on the other host's tasks
                await trio.sleep(0.01)
        assert list(range(count)) == noted


@pytest.mark.spec("OVL-5")
async def test_a_full_actor_does_not_stall_requests_to_the_other_targets_of_its_host(
    store_dsn: str,
) -> None:
    """The same as OVL-1 for an Actor: another host floods an Actor whose handler is stuck,
    far past its queue; a request to a Spot of that host is answered, one to the Actor is
    refused UNAVAILABLE at once, and once it moves again every note is handled, in order
    (before, the reader waited for the Actor's queue and the Spot's request timed out)."""
    noted.clear()
    Slow.release, Slow.entered = trio.Event(), trio.Event()
    mesh = f"ovl-{uuid.uuid4().hex[:8]}"
    actor, quick = f"actor-{uuid.uuid4().hex[:6]}", f"quick-{uuid.uuid4().hex[:6]}"
    sender_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn)
    owner_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, mailbox_limit=8)
    count = 200
    async with (
        zl.open_host(app, owner_config) as owner,
        zl.open_host(app, sender_config) as sender,
    ):
        await owner.actors.create(actor, "overload.SlowActor").submit()
        await owner.spots.get_or_create(quick, "overload.Quick").submit()
        with trio.fail_after(30):
            for n in range(count):
                await sender.route.send_to_actor(actor, Note(n)).submit()
            await Slow.entered.wait()
            answered = sender.route.request_to_spot(quick, Ask(7), reply_type=Answer)
            assert Answer(7) == await answered.timeout(3).submit()
            started = trio.current_time()
            with pytest.raises(zl.ZLinkError) as full:
                await (
                    sender.route.request_to_actor(actor, Ask(1), reply_type=Answer)
                    .timeout(3)
                    .submit()
                )
            assert zl.ErrorKind.UNAVAILABLE == full.value.kind
            assert trio.current_time() - started < 1.0
            Slow.release.set()
            while len(noted) < count:  # noqa: ASYNC110  # handled on the other host's tasks
                await trio.sleep(0.01)
        assert list(range(count)) == noted


@pytest.mark.spec("OVL-4")
def test_one_spots_queue_holds_a_64th_of_the_job_permits_by_default() -> None:
    """The default mailbox limit leaves one busy Spot 1/64 of its host's job permits."""
    config = zl.HostConfig(mesh="m")
    assert 1024 == config.mailbox_limit
    assert 64 * config.mailbox_limit == config.app_job_queue_size


@pytest.mark.spec("OVL-3")
async def test_past_the_backlog_limit_the_reader_waits_until_one_is_admitted(
    store_dsn: str,
) -> None:
    """With every backlog together full, parking one more waits; it returns once a feeder has
    admitted a parked message, and everything is handled in order."""
    noted.clear()
    Slow.release, Slow.entered = trio.Event(), trio.Event()
    slow = f"slow-{uuid.uuid4().hex[:6]}"
    config = zl.HostConfig(mesh=f"ovl-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, mailbox_limit=1)
    async with zl.open_host(app, config) as host:
        await host.spots.get_or_create(slow, "overload.Slow").submit()
        await host.route.send_to_spot(slow, Note(0)).submit()  # taken by the stuck handler
        await host.route.send_to_spot(slow, Note(1)).submit()  # fills the mailbox
        await Slow.entered.wait()
        backlogs = Backlogs(host._messaging, limit=2)
        parked: list[int] = []

        async def park(nursery: trio.Nursery, n: int) -> None:
            await backlogs.park(nursery, host.node_rid, zl.SpotId(slow), Note(n), {}, None)
            parked.append(n)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                for n in (2, 3, 4):
                    nursery.start_soon(park, nursery, n)
                    await trio.testing.wait_all_tasks_blocked()
                assert [2, 3] == parked  # the third waits: two are parked, the limit
                assert 2 == backlogs.parked
                Slow.release.set()
                while len(noted) < 5:  # noqa: ASYNC110  # handled by the Spot's own task
                    await trio.sleep(0.01)
        assert [2, 3, 4] == parked
        assert [0, 1, 2, 3, 4] == noted


@pytest.mark.spec("OVL-1")
async def test_a_request_never_goes_ahead_of_the_sends_waiting_for_its_spot(
    store_dsn: str,
) -> None:
    """Sends from a peer wait in the Spot's backlog for job permits while its mailbox still has
    room: a request from that peer is refused UNAVAILABLE at once rather than racing the parked
    sends for the next permit."""
    noted.clear()
    Slow.release, Slow.entered = trio.Event(), trio.Event()
    mesh = f"ovl-{uuid.uuid4().hex[:8]}"
    slow = f"slow-{uuid.uuid4().hex[:6]}"
    owner_config = zl.HostConfig(
        mesh=mesh, store_dsn=store_dsn, app_job_queue_size=2, mailbox_limit=100
    )
    async with (
        zl.open_host(app, owner_config) as owner,
        zl.open_host(app, zl.HostConfig(mesh=mesh, store_dsn=store_dsn)) as sender,
    ):
        await owner.spots.get_or_create(slow, "overload.Slow").submit()
        with trio.fail_after(30):
            for n in range(6):  # one in the stuck turn, two hold the permits, three wait
                await sender.route.send_to_spot(slow, Note(n)).submit()
            await Slow.entered.wait()
            started = trio.current_time()
            ask = sender.route.request_to_spot(slow, Ask(1), reply_type=Answer)
            with pytest.raises(zl.ZLinkError) as refused:
                await ask.timeout(3).submit()
            assert zl.ErrorKind.UNAVAILABLE == refused.value.kind
            assert trio.current_time() - started < 1.0
            Slow.release.set()
            while len(noted) < 6:  # noqa: ASYNC110  # handled on the other host's tasks
                await trio.sleep(0.01)
        assert list(range(6)) == noted


@pytest.mark.spec("OVL-2")
async def test_a_full_spot_pauses_its_senders_and_no_other_target(store_dsn: str) -> None:
    """A flood to a stuck Spot of another host: once its backlog is long, the sender is paused
    for that Spot (its flood waits, the backlog stops growing far short of the flood), while a
    send to another Spot of the same host goes through; released, the flood resumes and every
    note is handled in order."""
    noted.clear()
    Slow.release, Slow.entered = trio.Event(), trio.Event()
    mesh = f"ovl-{uuid.uuid4().hex[:8]}"
    slow, quick = f"slow-{uuid.uuid4().hex[:6]}", f"quick-{uuid.uuid4().hex[:6]}"
    owner_config = zl.HostConfig(mesh=mesh, store_dsn=store_dsn, mailbox_limit=8)
    count = 20_000
    sent: list[int] = []
    async with (
        zl.open_host(app, owner_config) as owner,
        zl.open_host(app, zl.HostConfig(mesh=mesh, store_dsn=store_dsn)) as sender,
    ):
        await owner.spots.get_or_create(slow, "overload.Slow").submit()
        await owner.spots.get_or_create(quick, "overload.Quick").submit()
        inbound = owner._tree.inbound
        remote = sender._tree.remote
        assert inbound is not None
        assert remote is not None

        async def flood() -> None:
            for n in range(count):
                await sender.route.send_to_spot(slow, Note(n)).submit()
                sent.append(n)

        with trio.fail_after(60):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(flood)
                while not remote.credits.is_paused(owner.node_rid, zl.SpotId(slow)):  # noqa: ASYNC110
                    await trio.sleep(0.01)
                await sender.route.send_to_spot(quick, Note(-1)).submit()  # not paused
                answered = sender.route.request_to_spot(quick, Ask(3), reply_type=Answer)
                assert Answer(3) == await answered.timeout(5).submit()
                parked = inbound.backlogs.holds(zl.SpotId(slow))
                assert len(sent) < count  # the flood waits for credit
                assert parked < count // 4, parked  # far short of the flood
                Slow.release.set()
            while len(noted) < count:  # noqa: ASYNC110  # handled on the other host's tasks
                await trio.sleep(0.01)
        assert not remote.credits.is_paused(owner.node_rid, zl.SpotId(slow))
        assert list(range(count)) == noted
