"""The bounded FIFO a Spot or Actor serves and the host's shared job permits (specs/errors.md
ERR-5.10, ERR-8.1, ERR-8.2, ERR-9.4; specs/completion.md CMP-4.4, CMP-5.1; specs/registration.md
REG-8.1).

A generic engine: it queues any item and knows nothing of Spots, handlers or replies; what an
admitted message carries and how its request is answered is ``node/envelope.py``.

Rule 1: two bounds, two meanings. Every admitted message holds one permit of the host's shared
application job queue (``HostConfig.app_job_queue_size``) from admission until its turn has its
gate and starts, or until it is dropped; running short of permits is a wait the caller can
cancel, never an error (ERR-8.1). Each Spot's and Actor's own queue also has a structural limit
(``HostConfig.mailbox_limit``); a request that finds it full ends at once with
``CAPACITY_EXCEEDED`` because this runtime owns that queue (ERR-5.10), while a one-way send waits
for room, since a send that meets insufficient local capacity waits (CMP-5.1).
Rule 3: a wait ends when what it waits for is gone. ``JobPermits.close()`` (host shutdown) ends
every wait for a permit, and closing a mailbox ends every wait for room in it; each reports it
with ``False`` and the caller names the error: ``SHUTTING_DOWN`` when its host stopped
admitting, ``UNAVAILABLE`` when the target closed before admitting the message, never the
``NOT_FOUND`` of a target that never existed (CMP-7.9, CMP-7.10).
Rule 4: a burst costs one wake-up. The task that serves a mailbox takes what is queued already
without a checkpoint (``Burst``), ``TAKEN_PER_CHECKPOINT`` items in a row at most, and waits in
the channel (a checkpoint) only when it is empty or that many were taken: a sender that fills the
mailbox while the server runs is served with one switch per burst instead of one per message,
and no server keeps the loop longer than that many turns without a checkpoint of its own.
Rule 2: exactly one release per permit. Whoever takes an envelope out of a mailbox (the turn
that starts it, the drop at closing, the failure of what was left) releases its permit once; an
envelope that never entered a mailbox gives its permit back at once.
"""

from __future__ import annotations

from typing import Generic, TypeVar

import trio

from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["TAKEN_PER_CHECKPOINT", "Burst", "JobPermits", "Mailbox"]

T = TypeVar("T")

TAKEN_PER_CHECKPOINT = 32
"""Most items a ``Burst`` takes in a row without a checkpoint (Rule 4)."""


class JobPermits:
    """The host's shared application job queue: one permit per admitted message (Rule 1)."""

    def __init__(self, size: int) -> None:
        self._permits = trio.Semaphore(size)
        self._waits: set[trio.CancelScope] = set()
        self._closed = False

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

    async def acquire(self) -> bool:
        """Take a permit, waiting (cancellably) while none is free: ``True`` with the permit
        held, ``False`` without one once ``close()`` has ended the wait (Rule 3)."""
        try:
            self._permits.acquire_nowait()
        except trio.WouldBlock:
            pass
        else:
            return True
        if self._closed:
            return False
        with trio.CancelScope() as wait:
            self._waits.add(wait)
            try:
                await self._permits.acquire()
            finally:
                self._waits.discard(wait)
            # Acquired: a close() that came after it no longer matters to this wait.
            return True
        return False

    def close(self) -> None:
        """End every wait for a permit, now and later (Rule 3); ``try_acquire`` still works, so
        what is already admitted drains as before."""
        self._closed = True
        for wait in self._waits:
            wait.cancel()

    def release(self) -> None:
        """Give one permit back (Rule 2)."""
        self._permits.release()


class Mailbox(Generic[T]):
    """The FIFO of one Spot or Actor with its structural limit (Rule 1); ``owner`` names it in
    errors."""

    __slots__ = ("_receive", "_send")

    def __init__(self, limit: int) -> None:
        self._send, self._receive = trio.open_memory_channel[T](limit)

    @property
    def receive(self) -> trio.MemoryReceiveChannel[T]:
        """The serving side, read by the Spot's gate task or the Actor's lane."""
        return self._receive

    def offer(self, envelope: T, owner: str) -> None:
        """Admit ``envelope`` now, or raise ``CAPACITY_EXCEEDED`` when the queue is full and
        ``NOT_FOUND`` when it is sealed."""
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            raise ZLinkError(ErrorKind.CAPACITY_EXCEEDED, f"the queue of {owner} is full") from None
        except trio.ClosedResourceError:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} is closing") from None

    def try_put(self, envelope: T, owner: str) -> bool:
        """Admit ``envelope`` if there is room now (``False`` when full); ``NOT_FOUND`` when
        sealed. The hot path of a one-way send: no coroutine, no checkpoint."""
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            return False
        except trio.ClosedResourceError:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} is closing") from None
        return True

    async def put(self, envelope: T) -> bool:
        """Admit ``envelope``, waiting for room while the queue is full: ``True`` once admitted,
        ``False`` when the queue is sealed before there is room (Rule 3)."""
        try:
            self._send.send_nowait(envelope)
        except trio.WouldBlock:
            try:
                await self._send.send(envelope)
            except trio.ClosedResourceError:
                return False
        except trio.ClosedResourceError:
            return False
        return True

    def close(self) -> None:
        """Seal admission; what was admitted stays readable."""
        self._send.close()

    def take_all(self) -> list[T]:
        """Everything still queued, removed from the queue (the caller releases the permits)."""
        taken: list[T] = []
        while True:
            try:
                taken.append(self._receive.receive_nowait())
            except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
                return taken


class Burst(Generic[T]):
    """How the one task that serves a mailbox takes its items (Rule 4)."""

    __slots__ = ("_left", "_nowait", "_receive")

    def __init__(self, mailbox: Mailbox[T]) -> None:
        self._receive = mailbox.receive.receive
        self._nowait = mailbox.receive.receive_nowait
        self._left = TAKEN_PER_CHECKPOINT

    async def take(self) -> T:
        """The next item: at once while one is queued and the run of items taken without a
        checkpoint is short enough, else a wait in the channel; ``trio.EndOfChannel`` once the
        mailbox is closed and empty."""
        if self._left:
            try:
                item = self._nowait()
            except trio.WouldBlock:
                pass
            else:
                self._left -= 1
                return item
        self._left = TAKEN_PER_CHECKPOINT
        return await self._receive()

    def checkpointed(self) -> None:
        """The server passed a checkpoint of its own: the run starts over."""
        self._left = TAKEN_PER_CHECKPOINT
