"""The benches' one percentile, nearest-rank (specs/bench.md BENCH-5)."""

from __future__ import annotations

import importlib.util
import re
import types
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _ratios() -> types.ModuleType:
    """bench/ratios.py, loaded from its file (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_ratios", BENCH / "ratios.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.spec("BENCH-5")
def test_the_percentile_is_nearest_rank() -> None:
    """The p99 of 1..100 is 99 (the index ``int(0.99 * 100)`` would give 100, the largest), of
    1..101 100, of 1..99 and 1..40 the largest; the p50 of 1..100 is 50; no values is an
    error."""
    percentile = _ratios().percentile
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
