"""The public error model (specs/errors.md, ERR-*).

Three ways a failure reaches an application, and nothing else:

- ``ZLinkError(kind, message)``: a framework operation (send, request, lifecycle) failed; the
  ``kind`` is one of the thirteen :class:`ErrorKind` values and is what code branches on.
- ``ConfigurationError``: an application declaration or host configuration is contradictory;
  raised while a host starts, before anything binds a socket or touches the store.
- ``ValueError`` / ``TypeError``: a bad argument at the call site, raised before anything is
  submitted (seed 003 §3).

No error carries a hint about retrying: whether an operation may run again depends on whether it
already ran and whether it is idempotent, which only the application knows (seed 003 §7).
"""

from __future__ import annotations

import enum
from collections.abc import Iterable

__all__ = ["ConfigurationError", "ErrorKind", "ZLinkError"]


class ErrorKind(enum.IntEnum):
    """What kind of failure ended a framework operation; the numbers are shared by every ZLink
    language and travel on the wire (seed 003 §2)."""

    NOT_FOUND = 0
    """The Actor, Spot, handler, route or target does not exist."""
    ALREADY_EXISTS = 1
    """The same identity or registration already exists."""
    TYPE_MISMATCH = 2
    """The stable type differs from the requested application type."""
    NOT_CONFIGURED = 3
    """A required role, handler or store is not registered."""
    REJECTED = 4
    """A framework admission, filter or policy without a typed result rejected the operation."""
    UNAVAILABLE = 5
    """The target, route, store or worker cannot be used now (a queue on another node is full)."""
    CAPACITY_EXCEEDED = 6
    """A bounded resource this runtime owns (a queue, a reply slot, placement) has no room."""
    DEADLINE_EXCEEDED = 7
    """The operation did not complete within its deadline."""
    SHUTTING_DOWN = 8
    """The runtime no longer accepts new operations."""
    PROTOCOL_ERROR = 9
    """The wire, payload or reply contract cannot be processed."""
    INVALID_OPERATION = 10
    """The operation cannot run in the current object, session or runtime state."""
    DATA_LOST = 11
    """A published relocation payload is missing or failed validation."""
    INTERNAL_FAILURE = 12
    """A framework failure that none of the other kinds describes."""


class ZLinkError(Exception):
    """A framework operation failed with ``kind``; ``message`` is for people, never for code.

    Branch on ``kind`` (or on the exception type), not on the message text (CMP-14.1).
    """

    __slots__ = ("kind", "message")

    kind: ErrorKind
    message: str

    def __init__(self, kind: ErrorKind, message: str) -> None:
        if not isinstance(kind, ErrorKind):
            raise TypeError(f"kind must be an ErrorKind, not {type(kind).__name__}")
        if not isinstance(message, str):
            raise TypeError(f"message must be a str, not {type(message).__name__}")
        super().__init__(kind, message)
        self.kind = kind
        self.message = message

    def __str__(self) -> str:
        return f"{self.kind.name}: {self.message}"

    def __repr__(self) -> str:
        return f"ZLinkError(ErrorKind.{self.kind.name}, {self.message!r})"

    def __reduce__(self) -> tuple[type[ZLinkError], tuple[ErrorKind, str]]:
        return (type(self), (self.kind, self.message))


class ConfigurationError(Exception):
    """An application declaration or host configuration cannot be started.

    Raised by host start-up before any socket binds or the store is touched, so nothing was
    started. ``problems`` lists every contradiction found, one sentence each.
    """

    __slots__ = ("problems",)

    problems: tuple[str, ...]

    def __init__(self, problems: str | Iterable[str]) -> None:
        found = (problems,) if isinstance(problems, str) else tuple(problems)
        if not found or not all(isinstance(p, str) and p for p in found):
            raise TypeError("ConfigurationError needs one or more non-empty problem strings")
        super().__init__(*found)
        self.problems = found

    def __str__(self) -> str:
        if len(self.problems) == 1:
            return self.problems[0]
        return f"{len(self.problems)} problems: " + "; ".join(self.problems)

    def __reduce__(self) -> tuple[type[ConfigurationError], tuple[tuple[str, ...]]]:
        return (type(self), (self.problems,))
