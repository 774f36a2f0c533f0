"""The application of the fencing history test (tests/e2e/test_fencing.py): one User Spot type
whose every handled message is recorded as (spot id, object generation, host, run, start, end,
seq), with the start and end of the turn on the machine-wide monotonic clock, so histories of
several processes can be compared.

The handlers never await, so a turn is one step of its Trio task: its interval is as short as
the process lets it be, and a process paused by SIGSTOP is paused before or after a turn, not in
the middle of one (but for the two clock reads)."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from typing import Any

import attrs

import zlink_trio as zl

app = zl.Application()

History = list[dict[str, Any]]


@app.message("fence.Note")
@attrs.frozen
class Note:
    seq: int


@app.message("fence.Ping")
@attrs.frozen
class Ping:
    n: int


@app.message("fence.Pong")
@attrs.frozen
class Pong:
    n: int


sink: Callable[[dict[str, Any]], None] = lambda _entry: None  # noqa: E731
"""Where each handled message goes: a list in the test process, a file in a child."""


def file_sink(path: str) -> Callable[[dict[str, Any]], None]:
    """A sink appending one JSON line per handled message to ``path``, flushed each time."""
    stream = open(path, "a", encoding="utf-8")  # noqa: SIM115  # open for the process's life

    def write(entry: dict[str, Any]) -> None:
        stream.write(json.dumps(entry) + "\n")
        stream.flush()

    return write


@app.user_spot("fence.Counter")
class Counter(zl.Spot):
    async def on_actor_join(self, actor_id: zl.ActorId, request: object) -> zl.SpotActorJoinResult:
        del actor_id, request  # it takes no member Actors
        return zl.SpotActorJoinResult.reject()

    async def on_joined_actor(self, actor: object) -> None:
        del actor

    async def on_leave_actor(self, actor: object) -> None:
        del actor

    def _record(self, seq: int | None, start: float, end: float) -> None:
        ref = self.context.ref
        sink(
            {
                "id": ref.spot_id.value,
                "gen": ref.object_generation.value,
                "host": ref.node_rid.value,
                "start": start,
                "end": end,
                "seq": seq,
            }
        )

    @zl.packet_handler(Note)
    async def note(self, msg: Note) -> None:
        start = time.monotonic()
        end = time.monotonic()
        self._record(msg.seq, start, end)

    @zl.request_handler(Ping)
    async def ping(self, req: Ping) -> Pong:
        start = time.monotonic()
        end = time.monotonic()
        self._record(None, start, end)
        return Pong(req.n)


def check_history(history: History) -> dict[str, set[tuple[int, str]]]:
    """Assert the fencing invariant over a whole history and return the incarnations seen per
    id: no two incarnations of one id handled messages in overlapping intervals, and no seq was
    handled twice anywhere."""
    spans: dict[str, dict[tuple[int, str], tuple[float, float]]] = {}
    seen: dict[int, dict[str, Any]] = {}
    for entry in history:
        incarnation = (entry["gen"], entry["host"])
        first, last = spans.setdefault(entry["id"], {}).get(
            incarnation, (entry["start"], entry["end"])
        )
        spans[entry["id"]][incarnation] = (
            min(first, entry["start"]),
            max(last, entry["end"]),
        )
        seq = entry["seq"]
        if seq is not None:
            assert seq not in seen, f"seq {seq} handled twice: {seen[seq]} and {entry}"
            seen[seq] = entry
    for spot_id, incarnations in spans.items():
        ordered = sorted(incarnations.items(), key=lambda item: item[1][0])
        for (one, (_, one_end)), (other, (other_start, _)) in itertools.pairwise(ordered):
            assert one_end < other_start, (
                f"{spot_id}: incarnation {one} handled until {one_end:.6f}, after incarnation "
                f"{other} began at {other_start:.6f}"
            )
    return {spot_id: set(incarnations) for spot_id, incarnations in spans.items()}
