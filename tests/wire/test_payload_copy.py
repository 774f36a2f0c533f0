"""The local copy of a message is what the wire would deliver (payload.py Rule 5, shapes.py
Rule 4; specs/messages.md MSG-1, MSG-3, MSG-4)."""

from __future__ import annotations

import attrs
import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from zlink_trio._wire.payload import MessageTypes
from zlink_trio.errors import ErrorKind, ZLinkError


@attrs.frozen
class Flat:
    n: int
    x: float
    text: str
    raw: bytes
    flag: bool
    nothing: None


@attrs.define
class Loose:
    n: int
    text: str


@attrs.frozen
class Nested:
    items: tuple[int, ...]


types = MessageTypes()
types.register("copy.Flat", Flat)
types.register("copy.Loose", Loose)
types.register("copy.Nested", Nested)

texts = st.text(st.characters(exclude_categories=()), max_size=80)
flats = st.builds(
    Flat,
    n=st.integers(min_value=-(2**65), max_value=2**65),
    x=st.floats(allow_nan=False) | st.integers(min_value=-5, max_value=5),
    text=texts,
    raw=st.binary(max_size=80),
    flag=st.booleans(),
    nothing=st.none(),
)


def outcome(call: object) -> object:
    """The value, or the class and kind of what was raised."""
    try:
        return call()  # type: ignore[operator]  # a thunk
    except ZLinkError as error:
        return ("ZLinkError", error.kind)
    except (TypeError, ValueError) as error:
        return (type(error).__name__,)


@pytest.mark.spec("MSG-1", "MSG-3", "MSG-4")
@given(message=flats, limit=st.integers(min_value=40, max_value=400))
@example(message=Flat(2**64, 1.0, "a", b"", True, None), limit=400)  # out of range
@example(message=Flat(1, 1.0, "\ud800", b"", True, None), limit=400)  # a lone surrogate
@example(message=Flat(1, 1.0, "€" * 30, b"", True, None), limit=100)  # 3 bytes per character
def test_the_copy_of_a_flat_message_is_what_the_wire_delivers(message: Flat, limit: int) -> None:
    """For any immutable message and limit, ``copy`` gives what encoding within the limit and
    decoding gives (equal values of the same types, or the same error), whether it took the
    fast path (the instance itself) or not."""

    def through_the_wire() -> object:
        return types.decode(*types.encode_within(message, limit))

    expected = outcome(through_the_wire)
    got = outcome(lambda: types.copy(message, limit))
    assert expected == got
    if isinstance(got, Flat):
        assert [type(v) for v in attrs.astuple(expected)] == [type(v) for v in attrs.astuple(got)]


def test_an_immutable_message_passes_as_it_is_and_a_mutable_one_is_copied() -> None:
    """The fast path: a frozen flat message of ASCII text is not copied; non-ASCII text, a
    float field holding an int, a non-frozen class and a container field are."""
    flat = Flat(1, 2.0, "abc", b"r", True, None)
    assert types.copy(flat, 1024) is flat
    for copied in (
        Flat(1, 2.0, "ä", b"r", True, None),
        Flat(1, 2, "abc", b"r", True, None),
        Loose(1, "abc"),
        Nested((1, 2)),
    ):
        got = types.copy(copied, 1024)
        assert got == copied
        assert got is not copied


def test_over_the_limit_is_a_protocol_error_naming_type_size_and_limit() -> None:
    with pytest.raises(ZLinkError) as refused:
        types.copy(Loose(1, "a" * 200), 100)
    assert ErrorKind.PROTOCOL_ERROR == refused.value.kind
    assert "copy.Loose" in refused.value.message
    assert "100 bytes" in refused.value.message
