"""Immediate shutdown of one host (specs/shutdown.md, SPOT-44..SPOT-48)."""

from __future__ import annotations

import logging
import uuid

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
closings: list[tuple[str, zl.SpotCloseReason, float, str]] = []
handled: list[str] = []
relayed: list[zl.ErrorKind] = []


@app.message("shut.Ask")
@attrs.frozen
class Ask:
    how: str


@app.message("shut.Answer")
@attrs.frozen
class Answer:
    text: str


class Signals:
    def __init__(self) -> None:
        self.entered = trio.Event()
        self.closing = trio.Event()
        self.release = trio.Event()


signals = Signals()


@app.user_spot("shut.Room")
class Room(NoMembers):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        spot_id = self.context.spot_id.value
        # The local instance and its context are still valid here (SHUT-7.3).
        ref = self.context.ref
        closings.append((spot_id, closing.reason, closing.deadline, ref.spot_id.value))
        signals.closing.set()
        if spot_id.startswith("stuck"):
            try:
                await trio.sleep_forever()
            finally:
                closings.append((spot_id, closing.reason, trio.current_time(), "cancelled"))
        if spot_id.startswith("raise"):
            raise RuntimeError("cleanup failed")

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        handled.append(req.how)
        if req.how == "hold":
            signals.entered.set()
            await signals.release.wait()
        if req.how.startswith("relay:"):
            # A turn that waits for another Spot's reply, holding its own gate meanwhile.
            target = req.how.removeprefix("relay:")
            try:
                await self.context.route.request_to_spot(
                    target, Ask("hold"), reply_type=Answer
                ).submit()
            except zl.ZLinkError as error:
                relayed.append(error.kind)
        return Answer(req.how)


def config(store_dsn: str, **values: object) -> zl.HostConfig:
    return zl.HostConfig(mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, **values)  # type: ignore[arg-type]  # test values


@pytest.mark.spec("SHUT-4.6", "CMP-5.14", "ERR-4.6", "ERR-5.7", "SHUT-4.4", "SHUT-7.4", "SHUT-7.5")
async def test_after_shutdown_every_new_operation_is_shutting_down(store_dsn: str) -> None:
    """Once shutdown has run, sends, requests, creates and closes raise SHUTTING_DOWN and no
    handler starts."""
    async with zl.open_host(app, config(store_dsn)) as host:
        result = await host.spots.get_or_create("room", "shut.Room").submit()
        await host.shutdown()
        before = list(handled)
        calls = [
            host.route.send_to_spot("room", Ask("x")).submit(),
            host.route.request_to_spot("room", Ask("x"), reply_type=Answer).submit(),
            host.spots.get_or_create("room", "shut.Room").submit(),
            host.spots.close(result.spot_ref),
        ]
        for call in calls:
            with pytest.raises(zl.ZLinkError) as caught:
                await call
            assert zl.ErrorKind.SHUTTING_DOWN == caught.value.kind
    await trio.testing.wait_all_tasks_blocked()
    assert before == handled


@pytest.mark.spec("SHUT-4.7", "CMP-17.14", "ERR-5.2")
async def test_a_request_in_flight_at_shutdown_ends_with_shutting_down(store_dsn: str) -> None:
    """A request still waiting for its reply when shutdown starts ends with SHUTTING_DOWN, once."""
    global signals
    signals = Signals()
    outcomes: list[zl.ErrorKind] = []
    async with zl.open_host(app, config(store_dsn, closing_timeout=0.5)) as host:
        await host.spots.get_or_create("room", "shut.Room").submit()

        async def ask() -> None:
            try:
                await (
                    host.route.request_to_spot("room", Ask("hold"), reply_type=Answer)
                    .timeout(60)
                    .submit()
                )
            except zl.ZLinkError as error:
                outcomes.append(error.kind)

        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(ask)
                await signals.entered.wait()
                await host.shutdown()
    assert [zl.ErrorKind.SHUTTING_DOWN] == outcomes


