"""What a Spot's move carries between hosts, as plain wire data (specs/relocation.md RELOC-45,
RELOC-46): its timers' states and its adapter payload in chunks. The move itself (the framework
requests that carry these, issue 14 item 3) builds on this module; nothing here does I/O.

Rule 1: times travel as offsets. A timer state's times are on the source's application clock,
which means nothing on the target; they travel as seconds after the capture, and the target
places them on its own clock at the moment it reads them, so the schedule (next due time,
pending ticks, their lateness) keeps its shape (TIMER-15, TIMER-16 when the move exists).
Rule 2: a payload travels in chunks of at most the configured limit, numbered from 0 with the
count in each; an empty payload is one empty chunk (RELOC-9). The receiver accepts them only in
order, each once, all naming the same count, and none over the limit; anything else is the
sender's bug or a hostile peer: ``PROTOCOL_ERROR``, and the assembly is unusable after it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import cbor2

from zlink_trio._runtime.engines.timers import TimerState, TimerTick
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.options import TimerOptions, TimerOverrunPolicy

__all__ = [
    "PayloadAssembly",
    "payload_chunks",
    "timer_state_from_wire",
    "timer_state_to_wire",
    "timer_states_from_wire",
]


def timer_state_to_wire(state: TimerState) -> dict[str, Any]:
    """``state`` as CBOR-ready data, its times as seconds after the capture (Rule 1)."""
    at = state.captured_at
    return {
        "name": state.name,
        "interval": state.interval,
        "policy": state.options.overrun_policy.value,
        "catch_up": state.options.max_catch_up_ticks,
        "last": state.last_sequence,
        "next": state.next_sequence,
        "due_in": state.next_due - at,
        "pending": [[t.number, t.scheduled_at - at, t.skipped] for t in state.pending],
    }


def timer_state_from_wire(data: object, now: float) -> TimerState:
    """The state ``timer_state_to_wire`` gave, on a clock that reads ``now`` (Rule 1);
    ``PROTOCOL_ERROR`` for anything malformed."""
    try:
        if not isinstance(data, Mapping):
            raise TypeError(f"a timer state is a map, not {type(data).__name__}")
        name = data["name"]
        options = TimerOptions(
            overrun_policy=TimerOverrunPolicy(data["policy"]),
            max_catch_up_ticks=data["catch_up"],
        )
        due_in = _offset(data["due_in"])
        pending = tuple(
            TimerTick(name, number, now + _offset(offset), skipped)
            for number, offset, skipped in data["pending"]
        )
        return TimerState(
            name, data["interval"], options, data["last"], data["next"], now + due_in, pending, now
        )
    except (KeyError, TypeError, ValueError) as error:
        raise ZLinkError(
            ErrorKind.PROTOCOL_ERROR, f"a moved timer's state is malformed: {error}"
        ) from None


def timer_states_from_wire(data: bytes, now: float) -> tuple[TimerState, ...]:
    """The timer states a move carries, CBOR-encoded as a list (``timer_state_from_wire``
    each); anything else is ``PROTOCOL_ERROR``."""
    try:
        states = cbor2.loads(data)
    except (ValueError, cbor2.CBORDecodeError) as error:
        raise ZLinkError(ErrorKind.PROTOCOL_ERROR, f"a move's timers: {error}") from None
    if not isinstance(states, list):
        raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "a move's timers are a list")
    return tuple(timer_state_from_wire(state, now) for state in states)


def _offset(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"a time offset is a finite number of seconds, not {value!r}")
    return float(value)


def payload_chunks(payload: bytes, limit: int) -> list[bytes]:
    """``payload`` cut into chunks of at most ``limit`` bytes, in order; ``[b""]`` for an empty
    payload (Rule 2)."""
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"a chunk limit is a positive int, got {limit!r}")
    if not payload:
        return [b""]
    return [payload[start : start + limit] for start in range(0, len(payload), limit)]


class PayloadAssembly:
    """The receiver's side of Rule 2: ``add`` each chunk in order; ``payload`` once complete."""

    def __init__(self, limit: int) -> None:
        self._limit = limit
        self._parts: list[bytes] = []
        self._count: int | None = None
        self._broken = False

    @property
    def complete(self) -> bool:
        """Whether every chunk has arrived."""
        return not self._broken and self._count is not None and len(self._parts) == self._count

    def add(self, index: object, count: object, chunk: object) -> None:
        """Take chunk ``index`` of ``count``; ``PROTOCOL_ERROR`` unless it is the next one."""
        if self._broken:
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "the payload's transfer already failed")
        try:
            if not isinstance(chunk, bytes) or len(chunk) > self._limit:
                raise ValueError(f"a chunk is bytes of at most {self._limit}")
            if isinstance(count, bool) or not isinstance(count, int) or count < 1:
                raise ValueError(f"a chunk count is a positive int, not {count!r}")
            if self._count not in (None, count):
                raise ValueError(f"chunk count {count} after {self._count}")
            if index != len(self._parts) or len(self._parts) >= count:
                raise ValueError(f"chunk {index!r} where chunk {len(self._parts)} was due")
        except ValueError as error:
            self._broken = True
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, f"a moved payload: {error}") from None
        self._count = count
        self._parts.append(chunk)

    @property
    def payload(self) -> bytes:
        """The whole payload; ``PROTOCOL_ERROR`` before the last chunk arrived."""
        if not self.complete:
            raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "the payload is not complete")
        return b"".join(self._parts)
