"""The bounded FIFO a Spot or Actor serves and the host's shared job permits (specs/errors.md
ERR-5.10, ERR-8.1, ERR-8.2, ERR-9.4; specs/completion.md CMP-4.4, CMP-5.1; specs/registration.md
REG-8.1).

A generic engine: it queues any item and knows nothing of Spots, handlers or replies; what an
admitted message carries and how its request is answered is ``node/envelope.py``.

Rule 1: two bounds, two meanings. Every admitted message holds one permit of the host's shared
application job queue (``HostConfig.app_job_queue_size``) from admission until its turn has its
gate and starts, or until it is dropped; running short of permits is a wait, never an error:
a request's caller can cancel it (ERR-8.1), a one-way send's cannot, since its caller shields it
(DEC-1, CMP-7.5; routing/local.py Rule 3), so Rule 3 is what ends that wait. Each Spot's and
Actor's own queue also has a structural limit (``HostConfig.mailbox_limit``); a request that
finds it full ends at once with ``CAPACITY_EXCEEDED`` because this runtime owns that queue
(ERR-5.10), while a one-way send waits for room, since a send that meets insufficient local
capacity waits (CMP-5.1), unless the sending turn is itself what the queue waits for: then it
is admitted past the limit (``put_over``, DEC-32).
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
Rule 5: an idle mailbox has no task. The queue is a deque of its own (made at the first item,
dropped when it empties), not a memory channel, and the one server parks in ``take`` on its
own task record: an arrival reschedules a parked server, and with no server parked it calls the
owner's ``on_arrival`` (a Spot starts a gate task then). A parked server is retired after one
whole period of ``IdleServers`` with nothing to take (``take`` raises ``Retired``), so a
mailbox that has been quiet that long is held by no task at all, while a server that is fed
again within the period costs no task start per message. Senders waiting for room wait in
arrival order and hand their item over in that order as room comes (FIFO, as the memory channel
did).
Rule 2: exactly one release per permit. Whoever takes an envelope out of a mailbox (the turn
that starts it, the drop at closing, the failure of what was left) releases its permit once; an
envelope that never entered a mailbox gives its permit back at once.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

import trio
from outcome import Value
from trio.lowlevel import Abort, Task, current_task, reschedule, wait_task_rescheduled

from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = [
    "IDLE_PERIOD",
    "TAKEN_PER_CHECKPOINT",
    "Burst",
    "IdleServers",
    "JobPermits",
    "Mailbox",
    "Retired",
]

T = TypeVar("T")

TAKEN_PER_CHECKPOINT = 32
"""Most items a ``Burst`` takes in a row without a checkpoint (Rule 4)."""

IDLE_PERIOD = 1.0
"""Seconds of Trio time per sweep of ``IdleServers``: a server parked through one whole sweep
period is retired (Rule 5)."""

_RETIRE: Any = object()


class Retired(Exception):
    """``Mailbox.take`` of a server parked through a whole idle period (Rule 5)."""


class JobPermits:
    """The host's shared application job queue: one permit per admitted message (Rule 1)."""

    def __init__(self, size: int) -> None:
        self._permits = trio.Semaphore(size)
        self._waits: set[trio.CancelScope] = set()
        self._closed = False
        self._over = 0
        """Permits taken past the size (``acquire_over``), given back first."""

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
        """Take a permit, waiting while none is free (cancellable, unless the caller shields
        it): ``True`` with the permit held, ``False`` without one once ``close()`` has ended the
        wait (Rule 3)."""
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

    def acquire_over(self) -> None:
        """Take a permit now, past the size if none is free: only for a sender that is itself
        what the permits it waits for wait on (routing/local.py Rule 4, DEC-32)."""
        if not self.try_acquire():
            self._over += 1

    def close(self) -> None:
        """End every wait for a permit, now and later (Rule 3); ``try_acquire`` still works, so
        what is already admitted drains as before."""
        self._closed = True
        for wait in self._waits:
            wait.cancel()

    def release(self) -> None:
        """Give one permit back (Rule 2)."""
        if self._over:
            self._over -= 1
            return
        self._permits.release()


