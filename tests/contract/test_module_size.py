"""Modules stay small enough to read whole (specs/architecture.md ARCH-5)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "zlink_trio"
LIMIT = 400
REASON = "Longer than 400 lines:"


def oversized(root: Path) -> list[str]:
    """Every module under ``root`` longer than ``LIMIT`` lines whose docstring does not say why
    (a paragraph starting ``REASON``), as ``path: N lines``."""
    found: list[str] = []
    for path in sorted(root.rglob("*.py")):
        text = path.read_text(encoding="utf-8")
        lines = len(text.splitlines())
        if lines <= LIMIT:
            continue
        docstring = ast.get_docstring(ast.parse(text)) or ""
        if not any(paragraph.startswith(REASON) for paragraph in docstring.split("\n\n")):
            found.append(f"{path.relative_to(root.parent)}: {lines} lines")
    return found


@pytest.mark.spec("ARCH-5")
def test_no_module_is_over_the_limit_without_a_reason() -> None:
    """Every module of zlink_trio has at most 400 lines or says at its top why it needs more."""
    assert [] == oversized(PACKAGE)


@pytest.mark.spec("ARCH-5")
def test_the_size_check_needs_the_reason_paragraph(tmp_path: Path) -> None:
    """A long module fails the check until its docstring has the reason paragraph."""
    body = "VALUE = 1\n" * LIMIT
    (tmp_path / "short.py").write_text('"""Short."""\n', encoding="utf-8")
    (tmp_path / "long.py").write_text('"""Long.\n\nIt is long."""\n' + body, encoding="utf-8")
    (tmp_path / "why.py").write_text(
        f'"""Long.\n\n{REASON} one state machine.\n"""\n' + body, encoding="utf-8"
    )
    assert [f"{tmp_path.name}/long.py: {LIMIT + 3} lines"] == oversized(tmp_path)
