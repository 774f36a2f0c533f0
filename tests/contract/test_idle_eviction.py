"""Idle eviction of Instance Spots (specs/spots.md SPOT-46, SPOT-50)."""

from __future__ import annotations

import uuid

import attrs
import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers

IDLE = 0.2

app = zl.Application()


@app.message("idle.Ask")
@attrs.frozen
class Ask:
    pass


@app.message("idle.Answer")
@attrs.frozen
class Answer:
    generation: int


class Seen:
    def __init__(self) -> None:
        self.reasons: list[zl.SpotCloseReason] = []
        self.closed = trio.Event()


seen: dict[str, Seen] = {}


@app.instance_spot("idle.Session")
class Session(zl.InstanceSpot):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        record = seen[self.context.spot_id.value]
        record.reasons.append(closing.reason)
        record.closed.set()

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(self.context.ref.object_generation.value)


@app.instance_spot("idle.Ticker")
class Ticker(zl.InstanceSpot):
    """An Instance Spot that gets no message after its first, only timer ticks."""

    async def on_initialize(self) -> None:
        self.context.timers.start("beat", IDLE / 4)

    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        record = seen[self.context.spot_id.value]
        record.reasons.append(closing.reason)
        record.closed.set()

    @zl.timer_handler("beat")
    async def beat(self, tick: zl.TimerTick) -> None:
        pass

    @zl.request_handler(Ask)
    async def ask(self, req: Ask) -> Answer:
        return Answer(self.context.ref.object_generation.value)


@app.user_spot("idle.Room")
class Room(NoMembers):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        record = seen[self.context.spot_id.value]
        record.reasons.append(closing.reason)
        record.closed.set()


def config(store_dsn: str, idle: float | None) -> zl.HostConfig:
    return zl.HostConfig(
        mesh=f"t-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn, instance_idle_timeout=idle
    )


async def generation(host: zl.Host, spot_id: str, spot_type: str = "idle.Session") -> int:
    with trio.fail_after(10):
        call = host.route.request_to_spot(spot_id, Ask(), reply_type=Answer)
        return (await call.instance_spot(spot_type).submit()).generation


@pytest.mark.spec("SPOT-50")
async def test_an_idle_instance_spot_is_evicted_and_comes_back_with_a_higher_generation(
    store_dsn: str,
) -> None:
    """An Instance Spot with no turn for instance_idle_timeout closes with IDLE_EVICTED, and
    the next instance_spot() message activates a new incarnation with a higher generation."""
    spot_id = f"s-{uuid.uuid4().hex[:8]}"
    seen[spot_id] = Seen()
    async with zl.open_host(app, config(store_dsn, IDLE)) as host:
        first = await generation(host, spot_id)
        with trio.fail_after(10):
            await seen[spot_id].closed.wait()
        assert [zl.SpotCloseReason.IDLE_EVICTED] == seen[spot_id].reasons
        second = await generation(host, spot_id)
    assert second > first


@pytest.mark.spec("SPOT-50")
async def test_idle_eviction_spares_user_spots_and_turns_reset_the_idle_time(
    store_dsn: str,
) -> None:
    """A User Spot is never idle-evicted, and an Instance Spot that keeps getting turns more
    often than the idle timeout stays the same incarnation."""
    room_id = f"r-{uuid.uuid4().hex[:8]}"
    spot_id = f"s-{uuid.uuid4().hex[:8]}"
    seen[room_id] = Seen()
    seen[spot_id] = Seen()
    # A longer idle timeout here: the turns below must each come well inside it even on a
    # loaded machine.
    async with zl.open_host(app, config(store_dsn, 4 * IDLE)) as host:
        created = await host.spots.get_or_create(room_id, "idle.Room").submit()
        first = await generation(host, spot_id)
        for _ in range(6):
            # Each turn comes well inside the idle timeout, so the Spot never idles that long;
            # together they last longer than it, which would have evicted an idle Spot.
            await trio.sleep(IDLE)
            assert first == await generation(host, spot_id)
        assert not seen[room_id].closed.is_set()
        assert zl.SpotCreateStatus.CREATED == created.status
    assert [zl.SpotCloseReason.HOST_SHUTDOWN] == seen[room_id].reasons
    assert [zl.SpotCloseReason.HOST_SHUTDOWN] == seen[spot_id].reasons


@pytest.mark.spec("SPOT-50")
async def test_timer_ticks_count_as_turns_and_no_idle_timeout_never_evicts(
    store_dsn: str,
) -> None:
    """An Instance Spot whose only turns are timer ticks is not idle; and without
    instance_idle_timeout an Instance Spot with no turns at all stays."""
    ticker = f"t-{uuid.uuid4().hex[:8]}"
    seen[ticker] = Seen()
    async with zl.open_host(app, config(store_dsn, 2 * IDLE)) as host:
        first = await generation(host, ticker, "idle.Ticker")
        # Several idle timeouts pass with ticks (every IDLE / 4) as the only turns.
        await trio.sleep(6 * IDLE)
        assert not seen[ticker].closed.is_set()
        assert first == await generation(host, ticker, "idle.Ticker")
    quiet = f"s-{uuid.uuid4().hex[:8]}"
    seen[quiet] = Seen()
    async with zl.open_host(app, config(store_dsn, None)) as host:
        first = await generation(host, quiet)
        await trio.sleep(6 * IDLE)
        assert first == await generation(host, quiet)
    assert [zl.SpotCloseReason.HOST_SHUTDOWN] == seen[ticker].reasons
    assert [zl.SpotCloseReason.HOST_SHUTDOWN] == seen[quiet].reasons
