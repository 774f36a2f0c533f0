"""The worked model-checking example runs green (specs/testing.md KIT-10)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from zlink_trio._integration.store import DSN_VARIABLE

FOLDER = Path(__file__).resolve().parents[2] / "examples" / "model_check"


@pytest.mark.spec("KIT-10")
def test_the_scoreboard_model_passes_under_pytest(store_dsn: str) -> None:
    """``pytest examples/model_check`` (its own pytest.ini and conftest) passes on the store:
    the model and the README's plain test on the ``zlink_store`` fixture."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(FOLDER)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=FOLDER,
        env={**os.environ, DSN_VARIABLE: store_dsn, "EXAMPLES": "10"},
    )
    assert 0 == done.returncode, done.stdout + done.stderr
    assert "2 passed" in done.stdout, done.stdout


@pytest.mark.spec("KIT-10")
def test_the_example_runs_across_python_versions_with_tox() -> None:
    """Its tox.ini lists the three Pythons and runs pytest with the test extra."""
    tox = (FOLDER / "tox.ini").read_text()
    assert "envlist = py311, py312, py313" in tox
    assert "[test]" in tox
    assert "commands = pytest" in tox
