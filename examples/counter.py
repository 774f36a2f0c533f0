"""A counter as an Instance Spot: activated cold by its first message, it adds up what it is
sent and, on a timer, publishes the total to a report Spot.

Run: python examples/counter.py
(Uses ZLINK_STORE_DSN when set; otherwise starts the embedded PostgreSQL in its data folder.)
"""

from __future__ import annotations

import attrs
import trio

import zlink_trio as zl

app = zl.Application()


@app.message("counter.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("counter.Total")
@attrs.frozen
class Total:
    counter: str
    value: int
    tick: int


@app.message("counter.Latest")
@attrs.frozen
class Latest:
    pass


@app.message("counter.Totals")
@attrs.frozen
class Totals:
    reports: list[str]


@app.instance_spot("counter")
class Counter(zl.InstanceSpot):
    """Its state lives in the activation; the timer's ticks are turns like its messages."""

    def __init__(self) -> None:
        self.total = 0
        self.reported = -1

    async def on_initialize(self) -> None:
        self.context.timers.start(
            "report",
            0.05,
            zl.TimerOptions(overrun_policy=zl.TimerOverrunPolicy.SKIP_LATE_TICKS),
        )

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.total += msg.amount

    @zl.timer_handler("report")
    async def report(self, tick: zl.TimerTick) -> None:
        if self.total != self.reported:
            self.reported = self.total
            total = Total(self.context.spot_id.value, self.total, tick.number)
            await self.context.route.send_to_spot("reports", total).submit()


@app.user_spot("counter.Reports")
class Reports(zl.Spot):
    def __init__(self) -> None:
        self.reports: list[str] = []
        self.latest: dict[str, int] = {}

    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    @zl.packet_handler(Total)
    async def total(self, msg: Total) -> None:
        self.latest[msg.counter] = msg.value
        self.reports.append(f"{msg.counter}={msg.value} (tick {msg.tick})")

    @zl.request_handler(Latest)
    async def read(self, req: Latest) -> Totals:
        return Totals([f"{name}={value}" for name, value in sorted(self.latest.items())])


async def main() -> None:
    config = zl.HostConfig(mesh="example-counter")
    async with zl.open_host(app, config) as host:
        await host.spots.get_or_create("reports", "counter.Reports").submit()
        for amount in (1, 2, 3, 4):
            # No create call: the first message to "clicks" activates the counter cold.
            await host.route.send_to_spot("clicks", Add(amount)).instance_spot("counter").submit()
        await host.route.send_to_spot("views", Add(10)).instance_spot("counter").submit()
        wanted = ["clicks=10", "views=10"]
        with trio.fail_after(10):
            while True:
                latest = await host.route.request_to_spot(
                    "reports", Latest(), reply_type=Totals
                ).submit()
                if latest.reports == wanted:
                    break
                await trio.sleep(0.02)  # the next report tick is at most 50 ms away
        print("reported totals:", ", ".join(latest.reports))


if __name__ == "__main__":
    trio.run(main)
