"""The demo's rolling update, mid-workload (specs/demo.md DEMO-7..DEMO-9).

The hosts start with application version ``FROM_VERSION``. A third of the way into the workload
``RollingUpdate.run`` starts one more host process, a spare (``Plan.spare``) of version
``TO_VERSION``, waits until it is ready (it serves and sees every host), reads from the store
which Spots and Actors the first host owns, and tells that host ``relocate TO_VERSION``: it
relocates as a rolling update while every loop goes on calling (and goes on for at least
``AFTER_UPDATE`` seconds after the update ended), reports the result (the
``relocated`` event: outcome, reason, the seconds ``host.relocate`` took, each move's seal to
open from the runtime's ``MoveTimes``), then shuts down. Units moved are counted from the store:
the ids the source owned when the update began that the store now names on the spare with the
object generation they had. Follow relays, the calls the source sent on to units that had
moved away (``zl.Host.follow_relays``, RELOC-79), are what the source last reported: the live
view shows them as they grow, the summary the count after the source's shutdown, whose quiet
wait relays what still reaches it (RELOC-69).

The parent drives it through ``Hosts``, the few of its methods the update needs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Protocol

import trio

from zlink_trio._demo.record import HostRecord, count
from zlink_trio._demo.store import StoreRows

__all__ = [
    "AFTER_UPDATE",
    "FROM_VERSION",
    "TO_VERSION",
    "UPDATE_TIMEOUT",
    "Hosts",
    "RollingUpdate",
]

FROM_VERSION = "1"
"""The application version every host of the demo starts with."""
TO_VERSION = "2"
"""The version of the spare host, the rolling update's target."""
UPDATE_TIMEOUT = 120.0
"""Seconds the whole update may take: the spare starting, the relocation, the source's exit."""
AFTER_UPDATE = 2.0
"""Seconds the workload runs on at least after the update ended, so moved units are called:
two progress lines at the least (the last takes up to a second and a half)."""


class Hosts(Protocol):
    """What the update needs of the parent."""

    hosts: list[HostRecord]
    mesh: str
    workdir: Path

    def say(self, text: str) -> None: ...

    def write_config(
        self, host: HostRecord, rids: Sequence[str], version: str, *, spare: bool
    ) -> None: ...

    async def start(self, host: HostRecord, nursery: trio.Nursery) -> None: ...

    async def send(self, host: HostRecord, command: str) -> None: ...

    async def read_store(self) -> StoreRows | None: ...

    async def changed_wait(self) -> None: ...