class IdleServers:
    """The servers parked in their mailboxes' ``take``, retired after a whole idle period
    (Rule 5). One per host; its sweeper task runs only while a server is parked."""

    __slots__ = ("_parked", "_period", "_spawn", "_sweep", "_sweeping")

    def __init__(
        self, spawn: Callable[[Callable[[], Awaitable[None]]], bool], period: float = IDLE_PERIOD
    ) -> None:
        self._spawn = spawn
        """Starts the sweeper task; ``False`` when it cannot (the host is ending)."""
        self._period = period
        self._parked: dict[Mailbox[Any], int] = {}
        self._sweep = 0
        self._sweeping = False

    def _park(self, mailbox: Mailbox[Any]) -> None:
        self._parked[mailbox] = self._sweep
        if not self._sweeping:
            self._sweeping = self._spawn(self._sweeper)

    def _unpark(self, mailbox: Mailbox[Any]) -> None:
        self._parked.pop(mailbox, None)

    def sweep(self) -> None:
        """End a period: retire the servers parked since before the previous sweep, idle for
        at least one whole period (the sweeper's step; a test's controlled clock)."""
        self._sweep += 1
        stale = [m for m, parked in self._parked.items() if parked < self._sweep - 1]
        for mailbox in stale:
            del self._parked[mailbox]
            mailbox._wake(_RETIRE)

    async def _sweeper(self) -> None:
        try:
            while self._parked:
                await trio.sleep(self._period)
                self.sweep()
        finally:
            self._sweeping = False


