"""A chat room as a User Spot, and a counter as an Instance Spot activated by its first message.

Run: python examples/chat_room.py
(Uses ZLINK_STORE_DSN when set; otherwise starts the embedded PostgreSQL in its data folder.)
"""

from __future__ import annotations

import attrs
import trio

import zlink_trio as zl

app = zl.Application()


@app.message("chat.Say")
@attrs.frozen
class Say:
    user: str
    text: str


@app.message("chat.GetHistory")
@attrs.frozen
class GetHistory:
    pass


@app.message("chat.History")
@attrs.frozen
class History:
    lines: list[str]


@app.message("counter.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("counter.Total")
@attrs.frozen
class Total:
    value: int


@app.user_spot("chat.Room")
class Room(zl.Spot):
    """One room: its history lives in the activation; the gate runs one turn at a time."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    @zl.packet_handler(Say)
    async def say(self, msg: Say, ctx: zl.MessageContext) -> None:
        self.lines.append(f"{msg.user}: {msg.text}")

    @zl.request_handler(GetHistory)
    async def history(self, req: GetHistory) -> History:
        return History(list(self.lines))


@app.instance_spot("counter")
class Counter(zl.InstanceSpot):
    """Activated cold by the first message addressed to its id; that message is handled first."""

    def __init__(self) -> None:
        self.total = 0

    @zl.request_handler(Add)
    async def add(self, req: Add) -> Total:
        self.total += req.amount
        return Total(self.total)


async def main() -> None:
    config = zl.HostConfig(mesh="example")  # store: ZLINK_STORE_DSN, else embedded PostgreSQL
    async with zl.open_host(app, config) as host:
        room = await host.spots.get_or_create("lobby", "chat.Room").submit()
        print("room:", room.spot_ref.spot_id, "generation", room.spot_ref.object_generation.value)
        for user, text in [("ada", "hello"), ("bob", "hi ada")]:
            await host.route.send_to_spot("lobby", Say(user, text)).submit()
        history = await (
            host.route.request_to_spot("lobby", GetHistory(), reply_type=History)
            .timeout(5.0)
            .submit()
        )
        print("history:", history.lines)

        for amount in (1, 2, 3):
            total = await (
                host.route.request_to_spot("clicks", Add(amount), reply_type=Total)
                .instance_spot("counter")
                .submit()
            )
        print("counter total:", total.value)

        try:
            await host.route.request_to_spot(
                "no-such-room", GetHistory(), reply_type=History
            ).submit()
        except zl.ZLinkError as error:
            print("missing room:", error.kind.name)
        await host.spots.close(room.spot_ref)


if __name__ == "__main__":
    trio.run(main)
