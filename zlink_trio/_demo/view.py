"""The live view of the workload, once a second (specs/demo.md DEMO-3).

Each second shows what the hosts reported since the second before (``Interval``): messages per
second (sends and completed requests), request latency p50 and p99, the activations per node
read from the store and the errors by kind, and once the rolling update began (DEMO-9) its
hosts' statuses and the units moved so far. ``LiveView`` shows each ``Progress`` one of two
ways: on a terminal rich's ``Live`` redraws a small table in place; anywhere else each second is
one plain line, the format CI logs and tests/contract/test_demo.py read::

    [  1.0s]     4,897 msg/s  req p50   3,033µs p99  12,266µs  activations h1=11 h2=11  errors none
    [  2.0s]  ...  errors none  update h1=RELOCATING h3=SERVING moved 4/11
"""

from __future__ import annotations

import types
from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from typing import TextIO

import attrs
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from zlink_trio._demo.record import HostRecord, errors_text, micros, percentile

__all__ = ["Interval", "LiveView", "Progress", "activations_of"]


def activations_of(
    hosts: Sequence[HostRecord], activations: Mapping[str, int] | None
) -> tuple[tuple[str, int], ...] | None:
    """Each host's name with the activations its node owns, ``None`` when the store was not read
    yet."""
    if activations is None:
        return None
    return tuple((host.name, activations.get(host.rid, 0)) for host in hosts)


@attrs.frozen
class Progress:
    """One second of the workload, as the view shows it."""

    elapsed: float
    rate: float
    p50: int | None
    p99: int | None
    activations: tuple[tuple[str, int], ...] | None
    errors: Mapping[str, int]
    update: str | None = None
    """The rolling update's hosts and units moved (``update.RollingUpdate.text``), once begun."""

    def activations_text(self) -> str:
        if self.activations is None:
            return "?"
        return " ".join(f"{name}={number}" for name, number in self.activations)

    def line(self) -> str:
        """The plain line shown outside a terminal."""
        return (
            f"[{self.elapsed:5.1f}s] {self.rate:>9,.0f} msg/s  req p50 {micros(self.p50):>9} "
            f"p99 {micros(self.p99):>9}  activations {self.activations_text()}  "
            f"errors {errors_text(self.errors)}"
            + ("" if self.update is None else f"  update {self.update}")
        )

    def table(self, seconds: float) -> Table:
        """The table rich redraws on a terminal; ``seconds`` is the whole workload's time."""
        table = Table(
            title=f"after {self.elapsed:.1f}s of {seconds:g}s",
            title_justify="left",
            title_style="bold",
            caption=None if self.update is None else f"rolling update: {self.update}",
            caption_justify="left",
        )
        # Widths of the plain line, so the table does not jump as the numbers change.
        table.add_column("msg/s", justify="right", min_width=9)
        table.add_column("req p50", justify="right", min_width=9)
        table.add_column("req p99", justify="right", min_width=9)
        table.add_column("activations")
        table.add_column("errors")
        errors = errors_text(self.errors)
        table.add_row(
            f"{self.rate:,.0f}",
            micros(self.p50),
            micros(self.p99),
            self.activations_text(),
            Text(errors, style="green" if errors == "none" else "bold red"),
        )
        return table


@attrs.define
class Interval:
    """What the hosts reported since the last progress line."""

    ops: int = 0
    latencies: list[int] = attrs.field(factory=list)
    errors: Tally[str] = attrs.field(factory=Tally)

    def add(self, ops: int, latencies: list[int], errors: Mapping[str, int]) -> None:
        self.ops += ops
        self.latencies.extend(latencies)
        self.errors.update(errors)

    def take(
        self,
        elapsed: float,
        span: float,
        activations: tuple[tuple[str, int], ...] | None,
        update: str | None = None,
    ) -> Progress:
        """The ``Progress`` of the last ``span`` seconds; starts the next interval."""
        progress = Progress(
            elapsed,
            self.ops / span if span > 0 else 0.0,
            percentile(self.latencies, 0.50),
            percentile(self.latencies, 0.99),
            activations,
            dict(self.errors),
            update,
        )
        self.ops, self.latencies, self.errors = 0, [], Tally()
        return progress


class LiveView:
    """Shows each ``Progress``: redrawn in place by rich on a terminal (``console``), else one
    plain line on ``out`` each."""

    def __init__(self, out: TextIO, console: Console | None, seconds: float) -> None:
        self.out = out
        self.seconds = seconds
        self.live = (
            None
            if console is None
            else Live(
                Progress(0.0, 0.0, None, None, None, {}).table(seconds),
                console=console,
                auto_refresh=False,
            )
        )

    def __enter__(self) -> LiveView:
        if self.live is not None:
            self.live.start(refresh=True)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        traceback: types.TracebackType | None,
    ) -> None:
        if self.live is not None:
            self.live.stop()  # the last table stays on screen

    def show(self, progress: Progress) -> None:
        if self.live is None:
            print(progress.line(), file=self.out, flush=True)
        else:
            self.live.update(progress.table(self.seconds), refresh=True)
