"""A Spot's logical timers move with it between hosts (specs/timers.md TIMER-15..TIMER-17;
specs/relocation.md RELOC-45): the target goes on with the same timer, its tick numbers and its
pending ticks, without the application starting it again, and a tick running at the seal ends on
the source."""

from __future__ import annotations

from typing import Any

import attrs
import pytest
import trio
import trio.testing

import zlink_trio as zl
from tests.contract.peers import meet
from zlink_trio.testing import open_test_host, open_test_stores

app = zl.Application()
INTERVAL = 0.02


@app.message("tmove.Start")
@attrs.frozen
class Start:
    pass


class Beats:
    """What the Metronome's ticks did, seen from the test."""

    def __init__(self) -> None:
        self.ticks: list[tuple[zl.TimerTick, str]] = []
        self.starts = 0
        self.hold_at: int | None = None
        """The tick number that waits for ``release`` (the one running at the seal)."""
        self.holding = trio.Event()
        self.release = trio.Event()
        self.changed = trio.Event()

    async def wait_for(self, predicate: Any) -> None:
        with trio.fail_after(10):
            while not predicate():
                self.changed = trio.Event()
                await self.changed.wait()


beats = Beats()


@app.instance_spot("tmove.Metronome", relocation=zl.recreate_on_relocation())
class Metronome(zl.InstanceSpot):
    @zl.packet_handler(Start)
    async def start(self, msg: Start) -> None:
        beats.starts += 1
        self.context.timers.start("beat", INTERVAL)

    @zl.timer_handler("beat")
    async def beat(self, tick: zl.TimerTick) -> None:
        beats.ticks.append((tick, self.context.ref.node_rid.value))
        beats.changed.set()
        if tick.number == beats.hold_at:
            beats.holding.set()
            await beats.release.wait()


@pytest.mark.spec("TIMER-15", "TIMER-16", "TIMER-17")
async def test_a_timer_goes_on_on_the_target_with_its_numbers(store_dsn: str) -> None:
    """The Metronome ticks on the source; tick 4 is running when the relocation seals it and
    ends there. Then the same timer ticks on the target with no new start: its numbers go on
    after 4, each one the previous plus one plus the ticks it skipped (the nominal ticks that
    fell due during the move are accounted for), and no number runs twice."""
    global beats
    beats = Beats()
    beats.hold_at = 4
    async with (
        open_test_stores(store_dsn) as stores,
        open_test_host(app, dsn=store_dsn, stores=stores) as source,
        open_test_host(app, dsn=store_dsn, stores=stores, mesh=source.mesh) as target,
    ):
        await meet(source, target)
        await source.route.send_to_spot("m-1", Start()).instance_spot("tmove.Metronome").submit()
        await beats.holding.wait()
        results: list[zl.RelocationResult] = []
        async with trio.open_nursery() as nursery:

            async def relocate() -> None:
                results.append(await source.host.relocate(deadline=20.0))

            nursery.start_soon(relocate)
            await trio.testing.wait_all_tasks_blocked()
            assert not results  # the seal waits for the running tick
            beats.release.set()
        assert zl.RelocationOutcome.RELOCATED == results[0].outcome, results
        moved_to = target.node_rid.value
        await beats.wait_for(lambda: sum(node == moved_to for _, node in beats.ticks) >= 3)
    numbers = [tick.number for tick, _ in beats.ticks]
    nodes = [node for _, node in beats.ticks]
    assert [1, 2, 3, 4] == numbers[:4]
    assert {source.node_rid.value} == set(nodes[:4])  # tick 4 ended on the source
    assert {moved_to} == set(nodes[4:])  # every later tick ran on the target
    for (before, _), (after, _) in zip(beats.ticks, beats.ticks[1:], strict=False):
        assert after.number == before.number + 1 + after.skipped, beats.ticks
    assert 1 == beats.starts  # the application started it once, on the source
