"""The summary table the demo prints at the end (specs/demo.md DEMO-4).

Per host: its node RID, sends, requests, messages per second, request p50 and p99, the
activations its node owned in the store after the workload stopped, failed calls and exit
status; a row ``all`` with the totals; then, per host, the calls that ended well by the kind
of object called (``reached by h1: rooms 1,234, users 1,210, counters 1,198``, DEMO-2);
then ``errors by kind:`` (``none`` when no call failed) and the first failed call of each kind
on each host. ``Summary.show`` draws the table with rich
on a terminal; anywhere else it writes plain lines, the format CI logs and
tests/contract/test_demo.py read: the title, the headings, a rule, one row a host with the
columns in that order padded with spaces (``h1     demo-1a2b3c4d-h1   5,905 ...``), a rule, the
``all`` row, the errors by kind.
"""

from __future__ import annotations

from collections import Counter as Tally
from collections.abc import Mapping, Sequence
from typing import TextIO

import attrs
from rich.console import Console
from rich.table import Table
from rich.text import Text

from zlink_trio._demo.record import HostRecord, count, errors_text, micros, percentile

__all__ = ["Row", "Summary"]

_COLUMNS = (
    ("host", "<6"),
    ("node", "<24"),
    ("sends", ">9"),
    ("requests", ">9"),
    ("msg/s", ">9"),
    ("req p50", ">10"),
    ("req p99", ">10"),
    ("activations", ">11"),
    ("errors", ">6"),
    ("exit", ">4"),
)
"""The columns: their headings and their plain format."""
_KINDS = ("rooms", "users", "counters")
"""The kinds of object the workload calls (workload.py), in the order the summary names them."""


@attrs.frozen
class Row:
    """One row of the table: one host, or ``all``."""

    name: str
    node: str
    sends: int
    requests: int
    rate: float
    p50: int | None
    p99: int | None
    activations: int | None
    errors: int
    returncode: int | None

    @classmethod
    def of(
        cls,
        name: str,
        node: str,
        *,
        sends: int,
        requests: int,
        elapsed: float,
        latencies: list[int],
        activations: int | None,
        errors: int,
        returncode: int | None,
    ) -> Row:
        rate = (sends + requests) / elapsed if elapsed > 0 else 0.0
        p50, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
        return cls(name, node, sends, requests, rate, p50, p99, activations, errors, returncode)

    def cells(self) -> tuple[str, ...]:
        """The text of each column."""
        return (
            self.name,
            self.node,
            f"{self.sends:,}",
            f"{self.requests:,}",
            f"{self.rate:,.0f}",
            micros(self.p50),
            micros(self.p99),
            "?" if self.activations is None else str(self.activations),
            str(self.errors),
            "" if self.returncode is None else str(self.returncode),
        )


def _plain(cells: Sequence[str]) -> str:
    return " ".join(
        f"{cell:{spec}}" for cell, (_heading, spec) in zip(cells, _COLUMNS, strict=True)
    )


@attrs.frozen
class Summary:
    """The summary of one run: a row per host, the ``all`` row, the errors by kind."""

    title: str
    rows: tuple[Row, ...]
    total: Row
    errors: Mapping[str, int]
    samples: tuple[str, ...]
    """``first KIND on hN: ...``, the first failed call of each kind on each host."""
    reached: tuple[str, ...] = ()
    """``reached by hN: rooms ..., users ..., counters ...``, for each host that called any."""

    @classmethod
    def of(
        cls,
        hosts: Sequence[HostRecord],
        mesh: str,
        elapsed: float,
        activations: Mapping[str, int] | None,
    ) -> Summary:
        owned = activations or {}
        rows = tuple(
            Row.of(
                host.name,
                host.rid,
                sends=host.sends,
                requests=host.requests,
                elapsed=elapsed,
                latencies=host.latencies,
                activations=owned.get(host.rid),
                errors=sum(host.errors.values()),
                returncode=host.returncode,
            )
            for host in hosts
        )
        errors: Tally[str] = Tally()
        for host in hosts:
            errors.update(host.errors)
        total = Row.of(
            "all",
            f"mesh {mesh}",
            sends=sum(host.sends for host in hosts),
            requests=sum(host.requests for host in hosts),
            elapsed=elapsed,
            latencies=[value for host in hosts for value in host.latencies],
            activations=sum(owned.values()) if activations is not None else None,
            errors=sum(errors.values()),
            returncode=None,
        )
        samples = tuple(
            f"  first {kind} on {host.name}: {sample}"
            for host in hosts
            for kind, sample in sorted(host.samples.items())
        )
        reached = tuple(
            f"reached by {host.name}: "
            + ", ".join(f"{kind} {host.reached[kind]:,}" for kind in _KINDS)
            for host in hosts
            if host.reached
        )
        title = f"summary ({count(len(hosts), 'host')}, {elapsed:.1f}s of workload)"
        return cls(title, rows, total, dict(errors), samples, reached)

    def footer(self) -> list[str]:
        """The lines under the table: the errors by kind and the first failure of each."""
        return [*self.reached, f"errors by kind: {errors_text(self.errors)}", *self.samples]

    def text(self) -> str:
        """The whole summary as plain lines, its title first."""
        header = _plain([heading for heading, _spec in _COLUMNS])
        rule = "-" * len(header)
        lines = [f"{self.title}:", header, rule]
        lines.extend(_plain(row.cells()) for row in self.rows)
        lines.extend([rule, _plain(self.total.cells()), *self.footer()])
        return "\n".join(lines)

    def table(self) -> Table:
        """The table rich draws on a terminal, the same rows as ``text``."""
        table = Table(title=self.title, title_justify="left", title_style="bold")
        for heading, spec in _COLUMNS:
            table.add_column(heading, justify="left" if spec.startswith("<") else "right")
        for n, row in enumerate(self.rows):
            table.add_row(*self._styled(row), end_section=n == len(self.rows) - 1)
        table.add_row(*self._styled(self.total), style="bold")
        return table

    @staticmethod
    def _styled(row: Row) -> list[Text]:
        cells = [Text(cell) for cell in row.cells()]
        if row.errors:
            cells[8].stylize("bold red")
        if row.returncode not in (None, 0):
            cells[9].stylize("bold red")
        return cells

    def show(self, out: TextIO, console: Console | None) -> None:
        """Write the summary: rich's table on a terminal (``console``), else plain lines."""
        if console is None:
            print(self.text(), file=out, flush=True)
            return
        console.print(self.table())
        for line in self.footer():
            console.print(line, markup=False, highlight=False)
