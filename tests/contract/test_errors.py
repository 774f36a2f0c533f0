"""The public error model through the public API only (specs/errors.md)."""

from __future__ import annotations

import ast
import inspect
import pickle
import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

import zlink_trio as zl

SHARED_KINDS = {
    "NOT_FOUND": 0,
    "ALREADY_EXISTS": 1,
    "TYPE_MISMATCH": 2,
    "NOT_CONFIGURED": 3,
    "REJECTED": 4,
    "UNAVAILABLE": 5,
    "CAPACITY_EXCEEDED": 6,
    "DEADLINE_EXCEEDED": 7,
    "SHUTTING_DOWN": 8,
    "PROTOCOL_ERROR": 9,
    "INVALID_OPERATION": 10,
    "DATA_LOST": 11,
    "INTERNAL_FAILURE": 12,
}

RETRY_HINT = re.compile(r"retr(y|i)", re.IGNORECASE)


@pytest.mark.spec("ERR-2.1", "ERR-9.1")
def test_error_kind_has_exactly_the_thirteen_shared_numbers() -> None:
    """ErrorKind holds exactly the 13 kinds, named and numbered as every ZLink language does."""
    assert SHARED_KINDS == {kind.name: kind.value for kind in zl.ErrorKind}
    assert len(zl.ErrorKind) == 13
    assert zl.ErrorKind(0) is zl.ErrorKind.NOT_FOUND


@pytest.mark.spec("ERR-2.2")
@given(st.sampled_from(zl.ErrorKind), st.text())
def test_zlink_error_carries_its_kind_and_message(kind: zl.ErrorKind, message: str) -> None:
    """A ZLinkError exposes the kind it was made with and the message, unchanged."""
    error = zl.ZLinkError(kind, message)
    assert (kind, message) == (error.kind, error.message)
    assert kind.name in str(error)
    copy = pickle.loads(pickle.dumps(error))
    assert (kind, message) == (copy.kind, copy.message)


@pytest.mark.spec("ERR-2.2")
@pytest.mark.parametrize(("kind", "message"), [(5, "x"), ("UNAVAILABLE", "x"), (None, "x")])
def test_zlink_error_refuses_a_kind_that_is_not_an_error_kind(kind: object, message: str) -> None:
    """A plain number or name is not an ErrorKind: the error is refused where it is made."""
    with pytest.raises(TypeError):
        zl.ZLinkError(kind, message)  # type: ignore[arg-type]  # the wrong type is the point


@pytest.mark.spec("ERR-3.2")
def test_configuration_error_is_its_own_type_with_every_problem() -> None:
    """ConfigurationError is not a ZLinkError and lists every problem it was given."""
    error = zl.ConfigurationError(["spot type 'a' is declared twice", "no handler for 'b'"])
    assert not isinstance(error, zl.ZLinkError)
    assert ("spot type 'a' is declared twice", "no handler for 'b'") == error.problems
    assert "no handler for 'b'" in str(error)
    assert ("only one",) == zl.ConfigurationError("only one").problems
    with pytest.raises(TypeError):
        zl.ConfigurationError([])


def _public_names(obj: object) -> set[str]:
    names = {name for name in dir(obj) if not name.startswith("__")}
    names |= set(getattr(obj, "__slots__", ()))
    if inspect.isclass(obj):
        names |= set(inspect.signature(obj).parameters)
    return names


@pytest.mark.spec("ERR-7.1", "ERR-9.8")
def test_no_error_surface_offers_a_retry_hint() -> None:
    """No error type, error instance or error kind has a retry flag, advice or method."""
    surfaces: list[object] = [zl.ZLinkError, zl.ConfigurationError, zl.ErrorKind]
    surfaces += [zl.ZLinkError(kind, "m") for kind in zl.ErrorKind]
    surfaces += [zl.ConfigurationError("p"), *zl.ErrorKind]
    for surface in surfaces:
        hints = {name for name in _public_names(surface) if RETRY_HINT.search(name)}
        assert set() == hints, f"{surface!r} offers {hints}"
    exported = {name for name in zl.__all__ if RETRY_HINT.search(name)}
    assert set() == exported


@pytest.mark.spec("CMP-14.1")
def test_errors_are_told_apart_by_kind_not_by_message() -> None:
    """Every kind stays the kind it was made with, whatever its message says, including a
    message that names another kind or reads like one."""
    texts = ["", "cancelled while waiting", "the request timed out", "the host is shutting down"]
    texts += [kind.name for kind in zl.ErrorKind]
    texts += [kind.name.lower().replace("_", " ") for kind in zl.ErrorKind]
    for kind in zl.ErrorKind:
        for text in texts:
            error = zl.ZLinkError(kind, text)
            assert kind is error.kind, (kind, text)
            assert kind is pickle.loads(pickle.dumps(error)).kind, (kind, text)


def _branches_on_message_text(tree: ast.AST) -> list[int]:
    """Lines where code compares, searches or matches an error's text: ``x.message`` or
    ``str(x)`` inside a comparison, a string method call, or a ``re`` call."""

    def is_text(node: ast.AST) -> bool:
        if isinstance(node, ast.Attribute) and node.attr in ("message", "args"):
            return True
        return (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id in ("str", "repr")
            and len(node.args) == 1
        )

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            if any(is_text(o) for o in operands) and any(
                isinstance(o, ast.Constant) and isinstance(o.value, str) for o in operands
            ):
                lines.append(node.lineno)
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            func = node.func
            if is_text(func.value) and func.attr in STRING_TESTS:
                lines.append(node.lineno)
            if (
                isinstance(func.value, ast.Name)
                and func.value.id == "re"
                and any(is_text(a) for a in node.args)
            ):
                lines.append(node.lineno)
    return lines


STRING_TESTS = {"startswith", "endswith", "find", "index", "count", "__contains__", "lower"}


@pytest.mark.spec("CMP-14.1")
def test_no_code_path_branches_on_an_error_message() -> None:
    """No module of zlink_trio compares, searches or matches an error's message text."""
    root = Path(zl.__file__).parent
    found = {
        f"{path.relative_to(root)}:{line}"
        for path in sorted(root.rglob("*.py"))
        for line in _branches_on_message_text(ast.parse(path.read_text(), str(path)))
    }
    assert set() == found


def test_the_message_scan_finds_a_branch_on_text() -> None:
    """The scan above sees the shapes it looks for (a check is trusted once seen to fail)."""
    source = """
if "timed out" in error.message: pass
if str(error) == "x": pass
if error.message.startswith("no route"): pass
if re.search("lost", error.message): pass
if error.kind is ErrorKind.UNAVAILABLE: pass
"""
    assert [2, 3, 4, 5] == sorted(_branches_on_message_text(ast.parse(source)))
