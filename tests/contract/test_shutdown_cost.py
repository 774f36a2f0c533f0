"""What closing many activations costs the scheduler (specs/shutdown.md SHUT-4.17) and how
released records are announced (specs/store.md STORE-40)."""

from __future__ import annotations

import uuid

import pytest
import trio

import zlink_trio as zl
from tests.members import NoMembers

app = zl.Application()
closed_by_callback: list[str] = []


@app.user_spot("cost.Room")
class Room(NoMembers):
    """Keeps the default on_closing."""


@app.user_spot("cost.Hall")
class Hall(NoMembers):
    async def on_closing(self, closing: zl.SpotClosingContext) -> None:
        closed_by_callback.append(self.context.spot_id.value)


class Passes(trio.abc.Instrument):
    """Counts passes of Trio's scheduler (each ends with one wait for I/O)."""

    def __init__(self) -> None:
        self.count = 0

    def before_io_wait(self, timeout: float) -> None:
        self.count += 1


async def _passes_to_shut_down(store_dsn: str, spots: int, spot_type: str) -> int:
    config = zl.HostConfig(mesh=f"cost-{uuid.uuid4().hex[:8]}", store_dsn=store_dsn)
    async with zl.open_host(app, config) as host:
        limit = trio.Semaphore(32)

        async def create(number: int) -> None:
            async with limit:
                await host.spots.get_or_create(f"s-{number}", spot_type).submit()

        async with trio.open_nursery() as nursery:
            for number in range(spots):
                nursery.start_soon(create, number)
        passes = Passes()
        trio.lowlevel.add_instrument(passes)
        try:
            await host.shutdown()
        finally:
            trio.lowlevel.remove_instrument(passes)
        return passes.count


@pytest.mark.spec("SHUT-4.17", "STORE-40")
async def test_closing_more_spots_takes_no_scheduler_pass_per_spot(store_dsn: str) -> None:
    """Shutting down 600 Spots takes about as many scheduler passes as shutting down 40: no
    pass per activation (no checkpoint per closed Spot awaited, released records announced in
    packed notifications rather than one notification, and one wake-up, per record)."""
    few = await _passes_to_shut_down(store_dsn, 40, "cost.Room")
    many = await _passes_to_shut_down(store_dsn, 600, "cost.Room")
    # One more release batch (512 records) and its notifications may add a few dozen passes;
    # one pass per Spot would add 560.
    assert many - few < 150, (few, many)


@pytest.mark.spec("SHUT-4.17")
async def test_an_on_closing_of_its_own_still_runs_for_every_spot(store_dsn: str) -> None:
    """The skipped turn is only the default one: a Spot type with its own on_closing has it run
    at shutdown, once per activation."""
    closed_by_callback.clear()
    await _passes_to_shut_down(store_dsn, 30, "cost.Hall")
    assert sorted(closed_by_callback) == sorted(f"s-{number}" for number in range(30))