class RollingUpdate:
    """One rolling update of ``parent``'s first host, ``delay`` seconds into the workload."""

    def __init__(self, parent: Hosts, delay: float) -> None:
        self.parent = parent
        self.delay = delay
        self.source = parent.hosts[0]
        self.spare: HostRecord | None = None
        self.to_move: dict[str, int] | None = None
        """The source's records when the update began: key -> object generation."""
        self.moved: int | None = None
        """How many of them the store names on the spare with their generation, last read."""
        self.problem: str | None = None
        self.final = False
        """Whether ``moved`` was read after the source exited (not when interrupted before)."""
        self.done = trio.Event()
        self.ended = math.inf
        """When the update ended (Trio's clock)."""

    def until(self, end: float) -> float:
        """When the workload that would end at ``end`` may end: not before ``AFTER_UPDATE``
        seconds after the update."""
        return max(end, self.ended + AFTER_UPDATE)

    async def run(self, nursery: trio.Nursery) -> None:
        """The update; ``done`` is set when it ended, ``problem`` says why if it failed."""
        try:
            await trio.sleep(self.delay)
            with trio.fail_after(UPDATE_TIMEOUT):
                await self._update(nursery)
        except trio.TooSlowError:
            self.problem = f"rolling update did not end within {UPDATE_TIMEOUT:.0f}s"
        except _Failed as error:
            self.problem = str(error)
        finally:
            self.ended = trio.current_time()
            self.done.set()

    async def _update(self, nursery: trio.Nursery) -> None:
        parent, source = self.parent, self.source
        index = len(parent.hosts)
        spare = HostRecord(
            index, f"{parent.mesh}-h{index + 1}", parent.workdir / f"h{index + 1}.toml", spare=True
        )
        parent.write_config(
            spare, [host.rid for host in parent.hosts] + [spare.rid], TO_VERSION, spare=True
        )
        parent.hosts.append(spare)
        self.spare = spare
        parent.say(f"rolling update: starting {spare.name} with application version {TO_VERSION}")
        await parent.start(spare, nursery)
        await self._until(lambda: spare.phase == "ready")
        rows = await parent.read_store()
        if rows is None:
            raise _Failed("the store could not be read")
        self.to_move = {
            key: gen
            for key, (owner, gen, entry) in rows.items()
            if owner == source.rid and not entry
        }
        self.moved = 0
        parent.say(
            f"rolling update: {source.name} relocates {count(len(self.to_move), 'unit')} "
            f"to version {TO_VERSION} ({spare.name}), then shuts down"
        )
        await parent.send(source, f"relocate {TO_VERSION}")
        await self._until(lambda: source.relocation is not None)
        self.count(await parent.read_store())  # the view's next line shows it, not a second late
        if not source.relocated:
            relocation = source.relocation or {}
            raise _Failed(f"{relocation.get('outcome')}/{relocation.get('reason')}")
        await self._until(lambda: source.returncode is not None)
        rows = await parent.read_store()
        self.count(rows)
        self.final = rows is not None

    async def _until(self, done: Callable[[], bool]) -> None:
        while not done():
            for host in (self.source, self.spare):
                if host is not None and host.failure is not None:
                    raise _Failed(f"{host.name} ({host.rid}) {host.failure}")
            await self.parent.changed_wait()

    def count(self, rows: StoreRows | None) -> None:
        """Counts the units moved by ``rows``, a read of the store."""
        if rows is None or self.to_move is None or self.spare is None:
            return
        spare = self.spare.rid
        self.moved = sum(
            1 for key, gen in self.to_move.items() if rows.get(key) == (spare, gen, False)
        )

    def hosts(self) -> tuple[HostRecord, ...]:
        """The hosts of the update once it began: the source and the spare."""
        return () if self.spare is None else (self.source, self.spare)

    @property
    def started(self) -> bool:
        return self.spare is not None

    def text(self) -> str | None:
        """The live view's part: each host's status and the units moved; ``None`` before."""
        if self.spare is None:
            return None
        statuses = " ".join(
            f"{host.name}={'exited' if host.returncode is not None else host.status or 'starting'}"
            for host in (self.source, self.spare)
        )
        if self.to_move is None or self.moved is None:
            return statuses
        return f"{statuses} moved {self.moved}/{len(self.to_move)} relays {self.source.relays:,}"

    def summary(self, errors: int) -> list[str]:
        """The summary's lines on the update; ``errors`` is the errors of the whole run (failed
        calls and reads that went back)."""
        if self.spare is None:
            return ["rolling update: not started"]
        relocation = self.source.relocation
        head = (
            f"rolling update: {self.source.name} (version {FROM_VERSION}) -> "
            f"{self.spare.name} (version {TO_VERSION}): "
        )
        if relocation is None:
            return [head + (self.problem or "no result")]
        lines = [
            head + f"{relocation['outcome']} reason {relocation['reason']} "
            f"in {float(relocation['seconds']):.2f}s"
        ]
        if not self.final:
            lines.append("  units moved: not read (the update did not end)")
        elif self.to_move is not None and self.moved is not None:
            lines.append(
                f"  units moved: {self.moved}/{len(self.to_move)} (store: on "
                f"{self.spare.name} with their object generation)"
            )
        sealed = [float(value) for value in relocation.get("sealed", [])]
        if sealed:
            lines.append(
                f"  moves: {len(sealed)} (a room with its members is one), longest seal to open "
                f"{max(sealed) * 1000:.0f} ms"
            )
        lines.append(f"  {self.source.name} went {' -> '.join(self.source.statuses)}")
        lines.append(
            f"  errors in the run: {errors}; follow relays by {self.source.name}: "
            f"{self.source.relays:,} (calls it sent on to units that had moved)"
        )
        if self.problem is not None and self.source.relocated:  # it failed after the move
            lines.append(f"  {self.problem}")
        if self.problem is not None:  # the two hosts' warnings say why (a failed host's are
            for host in self.hosts():  # shown with its failure)
                if host.returncode == 0 and host.failure is None:
                    lines.extend(f"  {host.name} | {line}" for line in host.stderr_tail)
        return lines


class _Failed(Exception):
    """The update cannot go on; the message says why."""
