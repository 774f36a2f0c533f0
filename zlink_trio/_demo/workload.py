"""The demo's workload: the calls each host makes (specs/demo.md DEMO-2, DEMO-8).

This module owns what runs inside every demo host besides its application (``app``):

- ``Plan``, one host's share of the workload, read from the ``[demo]`` table of its node
  configuration;
- ``Workload``, the loop of sends and requests to rooms, users and counters chosen at random
  among all of them, so most calls cross processes (DEMO-2), and ``Stats``, what those calls
  counted since the last report. Each loop also checks that what it reads never goes back
  (a room's lines, a counter's total, a joined user's room): a state lost in a move is counted
  as the error kind ``STATE_LOST`` (DEMO-8).

It knows nothing of processes or of the parent: ``child`` drives it.
"""

from __future__ import annotations

import random
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from typing import Any

import attrs
import trio

import zlink_trio as zl
from zlink_trio._demo.app import COUNTER_TYPE, Add, Ping, Pong, Read, Say, Speak, Total

__all__ = ["REQUEST_TIMEOUT", "STATE_LOST", "Plan", "Stats", "Workload"]

REQUEST_TIMEOUT = 5.0
"""Seconds one request of the workload may take."""
STATE_LOST = "STATE_LOST"
"""The error kind of a read that went back: a room, counter or user lost state it had."""


@attrs.frozen
class Plan:
    """The workload of one host, from the ``[demo]`` table of its configuration."""

    index: int
    rids: tuple[str, ...]
    rooms: tuple[str, ...]
    counters: tuple[str, ...]
    users_per_host: int
    user_prefix: str
    spare: bool = False
    """Started for the rolling update (DEMO-7): it serves what moves to it, calls nothing."""

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
            bool(section.get("spare", False)),
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
        self.reached: Tally[str] = Tally()
        """Calls that ended well, by the kind of object called (``rooms``, ``users``,
        ``counters``): the summary shows each host reached every kind (DEMO-2)."""

    def failed(self, what: str, error: zl.ZLinkError) -> None:
        """Count a failed call; the first failure of each kind is kept as an example."""
        kind = error.kind.name
        self.errors[kind] += 1
        if kind not in self.sampled:
            self.sampled.add(kind)
            self.samples[kind] = f"{what}: {' '.join(str(error).split())}"

    def regressed(self, what: str, before: int, now: int) -> None:
        """Count a read that went back (``STATE_LOST``), keeping the first as an example."""
        self.errors[STATE_LOST] += 1
        if STATE_LOST not in self.sampled:
            self.sampled.add(STATE_LOST)
            self.samples[STATE_LOST] = f"{what} read {now} after {before}"

    def take(self) -> dict[str, object]:
        """The counts since the last ``take`` (the fields of a ``stats`` event); resets them."""
        taken: dict[str, object] = {
            "sends": self.sends,
            "requests": self.requests,
            "latencies": self.latencies,
            "errors": dict(self.errors),
            "samples": self.samples,
            "reached": dict(self.reached),
        }
        self.sends, self.requests, self.latencies, self.errors = 0, 0, [], Tally()
        self.samples, self.reached = {}, Tally()
        return taken


def _kind(what: str) -> str:
    """``rooms``, ``users`` or ``counters``: the kind of object ``what`` ("room r1") names."""
    return what.split(" ", 1)[0] + "s"


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
            self.stats.reached[_kind(what)] += 1

    async def _request(self, what: str, submit: Callable[[], Any]) -> Any:
        """The reply, or ``None`` when the call failed (counted)."""
        started = trio.current_time()
        try:
            reply = await submit()
        except zl.ZLinkError as error:
            self.stats.failed(f"request to {what}", error)
            return None
        self.stats.requests += 1
        self.stats.reached[_kind(what)] += 1
        self.stats.latencies.append(round((trio.current_time() - started) * 1_000_000))
        return reply

    def _check(self, seen: dict[str, int], what: str, value: int) -> None:
        """A read of ``what`` that follows another of this loop must not go back (DEMO-8)."""
        before = seen.get(what, 0)
        if value < before:
            self.stats.regressed(what, before, value)
        seen[what] = max(before, value)

    async def one_round(self, rng: random.Random, seen: dict[str, int]) -> None:
        """Six calls: a send and a request to a room, a user and a counter; ``seen`` is what
        this loop read of each before."""
        route = self.host.route
        self.seq += 1
        room = rng.choice(self.plan.rooms)
        user = rng.choice(self.users)
        counter = rng.choice(self.plan.counters)
        say = Say(f"{self.plan.rid} says {self.seq}")
        await self._send(f"room {room}", route.send_to_spot(room, say))
        total = await self._request(
            f"room {room}",
            route.request_to_spot(room, Read(), reply_type=Total).timeout(REQUEST_TIMEOUT).submit,
        )
        if total is not None:
            self._check(seen, f"room {room}", total.value)
        await self._send(f"user {user}", route.send_to_actor(user, Speak(f"hello {self.seq}")))
        pong = await self._request(
            f"user {user}",
            route.request_to_actor(user, Ping(self.seq), reply_type=Pong)
            .timeout(REQUEST_TIMEOUT)
            .submit,
        )
        if pong is not None:  # a user that joined a room stays in it
            self._check(seen, f"user {user}", int(pong.room is not None))
        add = route.send_to_spot(counter, Add(1)).instance_spot(COUNTER_TYPE)
        await self._send(f"counter {counter}", add)
        total = await self._request(
            f"counter {counter}",
            route.request_to_spot(counter, Read(), reply_type=Total)
            .instance_spot(COUNTER_TYPE)
            .timeout(REQUEST_TIMEOUT)
            .submit,
        )
        if total is not None:
            self._check(seen, f"counter {counter}", total.value)

    async def run(self, worker: int) -> None:
        """Rounds until cancelled; each worker has its own random sequence."""
        rng = random.Random(f"{self.plan.rid}/{worker}")
        seen: dict[str, int] = {}
        while True:
            await self.one_round(rng, seen)
            await trio.lowlevel.checkpoint()
