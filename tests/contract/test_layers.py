"""The layering of DESIGN §1 and of the runtime's subsystems (specs/architecture.md ARCH-1),
checked by the import-linter contracts in pyproject.toml, and the check itself (ARCH-4)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path

import pytest
from importlinter import cli

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.spec("BND-1", "BND-2", "BND-3", "ARCH-1")
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


def _write(root: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")


def _lint_synthetic(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, low_module_text: str
) -> tuple[str, int]:
    """Run a layers contract (top over bottom) on a synthetic package whose bottom layer's
    module reads ``low_module_text``; the package's name and import-linter's exit status."""
    package = f"layered_{uuid.uuid4().hex}"
    _write(
        tmp_path,
        {
            f"{package}/__init__.py": "",
            f"{package}/top/__init__.py": "",
            f"{package}/top/user.py": f"from {package}.bottom import base\n",
            f"{package}/bottom/__init__.py": "",
            f"{package}/bottom/base.py": low_module_text.format(package=package),
            "contracts.ini": (
                "[importlinter]\n"
                f"root_package = {package}\n\n"
                "[importlinter:contract:layers]\n"
                "name = top over bottom\n"
                "type = layers\n"
                f"containers = {package}\n"
                "layers =\n    top\n    bottom\n"
                "exhaustive = true\n"
            ),
        },
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.chdir(tmp_path)
    loggers = [
        logger
        for logger in logging.Logger.manager.loggerDict.values()
        if isinstance(logger, logging.Logger) and not logger.disabled
    ]
    try:
        status = cli.lint_imports(config_filename="contracts.ini", no_cache=True)
    finally:
        for logger in loggers:
            logger.disabled = False
    return package, status


@pytest.mark.spec("ARCH-4")
def test_layers_check_passes_a_downward_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A higher layer importing a lower one keeps the contract."""
    _, status = _lint_synthetic(tmp_path, monkeypatch, "VALUE = 1\n")
    assert cli.EXIT_STATUS_SUCCESS == status


@pytest.mark.spec("ARCH-4")
def test_layers_check_fails_an_upward_import(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A lower layer importing a higher one breaks the contract."""
    _, status = _lint_synthetic(tmp_path, monkeypatch, "from {package}.top import user\n")
    assert cli.EXIT_STATUS_ERROR == status


@pytest.mark.spec("ARCH-4")
def test_layers_check_fails_an_upward_import_only_for_type_checking(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An upward import under ``if TYPE_CHECKING:`` breaks the contract too."""
    text = (
        "from typing import TYPE_CHECKING\n\n"
        "if TYPE_CHECKING:\n"
        "    from {package}.top.user import base\n"
    )
    _, status = _lint_synthetic(tmp_path, monkeypatch, text)
    assert cli.EXIT_STATUS_ERROR == status
