"""A Spot's gate task and an Actor's lane serve what is queued in bursts (specs/spots.md
SPOT-95): sends queued while they wait cost a few task steps, not one each."""

from __future__ import annotations

import attrs
import pytest
import trio

import zlink_trio as zl
from zlink_trio.testing import open_test_host

app = zl.Application()
SENDS = 64


@app.message("burst.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("burst.Get")
@attrs.frozen
class Get:
    pass


@app.message("burst.Total")
@attrs.frozen
class Total:
    value: int


class Tally:
    def __init__(self) -> None:
        self.value = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.value += msg.amount

    @zl.request_handler(Get)
    async def get(self, req: Get) -> Total:
        return Total(self.value)


@app.user_spot("burst.Counter")
class Counter(Tally, zl.Spot):
    pass


@app.actor("burst.Agent")
class Agent(Tally, zl.Actor):
    pass


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
            await host.spots.get_or_create("c-1", "burst.Counter").submit()

            def send(amount: int) -> zl.SpotSendCall:
                return host.route.send_to_spot("c-1", Add(amount))

            ask = host.route.request_to_spot("c-1", Get(), reply_type=Total)
        else:
            await host.actors.create("a-1", "burst.Agent").submit()

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
