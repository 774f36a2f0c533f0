"""Every program in examples/ runs to completion (users copy from them)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs(example: Path) -> None:
    """The example exits 0 without a traceback."""
    done = subprocess.run(
        [sys.executable, str(example)], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
