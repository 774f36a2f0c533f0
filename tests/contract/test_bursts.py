"""A Spot's gate task and an Actor's lane serve what is queued in bursts (specs/spots.md
SPOT-95): sends queued while they wait cost a few task steps, not one each."""

from __future__ import annotations

import pytest
import trio

import zlink_trio as zl
from tests.contract.tally_app import Add, Get, Total, app
from zlink_trio.testing import open_test_host

SENDS = 64


class _AllSteps(trio.abc.Instrument):
    """Counts the task steps of the whole run while ``counting``."""

    def __init__(self) -> None:
        self.counting = False
        self.steps = 0

    def before_task_step(self, task: trio.lowlevel.Task) -> None:
        if self.counting:
            self.steps += 1


@pytest.mark.spec("SPOT-95")
@pytest.mark.parametrize("unit", ["spot", "actor"])
async def test_sends_queued_at_a_waiting_unit_are_served_in_a_few_task_steps(
    store_dsn: str, unit: str
) -> None:
    """64 one-way sends from one task, then a request behind them: every task of the run takes
    fewer than 32 steps in between (the unit's own task alone took one step per message before
    bursts), and the request sees all 64."""
    async with open_test_host(app, dsn=store_dsn) as host:
        if unit == "spot":
            await host.spots.get_or_create("c-1", "tally.Counter").submit()

            def send(amount: int) -> zl.SpotSendCall:
                return host.route.send_to_spot("c-1", Add(amount))

            ask = host.route.request_to_spot("c-1", Get(), reply_type=Total)
        else:
            await host.actors.create("a-1", "tally.Agent").submit()

            def send(amount: int) -> zl.ActorSendCall:  # type: ignore[misc]
                return host.route.send_to_actor("a-1", Add(amount))

            ask = host.route.request_to_actor("a-1", Get(), reply_type=Total)  # type: ignore[assignment]
        await host.wait_quiet()
        steps = _AllSteps()
        trio.lowlevel.add_instrument(steps)
        try:
            steps.counting = True
            for _ in range(SENDS):
                await send(1).submit()
            total = await ask.submit()
            steps.counting = False
        finally:
            trio.lowlevel.remove_instrument(steps)
    assert SENDS == total.value
    assert steps.steps < 32, steps.steps
