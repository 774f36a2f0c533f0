"""The ``zlink-trio`` command (specs/api.md)."""

from __future__ import annotations

import subprocess
import sys

import pytest

import zlink_trio as zl


@pytest.mark.spec("API-4")
def test_command_prints_the_version_and_the_capabilities() -> None:
    """`python -m zlink_trio` prints the version and what the runtime provides, and exits 0."""
    done = subprocess.run(
        [sys.executable, "-m", "zlink_trio"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 0 == done.returncode, done.stderr
    assert f"zlink_trio {zl.__version__}" in done.stdout
    assert "[x] error model" in done.stdout
    assert "[x] transport" in done.stdout
    assert "[x] mesh" in done.stdout
    assert "[x] relocation" in done.stdout
    assert "[x] joins across" in done.stdout


@pytest.mark.spec("API-4")
def test_command_refuses_an_unknown_subcommand() -> None:
    """An unknown subcommand is a usage error (exit 2), not a traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "zlink_trio", "frobnicate"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert 2 == done.returncode
    assert "Traceback" not in done.stderr
