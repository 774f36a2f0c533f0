"""What one admitted message travels in, and how its request is answered (specs/completion.md
CMP-9.3; specs/errors.md ERR-5.9).

Rule 1: a reply goes to whoever still waits. ``reply`` pops the caller's entry: if the caller
already stopped waiting (timeout, cancellation, shutdown) the reply is discarded (CMP-9.3).
Rule 2: a reply is checked against its handler's declared reply class; any other value ends the
call with ``INTERNAL_FAILURE`` naming the handler, never with a value of the wrong type.
Rule 3: a request whose deadline passed while it was queued is not handled. Its caller has
ended it with ``DEADLINE_EXCEEDED`` by then (locally through its own deadline, remotely through
its transport), so running the handler would only do work nobody waits for; ``expired`` tells the
turn to drop it (specs/completion.md CMP-9.11). The deadline already counts the time queued
here: a remote request's deadline is fixed when it arrives.
Rule 4: a request handler that raises ends its call ``INTERNAL_FAILURE`` naming the handler, its
owner, the exception's class and text (at most ``MAX_FAILURE_TEXT`` characters of it); the
exception object never travels, and the owner host logs its traceback once (ERR-5.9).
"""

from __future__ import annotations

import logging

import attrs

from zlink_trio._runtime.declarations.registry import Handler
from zlink_trio._runtime.declarations.values import MessageContext
from zlink_trio._runtime.engines.clock import Clock
from zlink_trio._runtime.engines.completion import CompletionDispatcher, Outcome
from zlink_trio._wire.ids import OperationId, ReplyRouteId
from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["Envelope", "admitted", "expired", "fail_one", "handler_failed", "reply"]

MAX_FAILURE_TEXT = 1024
"""Most characters of a raising handler's exception text that its caller's error carries."""

_log = logging.getLogger("zlink_trio.runtime.mailbox")


@attrs.frozen
class Envelope:
    """One admitted message and where its reply goes (``None`` for a one-way message)."""

    message: object
    handler: Handler
    context: MessageContext
    reply_route: ReplyRouteId | None
    operation_id: OperationId | None = None
    """A peer's request keeps its operation's id here, for a relay if its unit moves away
    (CMP-10.5); ``None`` for a send and for a request made on this host."""


def admitted(envelope: Envelope, target: str) -> str:
    """The trace line of ``envelope`` admitted into ``target``'s mailbox (node.py)."""
    name = type(envelope.message).__qualname__
    if envelope.reply_route is None:
        return f"admitted send {name} to {target}"
    return f"admitted request {name} (call {envelope.reply_route.value}) to {target}"


def reply(
    dispatcher: CompletionDispatcher,
    route: ReplyRouteId,
    handler: Handler,
    result: object,
    owner: str,
) -> None:
    """Complete the caller's request with ``result`` if it still waits (Rule 3)."""
    entry = dispatcher.pop(route)
    if entry is None:
        _log.debug("late reply of %s discarded", owner)
        return
    if isinstance(result, ZLinkError):
        outcome = Outcome(error=result)
    elif handler.reply_type is not None and isinstance(result, handler.reply_type):
        outcome = Outcome(value=result)
    else:
        outcome = Outcome(
            error=ZLinkError(
                ErrorKind.INTERNAL_FAILURE,
                f"request handler {handler.name} returned {type(result).__qualname__}, "
                "not its declared reply class",
            )
        )
    dispatcher.deliver(entry, outcome)


def handler_failed(handler: Handler, owner: str, error: Exception) -> ZLinkError:
    """The caller's error for a request handler that raised ``error`` (Rule 4): it names the
    handler, its Spot or Actor, the exception's class and text. The caller logs nothing; the
    owner logs the traceback where it caught it."""
    text = str(error)
    if len(text) > MAX_FAILURE_TEXT:
        text = text[:MAX_FAILURE_TEXT] + "..."
    detail = f"{type(error).__qualname__}: {text}" if text else type(error).__qualname__
    return ZLinkError(
        ErrorKind.INTERNAL_FAILURE, f"request handler {handler.name} of {owner} raised {detail}"
    )


def expired(envelope: Envelope, clock: Clock) -> ZLinkError | None:
    """The error of a request whose deadline has passed on ``clock`` (Rule 3), else ``None``;
    only a request with a deadline reads the clock (a one-way turn costs no clock read)."""
    deadline = envelope.context.deadline
    if envelope.reply_route is None or deadline is None or clock.now() < deadline:
        return None
    return ZLinkError(
        ErrorKind.DEADLINE_EXCEEDED,
        f"the request's deadline passed before request handler {envelope.handler.name} started",
    )


def fail_one(dispatcher: CompletionDispatcher, envelope: Envelope, error: ZLinkError) -> None:
    """End the request ``envelope`` carries with ``error``, if its caller still waits."""
    if envelope.reply_route is None:
        return
    entry = dispatcher.pop(envelope.reply_route)
    if entry is not None:
        dispatcher.deliver(entry, Outcome(error=error))
