"""The relocation benchmark still runs: ``python bench/relocation.py --quick`` (specs/bench.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlink_trio._integration.store import DSN_VARIABLE

BENCH = Path(__file__).resolve().parents[2] / "bench" / "relocation.py"

MEASURED = (
    "baseline measured in",
    "part 1 measured in",
    "part 3 measured in",
    "inside: seal start -> cutover submitted",
    "inside: seal start -> target serves it",
    "inside: seal start -> commit done",
    "outside: longest gap in the round",
    "baseline: one plain ZeroMQ transfer",
    "mean ms of each step",
    "result: RELOCATED/NONE",
    "host.relocate() took",
    "CPU used meanwhile",
    "traffic during it",
    "Actors of the Entry Spot",
)


@pytest.mark.spec("BENCH-3")
def test_the_relocation_benchmark_moves_spots_and_prints_every_figure(store_dsn: str) -> None:
    """A quick run over the session's store exits 0, prints every measured line and each target
    with its verdict, and the moved Spots kept their data and their counts."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, DSN_VARIABLE: store_dsn},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    for line in MEASURED:
        assert line in done.stdout, done.stdout
    targets = ("target <= 5 ms", "target <= 50 ms", "1,000 Spots and 1,000 Actors: <= 5 s")
    for target in targets:
        verdicts = [line for line in done.stdout.splitlines() if target in line]
        assert 1 == len(verdicts), done.stdout
        assert "met" in verdicts[0] or "missed" in verdicts[0], verdicts[0]
    assert "0 counts out of sequence" in done.stdout, done.stdout
    assert "every Spot's data intact after the last move: yes" in done.stdout, done.stdout
    assert "Traceback" not in done.stderr
