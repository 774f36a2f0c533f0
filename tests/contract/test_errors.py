"""The public error model through the public API only (specs/errors.md)."""

from __future__ import annotations

import inspect
import pickle
import re

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
    """Two errors with the same text are different kinds; the same kind matches any text."""
    cancelled_text = "cancelled while waiting"
    business = zl.ZLinkError(zl.ErrorKind.INTERNAL_FAILURE, cancelled_text)
    timeout = zl.ZLinkError(zl.ErrorKind.DEADLINE_EXCEEDED, cancelled_text)
    shutdown = zl.ZLinkError(zl.ErrorKind.SHUTTING_DOWN, "")
    assert business.kind is not timeout.kind
    assert zl.ErrorKind.SHUTTING_DOWN is shutdown.kind
    assert business.message == timeout.message
