"""What bench/check.py compares: each bench reports its headline figures here as it prints
them. Outside ``bench/check.py`` (the variable unset) ``report`` does nothing. ``percentile`` is
the one definition of a percentile every bench prints.

A figure is a ratio against the baseline the bench measures in the same run wherever the bench
has one (so machine noise moves both sides), else an absolute figure of the bench's own (memory
per activation, creations per second, milliseconds of a relocation).
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Iterable
from pathlib import Path
from typing import Literal

VARIABLE = "ZLINK_BENCH_RATIOS"
"""The file (JSON lines) bench/check.py reads after the bench ends."""


def report(name: str, value: float, better: Literal["lower", "higher", "shown"]) -> None:
    """Record ``value`` under ``name`` for bench/check.py, when it runs this bench. A figure
    ``better`` "shown" is printed beside its record but never fails the guard (a p99 on a
    shared machine swings by more than the guard's 25 % from run to run)."""
    path = os.environ.get(VARIABLE)
    if not path:
        return
    bench = Path(sys.argv[0]).stem
    line = {"bench": bench, "name": name, "value": float(value), "better": better}
    with open(path, "a", encoding="utf-8") as out:
        out.write(json.dumps(line) + "\n")


def percentile(values: Iterable[float], share: float) -> float:
    """The nearest-rank percentile: the smallest value that ``share`` of ``values`` are at or
    below (for a p99 the 99th of 100 values, and the largest of fewer than 100)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("a percentile of no values")
    rank = math.ceil(round(share * len(ordered), 9))  # 0.99 * 100 is 99, not a hair above
    return ordered[max(0, rank - 1)]
