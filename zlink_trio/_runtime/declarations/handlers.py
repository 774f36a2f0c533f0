"""Handler decorators (specs/spots.md SPOT-62, SPOT-64; specs/registration.md REG-5.10;
specs/timers.md TIMER-12).

A decorator only marks the function; the Spot type's handler table is built and checked when
a host starts (REG-5.1). What the decorator can see at once it refuses at once, with
``TypeError``/``ValueError``, so the traceback points at the bad line (REG-5.10).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs

__all__ = [
    "HandlerKind",
    "does_nothing",
    "is_default",
    "HandlerMark",
    "mark_of",
    "packet_handler",
    "request_handler",
    "timer_handler",
    "timer_name_of",
]

_MARK = "__zlink_handler__"
# Kept apart from _MARK: a timer handler has no message type, and a method carrying both marks
# is a declaration error that freeze() reports (REG-5.11) rather than one mark hiding the other.
_TIMER_MARK = "__zlink_timer_handler__"

F = TypeVar("F", bound=Callable[..., Awaitable[Any]])

_DEFAULT_MARK = "__zlink_does_nothing__"


def does_nothing(function: F) -> F:
    """Mark a base class's lifecycle callback as the default that does nothing, so the runtime
    may skip the turn that would only run it (e.g. ``on_closing`` at shutdown)."""
    setattr(function, _DEFAULT_MARK, True)
    return function


def is_default(callback: object) -> bool:
    """Whether ``callback`` (looked up on the class) is a default marked by ``does_nothing``."""
    return getattr(callback, _DEFAULT_MARK, False) is True


class HandlerKind(enum.Enum):
    """What a handler answers."""

    PACKET = "packet"
    REQUEST = "request"


@attrs.frozen
class HandlerMark:
    """What a decorator recorded on a handler function."""

    kind: HandlerKind
    message_type: type
    reply_type: type | None
    """Declared with ``reply=``; ``None`` means: read it from the return annotation at start."""
    takes_context: bool
    """``(self, message, ctx)`` rather than ``(self, message)`` (SPOT-64)."""


def _check_type(value: object, what: str) -> type:
    if not isinstance(value, type):
        raise TypeError(f"{what} takes a class, not {value!r}")
    return value


def _mark(function: object, mark_kind: HandlerKind, message: type, reply: type | None) -> None:
    if not inspect.iscoroutinefunction(function):
        raise TypeError(f"a {mark_kind.value} handler must be an async def, not {function!r}")
    parameters = list(inspect.signature(function).parameters.values())
    positional = [
        p
        for p in parameters
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    if len(positional) not in (2, 3) or len(positional) != len(parameters):
        raise TypeError(
            f"{function.__qualname__} must take (self, message) or (self, message, ctx)"
        )
    setattr(function, _MARK, HandlerMark(mark_kind, message, reply, len(positional) == 3))


def packet_handler(message_type: type) -> Callable[[F], F]:
    """Declare the decorated ``async def (self, msg[, ctx]) -> None`` as the Spot's handler of
    one-way ``message_type`` messages."""
    message = _check_type(message_type, "packet_handler")

    def decorate(function: F) -> F:
        _mark(function, HandlerKind.PACKET, message, None)
        return function

    return decorate


def request_handler(request_type: type, *, reply: type | None = None) -> Callable[[F], F]:
    """Declare the decorated ``async def (self, req[, ctx]) -> Reply`` as the Spot's handler of
    ``request_type`` requests; the reply class is ``reply`` or the return annotation."""
    request = _check_type(request_type, "request_handler")
    reply_type = None if reply is None else _check_type(reply, "request_handler reply")

    def decorate(function: F) -> F:
        _mark(function, HandlerKind.REQUEST, request, reply_type)
        return function

    return decorate


def mark_of(value: object) -> HandlerMark | None:
    """The handler mark of ``value``, or ``None`` when it is not a handler."""
    mark = getattr(value, _MARK, None)
    return mark if isinstance(mark, HandlerMark) else None


def timer_handler(name: str) -> Callable[[F], F]:
    """Declare the decorated ``async def (self, tick: zl.TimerTick) -> None`` as the Spot's
    handler of the ticks of the timer ``name`` (started with ``self.context.timers.start``)."""
    if not isinstance(name, str):
        raise TypeError(f"timer_handler takes a timer name (str), not {name!r}")
    if not name:
        raise ValueError("timer_handler needs a non-empty timer name")

    def decorate(function: F) -> F:
        checked: object = function  # checked apart: the TypeGuard would narrow F away
        if not inspect.iscoroutinefunction(checked):
            raise TypeError(f"a timer handler must be an async def, not {function!r}")
        parameters = list(inspect.signature(function).parameters.values())
        if len(parameters) != 2 or any(
            p.kind not in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) or p.default is not p.empty
            for p in parameters
        ):
            raise TypeError(f"{function.__qualname__} must take (self, tick)")
        setattr(function, _TIMER_MARK, name)
        return function

    return decorate


def timer_name_of(value: object) -> str | None:
    """The timer name ``value`` handles, or ``None`` when it is not a timer handler."""
    name = getattr(value, _TIMER_MARK, None)
    return name if isinstance(name, str) else None
