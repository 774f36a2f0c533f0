"""What the demo records of each host, and how its numbers read (specs/demo.md DEMO-3, DEMO-4).

``HostRecord`` is everything the parent knows about one host process: its phase in the protocol, its
status and relocation (DEMO-7), the counts and latencies its ``stats`` events added up, its failed
calls by kind (with the first of each kind as an example), the tail of its stderr and its exit
status. The live view (``view``) and the summary table (``summary``) both read these records, and
both write their numbers with the helpers here: ``percentile`` (nearest rank), ``micros``, ``count``
and ``errors_text`` (``none`` when nothing failed).
"""

from __future__ import annotations

import math
from collections import Counter as Tally
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import attrs
import trio

__all__ = ["HostRecord", "count", "errors_text", "micros", "percentile", "set_up_text"]


@attrs.define
class HostRecord:
    """What the parent knows about one host process."""

    index: int
    rid: str
    config: Path
    process: trio.Process | None = None
    phase: str = "starting"
    sends: int = 0
    requests: int = 0
    latencies: list[int] = attrs.field(factory=list)
    errors: Tally[str] = attrs.field(factory=Tally)
    reached: Tally[str] = attrs.field(factory=Tally)
    """Calls that ended well, by the kind of object called (DEMO-2)."""
    set_up: dict[str, Any] = attrs.field(factory=dict)
    failure: str | None = None
    samples: dict[str, str] = attrs.field(factory=dict)
    """The first failed call of each error kind, as the host described it."""
    stderr_tail: deque[str] = attrs.field(factory=lambda: deque(maxlen=40))
    returncode: int | None = None
    output_ended: trio.Event = attrs.field(factory=trio.Event)
    spare: bool = False
    """Started for the rolling update: it runs no workload of its own (DEMO-7)."""
    statuses: list[str] = attrs.field(factory=list)
    """Each ``zl.HostStatus`` the host reported, by name, in order."""
    relocation: dict[str, Any] | None = None
    """The ``relocated`` event of its rolling update, once it relocated."""
    relays: int = 0
    """Calls it sent on to units that had moved away (``zl.Host.follow_relays``), as it last
    reported them."""

    def add_stats(self, event: Mapping[str, Any]) -> tuple[list[int], Tally[str]]:
        """Adds up a ``stats`` event; returns its latencies and errors (the live view's)."""
        self.sends += int(event["sends"])
        self.requests += int(event["requests"])
        latencies = [int(value) for value in event["latencies"]]
        self.latencies.extend(latencies)
        errors = Tally({str(k): int(v) for k, v in dict(event["errors"]).items()})
        self.errors.update(errors)
        self.reached.update({str(k): int(v) for k, v in dict(event.get("reached", {})).items()})
        self.relays = int(event.get("relays", self.relays))
        for error_kind, sample in dict(event.get("samples", {})).items():
            self.samples.setdefault(str(error_kind), str(sample))
        return latencies, errors

    def report(self, event: Mapping[str, Any]) -> str | None:
        """Takes a ``status`` or ``relocated`` event; the new status if the host's changed."""
        self.relays = int(event.get("relays", self.relays))
        if event.get("event") == "relocated":
            self.relocation = dict(event)
            return None
        status = str(event.get("status"))
        if status == self.status:
            return None
        self.statuses.append(status)
        return status

    @property
    def status(self) -> str | None:
        """The host's last status it reported."""
        return self.statuses[-1] if self.statuses else None

    @property
    def relocated(self) -> bool:
        """Whether everything of this host moved away in a rolling update."""
        return self.relocation is not None and self.relocation.get("outcome") == "RELOCATED"

    @property
    def name(self) -> str:
        return f"h{self.index + 1}"


def percentile(values: list[int], fraction: float) -> int | None:
    """The nearest-rank percentile of ``values`` (sorted here), or ``None`` when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[rank - 1]


def micros(value: int | None) -> str:
    """A latency in microseconds with thousands separators, ``-`` when there is none."""
    return "-" if value is None else f"{value:,}µs"


def count(number: int, noun: str) -> str:
    """``1 host``, ``3 hosts``."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def errors_text(errors: Mapping[str, int]) -> str:
    """``KIND=n`` for every kind that failed, by kind; ``none`` when no call failed."""
    found = {kind: number for kind, number in errors.items() if number}
    if not found:
        return "none"
    return " ".join(f"{kind}={number}" for kind, number in sorted(found.items()))


def set_up_text(hosts: Sequence[HostRecord]) -> str:
    """The line after the set-up: rooms owned, users joined, counters activated, per host."""
    owned = ", ".join(
        f"{host.name} owns {count(len(host.set_up.get('own_rooms', [])), 'room')}, "
        f"{host.set_up.get('joined', 0)}/{host.set_up.get('users', 0)} users joined, "
        f"{count(host.set_up.get('counters', 0), 'counter')} activated cold"
        for host in hosts
    )
    return f"set up: {owned}"
