"""The supported Pythons and the type gate are part of every CI run (specs/api.md, DEC-20)."""

from __future__ import annotations

import configparser
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def tox_config() -> configparser.ConfigParser:
    config = configparser.ConfigParser(interpolation=None)
    config.read(ROOT / "tox.ini", encoding="utf-8")
    return config


@pytest.mark.spec("DEC-20")
def test_every_supported_python_is_a_default_tox_env_that_ci_requires() -> None:
    """tox runs the tests on 3.11, 3.12 and 3.13 by default; CI fails when one is missing."""
    envs = [env.strip() for env in tox_config()["tox"]["envlist"].split(",")]
    assert {"py311", "py312", "py313"} <= set(envs)
    setup = configparser.ConfigParser(interpolation=None)
    setup.read(ROOT / "setup.cfg", encoding="utf-8")
    assert setup["options"]["python_requires"].strip() == ">=3.11"
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "for minor in 3.11 3.12 3.13" in ci
    assert "TOX_SKIP_MISSING_INTERPRETERS=false" in ci


@pytest.mark.spec("API-5", "DEC-20")
def test_the_typing_gate_runs_strict_mypy_over_the_package() -> None:
    """The default tox run includes the typing env, which runs mypy --strict on zlink_trio."""
    config = tox_config()
    assert "typing" in config["tox"]["envlist"]
    assert config["testenv:typing"]["commands"].split() == ["mypy"]
    mypy = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["mypy"]
    assert mypy["strict"] is True
    assert mypy["packages"] == ["zlink_trio"]
    assert "ignore_errors" not in mypy
