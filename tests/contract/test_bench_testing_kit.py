"""The testing kit's benchmark still runs: ``python bench/testing_kit.py --rounds 3``
(specs/bench.md BENCH-2)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlink_trio._integration.store import DSN_VARIABLE

BENCH = Path(__file__).resolve().parents[2] / "bench" / "testing_kit.py"


@pytest.mark.spec("BENCH-2")
def test_the_testing_kit_benchmark_prints_every_figure(store_dsn: str) -> None:
    done = subprocess.run(
        [sys.executable, str(BENCH), "--rounds", "3", "--examples", "3"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, DSN_VARIABLE: store_dsn},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    for line in (
        "host start, shared pool: p50",
        "host close, shared pool: p50",
        "host start, own pool:",
        "host close, own pool:",
        "example of 25 steps with its host: p50",
        "the same steps, bare trio.run each: p50",
        "hypothesis: ",
    ):
        assert line in done.stdout, done.stdout
