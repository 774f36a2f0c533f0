"""Application versions: the text a host is configured with and its node record carries, and
how two of them compare (specs/relocation.md RELOC-32; specs/mesh.md MESH-24).

A version is dotted non-negative integers in ASCII digits without leading zeros ("3",
"2.10.1"), at most ``MAX_VERSION_LENGTH`` characters. Versions compare component by component
as numbers, a missing component counting as 0, so "2" == "2.0" and "2.10" > "2.9". Kept in
``_wire`` because both the configuration (``declarations``) and the node record (``ownership``)
check it, and neither may import the other.
"""

from __future__ import annotations

import re

__all__ = ["MAX_VERSION_LENGTH", "parse_application_version"]

MAX_VERSION_LENGTH = 64
"""Longest version text: it is stored in every node record and shown by ``store inspect``."""

_VERSION = re.compile(r"(?:0|[1-9][0-9]*)(?:\.(?:0|[1-9][0-9]*))*")


def parse_application_version(value: object) -> tuple[int, ...]:
    """The numbers of the version ``value`` with trailing zeros dropped, so that equal versions
    give equal tuples and tuples order as versions do ("2.0" -> ``(2,)``, "0" -> ``()``).
    ``TypeError`` for anything but a ``str``, ``ValueError`` for a malformed one."""
    if not isinstance(value, str):
        raise TypeError(f"an application version is a str, not {type(value).__name__}")
    if len(value) > MAX_VERSION_LENGTH or not _VERSION.fullmatch(value):
        raise ValueError(
            "an application version is dotted non-negative integers without leading zeros, "
            f'like "3" or "2.10.1", at most {MAX_VERSION_LENGTH} characters; got {value!r}'
        )
    numbers = [int(part) for part in value.split(".")]
    while numbers and numbers[-1] == 0:
        numbers.pop()
    return tuple(numbers)
