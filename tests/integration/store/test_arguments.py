"""Bad arguments are refused before anything is sent (specs/store.md, STORE-11)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from zlink_trio._integration.store import Batch, Delete, IfMissing, IfVersion, Put, Stores


@pytest.mark.spec("STORE-11")
@pytest.mark.parametrize(
    "make",
    [
        lambda: Put("", b"v"),
        lambda: Put("k" * 1025, b"v"),
        lambda: Put("\ud800", b"v"),
        lambda: Put("k", b"v" * (1024 * 1024 + 1)),
        lambda: Put("k", b"v", timedelta(0)),
        lambda: Put("k", b"v", timedelta(seconds=-1)),
        lambda: IfVersion("k", 0),
        lambda: Batch([IfMissing("k"), IfVersion("k", 1)], []),
        lambda: Batch([], [Put("k", b"1"), Delete("k")]),
        lambda: Batch([], [Delete(f"k{n}") for n in range(2049)]),
        lambda: Batch([], [Put(f"k{n}", b"v" * 1024 * 1024) for n in range(4)]),
    ],
)
def test_bad_requests_raise_value_error_when_made(make: object) -> None:
    """Out-of-bounds keys, values, retentions and duplicate keys fail at construction."""
    with pytest.raises(ValueError):
        make()  # type: ignore[operator]  # the parametrized lambdas are callables


@pytest.mark.spec("STORE-11")
@pytest.mark.parametrize(
    "make",
    [
        lambda: Put(b"k", b"v"),  # type: ignore[arg-type]  # the wrong type is the point
        lambda: Put("k", "v"),  # type: ignore[arg-type]  # the wrong type is the point
        lambda: Put("k", b"v", 5),  # type: ignore[arg-type]  # the wrong type is the point
        lambda: Batch([Put("k", b"v")], []),  # type: ignore[list-item]  # the point
    ],
)
def test_wrong_types_raise_type_error_when_made(make: object) -> None:
    """A bytes key, a str value or a number as retention is a TypeError."""
    with pytest.raises(TypeError):
        make()  # type: ignore[operator]  # the parametrized lambdas are callables


@pytest.mark.spec("STORE-11")
@pytest.mark.parametrize(("prefix", "limit"), [("p", 0), ("p", 1001), ("k" * 1025, 10)])
async def test_bad_scan_arguments_raise_value_error(
    stores: Stores, prefix: str, limit: int
) -> None:
    """A page limit outside 1..1000 or an oversized prefix is refused."""
    with pytest.raises(ValueError):
        await stores.location.scan(prefix, limit)


@pytest.mark.spec("STORE-11")
async def test_a_bad_key_on_read_raises_before_the_database(stores: Stores) -> None:
    """An empty key on read is a ValueError, not a store error."""
    with pytest.raises(ValueError):
        await stores.location.read("")
