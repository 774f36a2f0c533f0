"""The many-hosts benchmark still runs: ``python bench/mesh.py --quick`` (specs/bench.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlink_trio._integration.store import DSN_VARIABLE

BENCH = Path(__file__).resolve().parents[2] / "bench" / "mesh.py"

MEASURED = (
    "minimal loop measured in",
    "cluster of 2 hosts formed in",
    "ours measured in",
    "minimal pyzmq+Trio loop (baseline)",
    "ours (two hosts)",
    "request p50",
    "request p99",
    "64 outstanding",
    "one-way sends",
    "transport_security='curve'",
    "transport_security='none'",
    "the cost of encryption",
)


@pytest.mark.spec("BENCH-1", "SEC-8")
def test_the_mesh_benchmark_forms_two_hosts_and_prints_every_figure(store_dsn: str) -> None:
    """A quick run over the session's store exits 0 and prints every measured line, each target
    with its verdict, once for CURVE and once for plain hosts, and the cost of encryption."""
    done = subprocess.run(
        [sys.executable, str(BENCH), "--quick"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, DSN_VARIABLE: store_dsn},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    for line in MEASURED:
        assert line in done.stdout, done.stdout
    for target in ("target <= 1.5x", "target <= 2x", "target >= 20000", "target >= 50000"):
        verdicts = [line for line in done.stdout.splitlines() if target in line]
        assert 2 == len(verdicts), done.stdout
        assert verdicts[0].endswith((": met", ": missed")), verdicts[0]
    assert "Traceback" not in done.stderr