@pytest.mark.spec("SHUT-4.8", "SHUT-7.3", "SPOT-45", "SHUT-4.5")
async def test_each_spot_gets_one_on_closing_with_host_shutdown_and_the_deadline(
    store_dsn: str,
) -> None:
    """Every Spot's on_closing runs once with HOST_SHUTDOWN and the absolute deadline
    shutdown start + closing_timeout, while its context is still valid."""
    async with zl.open_host(app, config(store_dsn, closing_timeout=3.0)) as host:
        for name in ("a-1", "a-2", "a-3"):
            await host.spots.get_or_create(name, "shut.Room").submit()
        started = trio.current_time()
        await host.shutdown()
        finished = trio.current_time()
    mine = [entry for entry in closings if entry[0].startswith("a-")]
    assert ["a-1", "a-2", "a-3"] == sorted(entry[0] for entry in mine)
    for spot_id, reason, deadline, seen in mine:
        assert zl.SpotCloseReason.HOST_SHUTDOWN == reason
        assert started + 3.0 <= deadline <= finished + 3.0
        assert spot_id == seen


@pytest.mark.spec("SHUT-4.5")
async def test_calls_are_settled_before_the_spots_close(store_dsn: str) -> None:
    """A turn waiting for a reply when shutdown starts gets SHUTTING_DOWN before the Spots are
    closed, so its Spot's on_closing starts at once rather than at the closing deadline."""
    global signals
    signals = Signals()
    relayed.clear()
    async with zl.open_host(app, config(store_dsn, closing_timeout=20.0)) as host:
        await host.spots.get_or_create("relay-1", "shut.Room").submit()
        await host.spots.get_or_create("held-1", "shut.Room").submit()
        async with trio.open_nursery() as nursery:

            async def ask() -> None:
                with pytest.raises(zl.ZLinkError) as caught:
                    await host.route.request_to_spot(
                        "relay-1", Ask("relay:held-1"), reply_type=Answer
                    ).submit()
                assert zl.ErrorKind.SHUTTING_DOWN == caught.value.kind

            nursery.start_soon(ask)
            await signals.entered.wait()  # relay-1's turn now waits for held-1's reply
            nursery.start_soon(host.shutdown)
            with trio.fail_after(10):  # half the closing deadline
                await signals.closing.wait()
            assert "relay-1" == closings[-1][0]
            assert [zl.ErrorKind.SHUTTING_DOWN] == relayed
            signals.release.set()  # let held-1's turn end so that its Spot closes too


