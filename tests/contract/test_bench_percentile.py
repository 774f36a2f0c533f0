"""The benches' one percentile, nearest-rank (specs/bench.md BENCH-5)."""

from __future__ import annotations

import re
import runpy
from collections.abc import Callable, Iterable
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _percentile() -> Callable[[Iterable[float], float], float]:
    """bench/ratios.py's ``percentile``, run from its file (bench/ is not a package)."""
    return runpy.run_path(str(BENCH / "ratios.py"))["percentile"]  # type: ignore[no-any-return]


@pytest.mark.spec("BENCH-5")
def test_the_percentile_is_nearest_rank() -> None:
    """The p99 of 1..100 is 99 (the index ``int(0.99 * 100)`` would give 100, the largest), of
    1..101 100, of 1..99 and 1..40 the largest; the p50 of 1..100 is 50; no values is an
    error."""
    percentile = _percentile()
    assert 99 == percentile(range(1, 101), 0.99)
    assert 100 == percentile(range(1, 102), 0.99)
    assert 99 == percentile(range(1, 100), 0.99)
    assert 40 == percentile(range(1, 41), 0.99)
    assert 50 == percentile(range(100, 0, -1), 0.5)
    assert 1980 == percentile(range(1, 2001), 0.99)
    assert 7 == percentile([7], 0.99)
    with pytest.raises(ValueError):
        percentile([], 0.5)


@pytest.mark.spec("BENCH-5")
def test_no_bench_computes_a_percentile_of_its_own() -> None:
    """No bench but ratios.py indexes sorted values by a share of their count."""
    own = re.compile(r"int\([^)]*\*\s*len\(|int\(\s*len\([^)]*\)\s*\*|def percentile\(")
    found = [
        path.name
        for path in sorted(BENCH.glob("*.py"))
        if path.name != "ratios.py" and own.search(path.read_text(encoding="utf-8"))
    ]
    assert [] == found
