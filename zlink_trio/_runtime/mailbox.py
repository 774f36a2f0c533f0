"""The queue of one Spot or Actor and the host's shared job permits (specs/errors.md ERR-5.10,
ERR-8.1, ERR-8.2, ERR-9.4; specs/completion.md CMP-4.4, CMP-5.1; specs/registration.md REG-8.1).

Rule 1: two bounds, two meanings. Every admitted message holds one permit of the host's shared
application job queue (``HostConfig.app_job_queue_size``) from admission until its turn has its
gate and starts, or until it is dropped; running short of permits is a wait the caller can
cancel, never an error (ERR-8.1). Each Spot's and Actor's own queue also has a structural limit
(``HostConfig.mailbox_limit``); a request that finds it full ends at once with
``CAPACITY_EXCEEDED`` because this runtime owns that queue (ERR-5.10), while a one-way send waits
for room, since a send that meets insufficient local capacity waits (CMP-5.1).
Rule 2: exactly one release per permit. Whoever takes an envelope out of a mailbox (the turn
that starts it, the drop at closing, the failure of what was left) releases its permit once; an
envelope that never entered a mailbox gives its permit back at once.
Rule 3: a reply goes to whoever still waits. ``reply`` pops the caller's entry: if the caller
already stopped waiting (timeout, cancellation, shutdown) the reply is discarded (CMP-9.3).
"""

from __future__ import annotations

import logging

import attrs
import trio

from zlink_trio._runtime.application import Handler
from zlink_trio._runtime.completion import CompletionDispatcher, Outcome
from zlink_trio._runtime.spot import MessageContext
from zlink_trio._wire.ids import ReplyRouteId
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import StableTypeName

__all__ = ["Envelope", "InstanceChoice", "JobPermits", "Mailbox", "fail_one", "reply"]

_log = logging.getLogger("zlink_trio.runtime.mailbox")


class InstanceChoice:
    """``instance_spot()`` (``type_name`` ``None``) or ``instance_spot(type_name)``."""

    __slots__ = ("type_name",)

    def __init__(self, type_name: StableTypeName | None) -> None:
        self.type_name = type_name


@attrs.frozen
class Envelope:
    """One admitted message and where its reply goes (``None`` for a one-way message)."""

    message: object
    handler: Handler
    context: MessageContext
    reply_route: ReplyRouteId | None


class JobPermits:
    """The host's shared application job queue: one permit per admitted message (Rule 1)."""

    def __init__(self, size: int) -> None:
        self._permits = trio.Semaphore(size)

    @property
    def available(self) -> int:
        """Permits free now."""
        return self._permits.value

    def try_acquire(self) -> bool:
        """Take a permit without a checkpoint if one is free (the hot path)."""
        try:
            self._permits.acquire_nowait()
        except trio.WouldBlock:
            return False
        return True

    async def acquire(self) -> None:
        """Take a permit, waiting (cancellably) while none is free."""
        try:
            self._permits.acquire_nowait()
        except trio.WouldBlock:
            await self._permits.acquire()

    def release(self) -> None:
        """Give one permit back (Rule 2)."""
        self._permits.release()


class Mailbox:
    """The FIFO of one Spot or Actor with its structural limit (Rule 1)."""

    __slots__ = ("_receive", "_send")

    def __init__(self, limit: int) -> None:
        self._send, self._receive = trio.open_memory_channel[Envelope](limit)

    @property
    def receive(self) -> trio.MemoryReceiveChannel[Envelope]:
        """The serving side, read by the Spot's gate task or the Actor's lane."""
        return self._receive

    def offer(self, envelope: Envelope, owner: str) -> None:
        """Admit ``envelope`` now, or raise ``CAPACITY_EXCEEDED`` when the queue is full and
        ``NOT_FOUND`` when it is sealed."""
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            raise ZLinkError(ErrorKind.CAPACITY_EXCEEDED, f"the queue of {owner} is full") from None
        except trio.ClosedResourceError:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} is closing") from None

    def try_put(self, envelope: Envelope, owner: str) -> bool:
        """Admit ``envelope`` if there is room now (``False`` when full); ``NOT_FOUND`` when
        sealed. The hot path of a one-way send: no coroutine, no checkpoint."""
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            return False
        except trio.ClosedResourceError:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} is closing") from None
        return True

    async def put(self, envelope: Envelope, owner: str) -> None:
        """Admit ``envelope``, waiting for room while the queue is full; ``NOT_FOUND`` when it
        is sealed before there is room."""
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            try:
                await self._send.send(envelope)
            except trio.ClosedResourceError:
                raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} closed") from None
        except trio.ClosedResourceError:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} is closing") from None

    def close(self) -> None:
        """Seal admission; what was admitted stays readable."""
        self._send.close()

    def take_all(self) -> list[Envelope]:
        """Everything still queued, removed from the queue (the caller releases the permits)."""
        taken: list[Envelope] = []
        while True:
            try:
                taken.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return taken


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


def fail_one(dispatcher: CompletionDispatcher, envelope: Envelope, error: ZLinkError) -> None:
    """End the request ``envelope`` carries with ``error``, if its caller still waits."""
    if envelope.reply_route is None:
        return
    entry = dispatcher.pop(envelope.reply_route)
    if entry is not None:
        dispatcher.deliver(entry, Outcome(error=error))