@pytest.mark.spec("SPOT-47", "SPOT-48")
async def test_on_closing_is_cancelled_at_its_deadline_and_its_errors_do_not_stop_closing(
    store_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    """An on_closing that outlives its deadline is cancelled, one that raises is logged with
    its traceback, and shutdown completes either way."""
    # Enabled again in case import-linter (test_layers, same process) disabled it.
    logging.getLogger("zlink_trio.runtime.activation").disabled = False
    async with zl.open_host(app, config(store_dsn, closing_timeout=0.3)) as host:
        await host.spots.get_or_create("stuck-1", "shut.Room").submit()
        await host.spots.get_or_create("raise-1", "shut.Room").submit()
        with trio.fail_after(20), caplog.at_level(logging.ERROR, logger="zlink_trio"):
            await host.shutdown()
    stuck = [entry for entry in closings if entry[0] == "stuck-1"]
    assert "cancelled" == stuck[-1][3]
    assert stuck[-1][2] >= stuck[0][2]  # cancelled no earlier than the deadline
    assert 1 == sum(entry[0] == "raise-1" for entry in closings)
    logged = [r for r in caplog.records if r.exc_info is not None and "raise-1" in r.getMessage()]
    assert [RuntimeError] == [record.exc_info[0] for record in logged if record.exc_info]


@pytest.mark.spec("SPOT-47")
async def test_on_closing_of_an_explicit_close_is_cancelled_at_its_deadline(store_dsn: str) -> None:
    """close() of a Spot whose on_closing never returns cancels on_closing at the closing
    deadline and returns True soon after it, not at some later cutoff of the host's."""
    async with zl.open_host(app, config(store_dsn, closing_timeout=0.3)) as host:
        result = await host.spots.get_or_create("stuck-4", "shut.Room").submit()
        with trio.fail_after(10):
            assert await host.spots.close(result.spot_ref) is True
        stuck = [entry for entry in closings if entry[0] == "stuck-4"]
        assert "cancelled" == stuck[-1][3]
        assert stuck[0][2] <= stuck[-1][2] < stuck[0][2] + 5


@pytest.mark.spec("SHUT-2.3", "SHUT-4.10")
async def test_shutdown_is_idempotent_and_survives_a_cancelled_caller(store_dsn: str) -> None:
    """Concurrent and repeated shutdown() calls join one run; cancelling one caller does not stop
    it."""
    seen_on_return: list[int] = []

    def stuck_entries() -> int:
        return sum(entry[0] == "stuck-2" for entry in closings)

    async def shut_down(host: zl.Host) -> None:
        await host.shutdown()
        # Every caller gets the one run's result: on_closing has run and been cut by then.
        seen_on_return.append(stuck_entries())

    # Bounded throughout: a shutdown stopped with its cancelled caller must fail, not hang.
    with trio.fail_after(30):
        async with zl.open_host(app, config(store_dsn, closing_timeout=1.0)) as host:
            await host.spots.get_or_create("stuck-2", "shut.Room").submit()
            with trio.move_on_after(0.05):
                await host.shutdown()
            async with trio.open_nursery() as nursery:
                for _ in range(3):
                    nursery.start_soon(shut_down, host)
            await shut_down(host)
    assert 2 == stuck_entries()  # one on_closing, one cancel
    assert [2, 2, 2, 2] == seen_on_return


@pytest.mark.spec("SHUT-4.9", "API-16")
async def test_leaving_the_block_by_an_exception_shuts_down_then_reraises(store_dsn: str) -> None:
    """An exception leaving the open_host block re-raises after on_closing ran."""

    class Boom(Exception):
        pass

    async def serve_then_fail() -> None:
        async with zl.open_host(app, config(store_dsn)) as host:
            await host.spots.get_or_create("boom-1", "shut.Room").submit()
            raise Boom

    with pytest.raises(Boom):
        await serve_then_fail()
    assert ["boom-1"] == [entry[0] for entry in closings if entry[0] == "boom-1"]


@pytest.mark.spec("SHUT-2.1", "ID-9", "DEC-9")
async def test_hosts_in_one_process_share_nothing(store_dsn: str) -> None:
    """Two hosts in one process have their own Spots and node identities."""
    async with (
        zl.open_host(app, config(store_dsn, node_rid="node-a")) as one,
        zl.open_host(app, config(store_dsn)) as two,
    ):
        await one.spots.get_or_create("only-here", "shut.Room").submit()
        with pytest.raises(zl.ZLinkError) as caught:
            await two.route.request_to_spot("only-here", Ask("x"), reply_type=Answer).submit()
        assert zl.ErrorKind.NOT_FOUND == caught.value.kind
        assert zl.NodeRid("node-a") == one.node_rid
        assert one.node_rid != two.node_rid
        assert one.node_generation != two.node_generation
    async with zl.open_host(app, config(store_dsn, node_rid="node-a")) as again:
        assert zl.NodeRid("node-a") == again.node_rid
        assert one.node_generation != again.node_generation


@pytest.mark.spec("SPOT-88")
async def test_close_while_the_spot_is_closing_is_unavailable(store_dsn: str) -> None:
    """A second close of an incarnation whose close is in progress raises UNAVAILABLE."""
    global signals
    signals = Signals()
    async with zl.open_host(app, config(store_dsn, closing_timeout=0.5)) as host:
        result = await host.spots.get_or_create("stuck-3", "shut.Room").submit()
        with trio.fail_after(20):
            async with trio.open_nursery() as nursery:

                async def first_close() -> None:
                    assert await host.spots.close(result.spot_ref) is True

                nursery.start_soon(first_close)
                await signals.closing.wait()
                with pytest.raises(zl.ZLinkError) as caught:
                    await host.spots.close(result.spot_ref)
                assert zl.ErrorKind.UNAVAILABLE == caught.value.kind
        assert await host.spots.close(result.spot_ref) is False
