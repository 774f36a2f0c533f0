"""Closing a SPOT_WIDE Spot waits for every turn, continuations included (specs/spots.md
SPOT-75): a turn that gave the gate back with ``yield_()`` still finishes before ``on_closing``
runs, and the close seals admission before it waits."""

from __future__ import annotations

import uuid

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
order: list[str] = []


class Signals:
    release = trio.Event()
    yielded = trio.Event()


@app.message("barrier.Slow")
@attrs.frozen
class Slow:
    pass


@app.message("barrier.Done")
@attrs.frozen
class Done:
    pass


@app.message("barrier.Go")
@attrs.frozen
class Go:
    other: str


@app.user_spot("barrier.Room")
class Room(NoMembers):
    @zl.request_handler(Slow, reply=Done)
    async def slow(self, req: Slow) -> Done:
        await Signals.release.wait()
        return Done()

    @zl.packet_handler(Go)
    async def go(self, msg: Go) -> None:
        order.append("turn:start")
        Signals.yielded.set()
        await (
            self.context.route.request_to_spot(msg.other, Slow(), reply_type=Done)
            .timeout(30)
            .yield_()
        )
        order.append("turn:continued")

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        order.append(f"on_closing:{self.context.spot_id.value.split('-')[0]}")


@pytest.mark.spec("SPOT-75")
async def test_close_waits_for_a_yielded_continuation(store_dsn: str) -> None:
    """close() seals at once (a new message is refused) but on_closing runs only after the
    yielded turn's continuation has finished."""
    Signals.release = trio.Event()
    Signals.yielded = trio.Event()
    order.clear()
    room, other = f"room-{uuid.uuid4().hex[:8]}", f"other-{uuid.uuid4().hex[:8]}"
    config = zl.HostConfig(mesh=f"b-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with zl.open_host(app, config) as host:
        created = await host.spots.get_or_create(room, "barrier.Room").submit()
        await host.spots.get_or_create(other, "barrier.Room").submit()
        await host.route.send_to_spot(room, Go(other)).submit()
        with trio.fail_after(10):
            await Signals.yielded.wait()
        closed = trio.Event()

        async def close() -> None:
            assert await host.spots.close(created.spot_ref) is True
            closed.set()

        async with trio.open_nursery() as nursery:
            nursery.start_soon(close)
            await trio.testing.wait_all_tasks_blocked()
            with pytest.raises(zl.ZLinkError) as caught:
                await host.route.send_to_spot(room, Go(other)).submit()
            assert zl.ErrorKind.NOT_FOUND == caught.value.kind  # sealed already
            assert not closed.is_set()
            assert ["turn:start"] == order  # on_closing waits for the continuation
            Signals.release.set()
        assert ["turn:start", "turn:continued", "on_closing:room"] == order