class Mailbox(Generic[T]):
    """The FIFO of one Spot or Actor with its structural limit (Rule 1) and no task of its own
    (Rule 5); ``on_arrival`` is told of an item that no parked server will take."""

    __slots__ = ("_closed", "_idle", "_items", "_limit", "_on_arrival", "_senders", "_server")

    def __init__(
        self,
        limit: int,
        on_arrival: Callable[[], None] | None = None,
        idle: IdleServers | None = None,
    ) -> None:
        self._items: deque[T] | None = None
        self._limit = limit
        self._closed = False
        self._senders: dict[Task, T] | None = None
        """Senders waiting for room, in arrival order, each with its item."""
        self._server: Task | None = None
        """The server parked in ``take``."""
        self._on_arrival = on_arrival
        self._idle = idle

    def __len__(self) -> int:
        return len(self._items) if self._items else 0

    @property
    def server_waiting(self) -> bool:
        """Whether the server is parked in ``take`` (the queue is empty)."""
        return self._server is not None

    def _append(self, item: T) -> None:
        items = self._items
        if items is None:
            items = self._items = deque()
        items.append(item)
        if self._server is not None:
            self._wake(None)
        elif self._on_arrival is not None:
            self._on_arrival()

    def _wake(self, value: object) -> None:
        server = self._server
        if server is not None:
            self._server = None
            if self._idle is not None and value is not _RETIRE:
                self._idle._unpark(self)
            reschedule(server, Value(value))

    def _room(self) -> bool:
        return not self._senders and len(self) < self._limit

    def offer(self, envelope: T, owner: str) -> None:
        """Admit ``envelope`` now, or raise ``CAPACITY_EXCEEDED`` when the queue is full and
        ``NOT_FOUND`` when it is sealed."""
        if self._closed:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} is closing")
        if not self._room():
            raise ZLinkError(ErrorKind.CAPACITY_EXCEEDED, f"the queue of {owner} is full")
        self._append(envelope)

    def try_put(self, envelope: T, owner: str) -> bool:
        """Admit ``envelope`` if there is room now (``False`` when full); ``NOT_FOUND`` when
        sealed. The hot path of a one-way send: no coroutine, no checkpoint."""
        if self._closed:
            raise ZLinkError(ErrorKind.NOT_FOUND, f"{owner} is closing")
        if not self._room():
            return False
        self._append(envelope)
        return True

    async def put(self, envelope: T) -> bool:
        """Admit ``envelope``, waiting for room while the queue is full: ``True`` once admitted,
        ``False`` when the queue is sealed before there is room (Rule 3). Cancellable; a one-way
        send's caller shields it (routing/local.py Rule 3), so only ``close()`` or room ends it."""
        if self._closed:
            return False
        if self._room():
            self._append(envelope)
            return True
        task = current_task()
        senders = self._senders
        if senders is None:
            senders = self._senders = {}
        senders[task] = envelope

        def abort(_: object) -> Abort:
            del senders[task]
            return Abort.SUCCEEDED

        admitted: bool = await wait_task_rescheduled(abort)
        return admitted

    def put_over(self, envelope: T) -> bool:
        """Admit ``envelope`` now, past the limit if need be: ``False`` when the queue is
        sealed. Only for a sender that is the queue's own server (routing/local.py Rule 4),
        whose wait for room would never end."""
        if self._closed:
            return False
        self._append(envelope)
        return True

    def close(self) -> None:
        """Seal admission; what was admitted stays readable, waiting senders get ``False``."""
        self._closed = True
        senders, self._senders = self._senders, None
        for task in senders or ():
            reschedule(task, Value(False))
        self._wake(None)

    def take_nowait(self) -> T:
        """The next item; ``trio.WouldBlock`` when none is queued (Rule 5)."""
        items = self._items
        if not items:
            raise trio.WouldBlock
        item = items.popleft()
        senders = self._senders
        if senders:  # room for the first waiting sender, in arrival order
            task = next(iter(senders))
            items.append(senders.pop(task))
            reschedule(task, Value(True))
        elif not items:
            self._items = None
        return item

    async def take(self) -> T:
        """The next item after a checkpoint, parking while none is queued: the one server's wait
        (Rule 5). ``trio.EndOfChannel`` once closed and empty, ``Retired`` after a whole idle
        period."""
        if self._items:
            await trio.lowlevel.checkpoint()
        while True:
            if self._items:
                return self.take_nowait()
            if self._closed:
                raise trio.EndOfChannel
            woken = await self._park()
            if woken is _RETIRE and not self._items and not self._closed:
                raise Retired

    async def _park(self) -> object:
        self._server = task = current_task()
        if self._idle is not None:
            self._idle._park(self)

        def abort(_: object) -> Abort:
            if self._server is task:
                self._server = None
                if self._idle is not None:
                    self._idle._unpark(self)
            return Abort.SUCCEEDED

        return await wait_task_rescheduled(abort)

    def take_all(self) -> list[T]:
        """Everything still queued, removed from the queue, waiting senders' items included (the
        caller releases the permits)."""
        taken: list[T] = []
        while self._items:
            taken.append(self.take_nowait())
        return taken


class Burst(Generic[T]):
    """How the one task that serves a mailbox takes its items (Rule 4)."""

    __slots__ = ("_left", "_mailbox")

    def __init__(self, mailbox: Mailbox[T]) -> None:
        self._mailbox = mailbox
        self._left = TAKEN_PER_CHECKPOINT

    async def take(self) -> T:
        """The next item: at once while one is queued and the run of items taken without a
        checkpoint is short enough, else ``Mailbox.take`` (a checkpoint); ``trio.EndOfChannel``
        once the mailbox is closed and empty, ``Retired`` after a whole idle period."""
        if self._left and self._mailbox._items:
            self._left -= 1
            return self._mailbox.take_nowait()
        self._left = TAKEN_PER_CHECKPOINT
        return await self._mailbox.take()

    def checkpointed(self) -> None:
        """The server passed a checkpoint of its own: the run starts over."""
        self._left = TAKEN_PER_CHECKPOINT
