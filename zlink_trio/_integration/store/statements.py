"""Core statements compiled once for asyncpg (specs/store.md, STORE-10).

A statement is built with SQLAlchemy Core and compiled with the ``postgresql+asyncpg`` dialect,
which renders ``$1``-style placeholders with explicit casts. Only the SQL text and the order of
its parameters are kept: asyncpg prepares the text once per connection and sends the values.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import attrs
from sqlalchemy.dialects.postgresql.asyncpg import dialect as asyncpg_dialect
from sqlalchemy.sql import ClauseElement
from sqlalchemy.sql.compiler import SQLCompiler

_DIALECT = asyncpg_dialect()  # type: ignore[no-untyped-call]  # unannotated in SQLAlchemy


@attrs.frozen
class Statement:
    """SQL text with numbered placeholders and the parameter name behind each number."""

    sql: str
    names: tuple[str, ...]

    @classmethod
    def compile(cls, clause: ClauseElement) -> Statement:
        compiled = cast(SQLCompiler, clause.compile(dialect=_DIALECT))
        names = tuple(compiled.positiontup or ())
        return cls(compiled.string, names)

    def arguments(self, values: Mapping[str, Any]) -> tuple[Any, ...]:
        """The values in placeholder order; every parameter must be given."""
        return tuple(values[name] for name in self.names)
