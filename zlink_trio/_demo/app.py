"""The demo's application: what every demo host serves (specs/demo.md DEMO-2, DEMO-7).

``app`` and its messages (``Say``, ``Ping``, ...), its Spots (``Room``, a User Spot; ``Counter``,
an Instance Spot) and its Actor (``User``). Each type carries its state through a relocation
with its adapter (``RoomState``, ``CounterState``, ``UserState``): a rolling update moves them
to a host of the next application version with their lines, totals and rooms (DEMO-7). The
counters keep theirs too rather than being made anew (``recreate_on_relocation``): a total
that fell back to 0 mid-run is what the workload's readers would see as lost state (DEMO-8).
"""

from __future__ import annotations

import json

import attrs

import zlink_trio as zl

__all__ = [
    "COUNTER_TYPE",
    "ROOM_TYPE",
    "USER_TYPE",
    "Add",
    "Counter",
    "CounterState",
    "Enter",
    "Ping",
    "Pong",
    "Read",
    "Room",
    "RoomState",
    "Say",
    "Speak",
    "Status",
    "Total",
    "User",
    "UserState",
    "UserStatus",
    "app",
]

app = zl.Application()


@app.message("demo.Say")
@attrs.frozen
class Say:
    text: str


@app.message("demo.Enter")
@attrs.frozen
class Enter:
    room: str


@app.message("demo.Speak")
@attrs.frozen
class Speak:
    text: str


@app.message("demo.Ping")
@attrs.frozen
class Ping:
    seq: int


@app.message("demo.Pong")
@attrs.frozen
class Pong:
    seq: int
    user: str
    room: str | None


@app.message("demo.Add")
@attrs.frozen
class Add:
    amount: int


@app.message("demo.Read")
@attrs.frozen
class Read:
    pass


@app.message("demo.Total")
@attrs.frozen
class Total:
    value: int


@app.message("demo.Status")
@attrs.frozen
class Status:
    pass


@app.message("demo.UserStatus")
@attrs.frozen
class UserStatus:
    room: str | None
    outcome: str | None
    error: str | None


ROOM_TYPE = "demo.Room"
COUNTER_TYPE = "demo.Counter"
USER_TYPE = "demo.User"


class RoomState(zl.SpotRelocationAdapter["Room"]):
    """A room's lines and member count, as JSON."""

    async def capture(self, target: Room) -> bytes:
        return json.dumps([target.lines, target.members]).encode()

    async def restore(self, target: Room, payload: bytes) -> None:
        target.lines, target.members = json.loads(payload)


class CounterState(zl.SpotRelocationAdapter["Counter"]):
    """A counter's total, as decimal digits."""

    async def capture(self, target: Counter) -> bytes:
        return str(target.total).encode()

    async def restore(self, target: Counter, payload: bytes) -> None:
        target.total = int(payload)


class UserState(zl.ActorRelocationAdapter["User"]):
    """A user's room and the outcome of its join, as JSON."""

    async def capture(self, target: User) -> bytes:
        return json.dumps([target.room, target.outcome, target.error]).encode()

    async def restore(self, target: User, payload: bytes) -> None:
        target.room, target.outcome, target.error = json.loads(payload)


@app.user_spot(ROOM_TYPE, relocation=zl.preserve_state_with(RoomState))
class Room(zl.Spot):
    """A chat room: counts what is said in it; users join it as members."""

    def __init__(self) -> None:
        self.lines = 0
        self.members = 0

    async def on_actor_join(
        self, actor_id: zl.ActorId, request: object | None
    ) -> zl.SpotActorJoinResult:
        return zl.SpotActorJoinResult.accept()

    async def on_joined_actor(self, actor: object) -> None:
        self.members += 1

    async def on_leave_actor(self, actor: object) -> None:
        self.members -= 1

    @zl.packet_handler(Say)
    async def say(self, msg: Say) -> None:
        self.lines += 1

    @zl.request_handler(Read)
    async def read(self, req: Read) -> Total:
        return Total(self.lines)


@app.instance_spot(COUNTER_TYPE, relocation=zl.preserve_state_with(CounterState))
class Counter(zl.InstanceSpot):
    """A counter, activated cold by the first message any host sends it."""

    def __init__(self) -> None:
        self.total = 0

    @zl.packet_handler(Add)
    async def add(self, msg: Add) -> None:
        self.total += msg.amount

    @zl.request_handler(Read)
    async def read(self, req: Read) -> Total:
        return Total(self.total)


@app.actor(USER_TYPE, relocation=zl.preserve_state_with(UserState))
class User(zl.Actor):
    """A user: joins a room of its own host, speaks into it, answers pings from anywhere."""

    def __init__(self) -> None:
        self.room: str | None = None
        self.outcome: str | None = None
        self.error: str | None = None

    @zl.packet_handler(Enter)
    async def enter(self, msg: Enter) -> None:
        self.context.join_spot(msg.room).defer()

    async def on_join_completed(self, completion: zl.ActorJoinCompletion) -> None:
        self.outcome = completion.outcome.name
        if completion.outcome is zl.ActorJoinOutcome.ACCEPTED:
            self.room = completion.spot_id
        elif completion.error is not None:
            self.error = completion.error.kind.name

    @zl.packet_handler(Speak)
    async def speak(self, msg: Speak) -> None:
        if self.room is not None:
            await self.context.route.send_to_spot(self.room, Say(msg.text)).submit()

    @zl.request_handler(Ping)
    async def ping(self, req: Ping) -> Pong:
        return Pong(req.seq, self.context.actor_id.value, self.room)

    @zl.request_handler(Status)
    async def status(self, req: Status) -> UserStatus:
        return UserStatus(self.room, self.outcome, self.error)
