"""Shared test configuration: spec marks are checked against specs/ when tests are collected."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

_CHECK = Path(__file__).resolve().parent.parent / "specs" / "check.py"


def _known_rule_ids() -> set[str]:
    loader = importlib.util.spec_from_file_location("zlink_specs_check", _CHECK)
    assert loader is not None
    assert loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    sys.modules[loader.name] = module  # dataclasses look their module up while the class is made
    loader.loader.exec_module(module)
    report = module.Report()
    module.read_rules(report)
    return set(report.rules)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that cites an unknown spec ID fails collection instead of proving nothing."""
    known = _known_rule_ids()
    unknown = sorted(
        {
            f"{item.nodeid} cites {cited}"
            for item in items
            for mark in item.iter_markers("spec")
            for cited in mark.args
            if cited not in known
        }
    )
    if unknown:
        raise pytest.UsageError("unknown spec IDs:\n  " + "\n  ".join(unknown))
