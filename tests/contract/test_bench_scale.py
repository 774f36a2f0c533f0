"""The scale benchmark still runs: ``python bench/scale.py --hosts 2 --idle 2`` (specs/bench.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlink_trio._integration.store import DSN_VARIABLE

BENCH = Path(__file__).resolve().parents[2] / "bench" / "scale.py"

MEASURED = (
    "N = 2 hosts",
    "every host saw every other",
    "store transactions, whole mesh",
    "store transactions per host",
    "PostgreSQL connections",
    "RSS per host process",
    "CPU of all host processes",
    "CPU of their PostgreSQL backends",
    "join: the last member saw it",
    "leave: the last member saw it",
    "summary",
)


@pytest.mark.spec("BENCH-4")
def test_the_scale_benchmark_forms_a_mesh_and_prints_every_figure(store_dsn: str) -> None:
    """The smallest run over the session's store (two host processes, a short idle window)
    exits 0 and prints every measured line with each target's verdict."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--hosts", "2", "--idle", "2"],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        env={**os.environ, DSN_VARIABLE: store_dsn},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    for line in MEASURED:
        assert line in done.stdout, done.stdout
    for target in ("target <= 2.00", "target <= 1.5", "judged as 1.25 s"):
        verdicts = [line for line in done.stdout.splitlines() if target in line]
        assert verdicts, done.stdout
        assert all(": met" in line or ": missed" in line for line in verdicts), verdicts
    assert "FAILED" not in done.stdout, done.stdout
    assert "Traceback" not in done.stderr
