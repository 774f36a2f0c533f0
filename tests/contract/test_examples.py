"""Every program in examples/ runs to completion (users copy from them)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.py"))
EXPECTED = {
    "chat_room.py": (
        "mallory: join lobby -> REJECTED",
        "ada: join lobby -> ACCEPTED",
        "| ada: hello",
        "| * bob left",
        "room closed: True",
        "after close: NOT_FOUND",
    ),
    "counter.py": ("reported totals: clicks=10, views=10",),
}
"""What each example must print, so an example that runs but does the wrong thing fails."""


@pytest.mark.parametrize("example", EXAMPLES, ids=[path.name for path in EXAMPLES])
def test_example_runs(example: Path, store_dsn: str) -> None:
    """The example exits 0 without a traceback (on the session's PostgreSQL)."""
    environ = {**os.environ, "ZLINK_STORE_DSN": store_dsn}
    done = subprocess.run(
        [sys.executable, str(example)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=environ,
    )
    assert done.returncode == 0, done.stderr
    for expected in EXPECTED.get(example.name, ()):
        assert expected in done.stdout, done.stdout


def test_readme_quick_start_runs(tmp_path: Path, store_dsn: str) -> None:
    """The Python block in README.md runs as written (the docs cannot drift from the API)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    blocks = readme.split("```python\n")[1:]
    assert blocks, "README.md has no python block"
    script = tmp_path / "quick_start.py"
    script.write_text(blocks[0].split("```")[0], encoding="utf-8")
    done = subprocess.run(
        [sys.executable, str(script)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "ZLINK_STORE_DSN": store_dsn},
    )
    assert done.returncode == 0, done.stderr
    assert "['hi']" in done.stdout
