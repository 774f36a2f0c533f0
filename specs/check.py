"""The specs check (specs/README.md): every rule is proven by a test or pending with a reason.

Run ``python specs/check.py``. It reads the rules of ``specs/*.md`` and the ``spec`` marks of
``tests/**/*.py`` (by parsing, not importing, so it needs nothing installed) and fails when

- a rule ID is malformed or defined twice, or a rule has no ``Source:`` line;
- a ``Pending:`` line has no reason;
- a rule that is not pending has no citing test;
- a test cites an ID that no spec defines, or cites a pending rule (prove it or keep it pending,
  not both).

It prints the count of proven and pending rules, per file and in total.
"""

from __future__ import annotations

import ast
import re
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPECS = ROOT / "specs"
TESTS = ROOT / "tests"

ID_PATTERN = r"[A-Z]+-\d+(?:\.\d+)*"
RULE_START = re.compile(rf"^- \*\*({ID_PATTERN})\*\* ")
LOOSE_RULE_START = re.compile(r"^\s*[-*] \*\*([A-Z]+-[^*]*)\*\*")
PENDING = re.compile(r"^  Pending:(.*)$")
SOURCE = re.compile(r"^  Source:\s*\S")
WELL_FORMED = re.compile(rf"^{ID_PATTERN}$")


@dataclass
class Rule:
    id: str
    path: Path
    line: int
    pending: str | None = None
    has_source: bool = False


@dataclass
class Report:
    rules: dict[str, Rule] = field(default_factory=dict)
    citations: dict[str, list[str]] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def read_rules(report: Report) -> None:
    """Collect every rule of specs/*.md into ``report.rules``."""
    for path in sorted(SPECS.glob("*.md")):
        current: Rule | None = None
        fenced = False
        for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            where = f"{path.relative_to(ROOT)}:{number}"
            if text.lstrip().startswith("```"):
                # Examples inside code fences are not rules.
                fenced, current = not fenced, None
                continue
            if fenced:
                continue
            start = RULE_START.match(text)
            if start:
                current = Rule(start.group(1), path, number)
                if current.id in report.rules:
                    first = report.rules[current.id]
                    report.problems.append(
                        f"{where}: {current.id} is already defined at "
                        f"{first.path.relative_to(ROOT)}:{first.line}"
                    )
                else:
                    report.rules[current.id] = current
                continue
            loose = LOOSE_RULE_START.match(text)
            if loose:
                report.problems.append(f"{where}: malformed rule start {loose.group(0)!r}")
                current = None
                continue
            if current is None or not text.startswith("  "):
                current = None
                continue
            pending = PENDING.match(text)
            if pending:
                reason = pending.group(1).strip()
                if not reason:
                    report.problems.append(f"{where}: {current.id} is pending without a reason")
                current.pending = reason or "(no reason)"
            elif SOURCE.match(text):
                current.has_source = True
    for rule in report.rules.values():
        if not rule.has_source:
            report.problems.append(
                f"{rule.path.relative_to(ROOT)}:{rule.line}: {rule.id} has no Source: line"
            )


def _spec_marks(tree: ast.AST) -> Iterator[tuple[int, str | None]]:
    """(line, id) for every string argument of a ``pytest.mark.spec(...)`` / ``mark.spec(...)``."""
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        if not (isinstance(func, ast.Attribute) and func.attr == "spec"):
            continue
        owner = func.value
        if not (
            (isinstance(owner, ast.Attribute) and owner.attr == "mark")
            or (isinstance(owner, ast.Name) and owner.id == "mark")
        ):
            continue
        for arg in node.args:
            if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
                yield node.lineno, arg.value
            else:
                yield node.lineno, None


def read_citations(report: Report) -> None:
    """Collect every ID cited by a test into ``report.citations`` (ID -> places)."""
    for path in sorted(TESTS.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for line, cited in _spec_marks(tree):
            where = f"{path.relative_to(ROOT)}:{line}"
            if cited is None:
                report.problems.append(f"{where}: spec marks take literal ID strings only")
            elif not WELL_FORMED.match(cited):
                report.problems.append(f"{where}: malformed spec ID {cited!r}")
            else:
                report.citations.setdefault(cited, []).append(where)


def check(report: Report) -> None:
    """Cross-check rules and citations, appending every problem found."""
    for cited, places in sorted(report.citations.items()):
        rule = report.rules.get(cited)
        if rule is None:
            report.problems.append(f"{places[0]}: cites {cited}, which no spec defines")
        elif rule.pending is not None:
            report.problems.append(
                f"{places[0]}: cites {cited}, which is pending ({rule.pending}); "
                "drop its Pending: line if the test proves it"
            )
    for rule in report.rules.values():
        if rule.pending is None and rule.id not in report.citations:
            report.problems.append(
                f"{rule.path.relative_to(ROOT)}:{rule.line}: {rule.id} is neither cited by a "
                "test nor pending"
            )


def main() -> int:
    report = Report()
    read_rules(report)
    read_citations(report)
    check(report)
    if not report.rules:
        report.problems.append("no rules found under specs/")
    by_file: dict[str, list[int]] = {}
    for rule in report.rules.values():
        counts = by_file.setdefault(rule.path.name, [0, 0])
        counts[rule.pending is not None] += 1
    width = max((len(name) for name in by_file), default=10)
    for name, (proven, pending) in sorted(by_file.items()):
        print(f"  {name:<{width}}  {proven:4d} proven  {pending:4d} pending")
    proven = sum(counts[0] for counts in by_file.values())
    pending = sum(counts[1] for counts in by_file.values())
    for problem in report.problems:
        print(f"error: {problem}")
    status = "FAILED" if report.problems else "ok"
    print(
        f"specs: {proven} proven, {pending} pending, {len(report.rules)} rules; "
        f"{len(report.problems)} problems: {status}"
    )
    return 1 if report.problems else 0


if __name__ == "__main__":
    sys.exit(main())
