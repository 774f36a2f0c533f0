"""The demo's workload: its application and the calls each host makes (specs/demo.md DEMO-2).

This module owns what runs inside every demo host:

- ``app``, the ``zl.Application`` each host serves, and its messages (``Say``, ``Ping``, ...),
  its Spots (``Room``, a User Spot; ``Counter``, an Instance Spot) and its Actor (``User``);
- ``Plan``, one host's share of the workload, read from the ``[demo]`` table of its node
  configuration;
- ``Workload``, the loop of sends and requests to rooms, users and counters chosen at random
  among all of them, so most calls cross processes (DEMO-2), and ``Stats``, what those calls
  counted since the last report.

It knows nothing of processes or of the parent: ``child`` drives it, ``parent`` only names
``app`` in the configurations it writes.
"""

from __future__ import annotations

import random
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

import zlink_trio as zl

__all__ = [
    "Add",
    "COUNTER_TYPE",
    "Counter",
    "Enter",
    "Ping",
    "Plan",
    "Pong",
    "REQUEST_TIMEOUT",
    "ROOM_TYPE",
    "Read",
    "Room",
    "Say",
    "Speak",
    "Stats",
    "Status",
    "Total",
    "USER_TYPE",
    "User",
    "UserStatus",
    "Workload",
    "app",
]

REQUEST_TIMEOUT = 5.0
"""Seconds one request of the workload may take."""

# --- the application -----------------------------------------------------------------------

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


@app.user_spot(ROOM_TYPE)
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


@app.instance_spot(COUNTER_TYPE)
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


@app.actor(USER_TYPE)
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
        return Pong(req.seq, self.context.actor_id.value)

    @zl.request_handler(Status)
    async def status(self, req: Status) -> UserStatus:
        return UserStatus(self.room, self.outcome, self.error)


# --- one host's share and its calls ---------------------------------------------------------


@attrs.frozen
class Plan:
    """The workload of one host, from the ``[demo]`` table of its configuration."""

    index: int
    rids: tuple[str, ...]
    rooms: tuple[str, ...]
    counters: tuple[str, ...]
    users_per_host: int
    user_prefix: str

    @property
    def rid(self) -> str:
        return self.rids[self.index]

    def users_of(self, index: int) -> list[str]:
        return [f"{self.user_prefix}{index}.{n}" for n in range(self.users_per_host)]

    def all_users(self) -> list[str]:
        return [user for index in range(len(self.rids)) for user in self.users_of(index)]

    def rooms_in_order(self) -> list[str]:
        """Every room, this host's "home" rooms first (so each host usually wins some)."""
        count = len(self.rids)
        return sorted(
            self.rooms, key=lambda room: (self.rooms.index(room) % count != self.index, room)
        )

    @classmethod
    def from_section(cls, section: Mapping[str, Any]) -> Plan:
        return cls(
            int(section["index"]),
            tuple(str(rid) for rid in section["rids"]),
            tuple(str(room) for room in section["rooms"]),
            tuple(str(counter) for counter in section["counters"]),
            int(section["users_per_host"]),
            str(section["user_prefix"]),
        )


class Stats:
    """Counts since the last report."""

    def __init__(self) -> None:
        self.sends = 0
        self.requests = 0
        self.latencies: list[int] = []
        self.errors: Tally[str] = Tally()
        self.samples: dict[str, str] = {}
        self.sampled: set[str] = set()

    def failed(self, what: str, error: zl.ZLinkError) -> None:
        """Count a failed call; the first failure of each kind is kept as an example."""
        kind = error.kind.name
        self.errors[kind] += 1
        if kind not in self.sampled:
            self.sampled.add(kind)
            self.samples[kind] = f"{what}: {' '.join(str(error).split())}"

    def take(self) -> dict[str, object]:
        """The counts since the last ``take`` (the fields of a ``stats`` event); resets them."""
        taken: dict[str, object] = {
            "sends": self.sends,
            "requests": self.requests,
            "latencies": self.latencies,
            "errors": dict(self.errors),
            "samples": self.samples,
        }
        self.sends, self.requests, self.latencies, self.errors = 0, 0, [], Tally()
        self.samples = {}
        return taken


class Workload:
    """The calls one host makes, cycling through six kinds with random targets."""

    def __init__(self, host: zl.Host, plan: Plan, stats: Stats) -> None:
        self.host = host
        self.plan = plan
        self.stats = stats
        self.users = plan.all_users()
        self.seq = 0

    async def _send(self, what: str, call: zl.SpotSendCall | zl.ActorSendCall) -> None:
        try:
            await call.submit()
        except zl.ZLinkError as error:
            self.stats.failed(f"send to {what}", error)
        else:
            self.stats.sends += 1

    async def _request(self, what: str, submit: Callable[[], Any]) -> None:
        started = trio.current_time()
        try:
            await submit()
        except zl.ZLinkError as error:
            self.stats.failed(f"request to {what}", error)
        else:
            self.stats.requests += 1
            self.stats.latencies.append(round((trio.current_time() - started) * 1_000_000))

    async def one_round(self, rng: random.Random) -> None:
        route = self.host.route
        self.seq += 1
        room = rng.choice(self.plan.rooms)
        user = rng.choice(self.users)
        counter = rng.choice(self.plan.counters)
        say = Say(f"{self.plan.rid} says {self.seq}")
        await self._send(f"room {room}", route.send_to_spot(room, say))
        await self._request(
            f"room {room}",
            route.request_to_spot(room, Read(), reply_type=Total).timeout(REQUEST_TIMEOUT).submit,
        )
        await self._send(f"user {user}", route.send_to_actor(user, Speak(f"hello {self.seq}")))
        await self._request(
            f"user {user}",
            route.request_to_actor(user, Ping(self.seq), reply_type=Pong)
            .timeout(REQUEST_TIMEOUT)
            .submit,
        )
        add = route.send_to_spot(counter, Add(1)).instance_spot(COUNTER_TYPE)
        await self._send(f"counter {counter}", add)
        await self._request(
            f"counter {counter}",
            route.request_to_spot(counter, Read(), reply_type=Total)
            .instance_spot(COUNTER_TYPE)
            .timeout(REQUEST_TIMEOUT)
            .submit,
        )

    async def run(self, worker: int) -> None:
        """Rounds until cancelled; each worker has its own random sequence."""
        rng = random.Random(f"{self.plan.rid}/{worker}")
        while True:
            await self.one_round(rng)
            await trio.lowlevel.checkpoint()
