"""The layering of DESIGN §1, checked by the import-linter contracts in pyproject.toml."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from importlinter import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spec("BND-1", "BND-2", "BND-3")
def test_import_linter_contracts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """_wire imports no trio/binding/runtime, only _integration imports the bindings, and the
    layers point one way; a broken contract fails this test with import-linter's report."""
    monkeypatch.chdir(ROOT)
    # import-linter configures logging and so disables every logger that exists already; put
    # them back so tests that run after this one in the same process still see their logs.
    loggers = [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger) and not logger.disabled
    ]
    try:
        assert cli.EXIT_STATUS_SUCCESS == cli.lint_imports(config_filename="pyproject.toml")
    finally:
        for logger in loggers:
            logger.disabled = False
