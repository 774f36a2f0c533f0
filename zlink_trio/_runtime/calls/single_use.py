"""What every call object shares: one use, options once, one terminal (specs/api.md API-8..API-13;
specs/completion.md CMP-2.1, CMP-2.3, CMP-2.6, CMP-2.7, CMP-4.8; specs/spots.md SPOT-77, SPOT-78).

Rule 1: options and terminals are checked before anything is submitted. Options chain and submit
nothing (API-10); a repeated option, an option after a terminal, or a second terminal raises
``ZLinkError(INVALID_OPERATION)`` and submits nothing (API-8, API-9).
Rule 2: ``submit()`` is a coroutine function, so an un-awaited call submits nothing (CMP-2.3).
Rule 3: ``submit_sync()`` is for application threads: from any thread running a Trio loop, and
from a CPU worker callback's thread, it raises ``INVALID_OPERATION`` at once (CMP-2.6);
elsewhere it runs the call on the host's loop through the host's Trio token and blocks only its
own thread (CMP-4.8).
Rule 4: ``yield_()`` exists only where seed 000 allows it (requests and creates, SPOT-77) and
only inside a Spot turn that has a gate; elsewhere it raises ``INVALID_OPERATION`` before
submitting or touching a gate (SPOT-78). It gives the gate back while it waits (CMP-2.7).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from zlink_trio._runtime.engines.gate import current_turn
from zlink_trio._runtime.engines.workers import in_cpu_worker
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["Carrying", "SingleUse", "declared_reply", "invalid"]

R = TypeVar("R")
T = TypeVar("T")


def invalid(message: str) -> ZLinkError:
    """``INVALID_OPERATION`` with ``message``: the error of a misused call object (Rule 1)."""
    return ZLinkError(ErrorKind.INVALID_OPERATION, message)


class SingleUse:
    """Options set at most once each, and one terminal (Rule 1)."""

    def __init__(self, node: LocalNode) -> None:
        self._node = node
        self._options: set[str] = set()
        self._submitted = False

    def _option(self, name: str) -> None:
        if self._submitted:
            raise invalid(f"{name}() after a terminal: a call object is single-use")
        if name in self._options:
            raise invalid(f"{name}() was already set on this call")
        self._options.add(name)

    def _terminal(self) -> None:
        if self._submitted:
            raise invalid("this call was already submitted: a call object takes one terminal")
        self._submitted = True

    def _blocking(self, run: Callable[[], Awaitable[T]]) -> T:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass  # not inside a Trio loop: an application thread, as submit_sync() requires
        else:
            raise invalid("submit_sync() cannot run inside a Trio task; use await submit()")
        if in_cpu_worker():
            raise invalid(
                "submit_sync() cannot run inside a CPU worker callback: return what it needs "
                "and make the call from the turn that awaits the worker"
            )
        self._terminal()
        try:
            return trio.from_thread.run(run, trio_token=self._node.token)
        except trio.RunFinishedError:
            raise ZLinkError(ErrorKind.SHUTTING_DOWN, "the host has shut down") from None

    async def _yielding(self, run: Callable[[], Awaitable[T]]) -> T:
        turn = current_turn()
        if turn is None or turn.gate is None:
            raise invalid(
                "yield_() is allowed only inside a turn of a SPOT_WIDE User Spot (its member "
                "Actors included) or of an Instance Spot"
            )
        self._terminal()
        return await turn.wait_outside(run)


def declared_reply(node: LocalNode, reply_type: type[R]) -> type[R]:
    """``reply_type`` if it is a declared message class; ``TypeError`` otherwise."""
    if not isinstance(reply_type, type):
        raise TypeError(f"reply_type takes a class, not {reply_type!r}")
    if not node.registry.is_message(reply_type):
        raise TypeError(f"reply_type {reply_type.__qualname__} is not declared with @app.message")
    return reply_type


class Carrying(SingleUse):
    """What every send and request shares: a declared message and its metadata."""

    def __init__(self, messaging: Messaging, message: object) -> None:
        node = messaging.node
        super().__init__(node)
        self._messaging = messaging
        if not node.registry.is_message(type(message)):
            raise TypeError(
                f"{type(message).__qualname__} is not declared with @app.message, so it cannot "
                "be sent"
            )
        self._message = message
        self._metadata: dict[str, str] = {}

    def _add_metadata(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("metadata takes a str key and a str value")
        self._option(f"metadata[{key!r}]")
        self._metadata[key] = value
