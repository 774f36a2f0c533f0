"""A chat room: users are Actors that join a User Spot, speak through it and leave again.

Run: python examples/chat_room.py
(Uses ZLINK_STORE_DSN when set; otherwise starts the embedded PostgreSQL in its data folder.)
"""

from __future__ import annotations

import attrs
import trio

import zlink_trio as zl

app = zl.Application()


@app.message("chat.Enter")
@attrs.frozen
class Enter:
    room: str


@app.message("chat.Speak")
@attrs.frozen
class Speak:
    text: str


@app.message("chat.Exit")
@attrs.frozen
class Exit:
    pass


@app.message("chat.Line")
@attrs.frozen
class Line:
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


@app.message("chat.Ban")
@attrs.frozen
class Ban:
    user: str


@app.actor("chat.User")
class User(zl.Actor):
    """One user; its handler instance belongs to this Actor alone."""

    @zl.packet_handler(Enter)
    async def enter(self, msg: Enter) -> None:
        # The join runs after this turn ends; its result arrives in on_join_completed.
        self.context.join_spot(msg.room).defer()

    @zl.packet_handler(Speak)
    async def speak(self, msg: Speak) -> None:
        room = self.context.spot_id
        await self.context.route.send_to_spot(
            room, Line(self.context.actor_id.value, msg.text)
        ).submit()

    @zl.packet_handler(Exit)
    async def exit(self, msg: Exit) -> None:
        self.context.join_entry_spot().defer()

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        print(f"  {self.context.actor_id}: join {completion.spot_id} -> {completion.outcome.name}")


@app.user_spot("chat.Room")
class Room(zl.Spot):
    """One room: its history and ban list live in the activation; one turn runs at a time."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.banned: set[str] = set()

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        if actor_id.value in self.banned:
            return zl.SpotActorJoinResult.reject()  # a value, not an error
        return zl.SpotActorJoinResult.accept()

    async def on_joined_actor(self, actor: object) -> None:
        assert isinstance(actor, User)
        self.lines.append(f"* {actor.context.actor_id} joined")

    async def on_leave_actor(self, actor: object) -> None:
        assert isinstance(actor, User)
        self.lines.append(f"* {actor.context.actor_id} left")

    @zl.packet_handler(Line)
    async def line(self, msg: Line) -> None:
        self.lines.append(f"{msg.user}: {msg.text}")

    @zl.packet_handler(Ban)
    async def ban(self, msg: Ban) -> None:
        self.banned.add(msg.user)

    @zl.request_handler(GetHistory)
    async def history(self, req: GetHistory) -> History:
        return History(list(self.lines))


async def history(host: zl.Host, room: str) -> list[str]:
    reply = await host.route.request_to_spot(room, GetHistory(), reply_type=History).submit()
    return reply.lines


async def main() -> None:
    config = zl.HostConfig(mesh="example")  # store: ZLINK_STORE_DSN, else embedded PostgreSQL
    async with zl.open_host(app, config) as host:
        room = await host.spots.get_or_create("lobby", "chat.Room").submit()
        print("room:", room.spot_ref.spot_id, "generation", room.spot_ref.object_generation.value)
        await host.route.send_to_spot("lobby", Ban("mallory")).submit()
        for name in ("ada", "bob", "mallory"):
            await host.actors.get_or_create(name, "chat.User").submit()
            await host.route.send_to_actor(name, Enter("lobby")).submit()
        await host.route.send_to_actor("ada", Speak("hello")).submit()
        await host.route.send_to_actor("bob", Speak("hi ada")).submit()
        await host.route.send_to_actor("ada", Exit()).submit()
        await host.route.send_to_actor("bob", Exit()).submit()
        # A leave notice reaches the room one-way, shortly after each user's join completes:
        # ask the room until both have arrived (bounded, so a lost notice fails loudly).
        with trio.fail_after(10):
            while True:
                lines = await history(host, "lobby")
                if sum(line.endswith(" left") for line in lines) == 2:
                    break
                await trio.sleep(0.01)
        for line in lines:
            print("  |", line)
        closed = await host.spots.close(room.spot_ref)
        print("room closed:", closed)
        try:
            await host.route.request_to_spot("lobby", GetHistory(), reply_type=History).submit()
        except zl.ZLinkError as error:
            print("after close:", error.kind.name)


if __name__ == "__main__":
    trio.run(main)
