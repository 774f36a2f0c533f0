"""pyzmq driven by Trio: one owner task per socket, no threads, no busy polling (TRN-8..11).

- :func:`read_messages`: the owner loop of a receiving socket (our bound ROUTERs).
- :class:`OutboundLink`: one connecting DEALER towards one peer in one role, with its owner task
  that watches the socket when a sender has to wait for capacity.

Theory of operation. libzmq gives each socket one file descriptor, ``zmq.FD``, and it is edge
triggered: it becomes readable when the socket's internal command queue gets something, and *any*
call on the socket (send, recv, reading ``zmq.EVENTS``) may consume that edge while leaving
messages or capacity behind. Two rules follow, and every wait in this module keeps both:

Rule 1: before every wait on the FD, the waiter reads ``zmq.EVENTS`` and waits only if the event
it needs (POLLIN for a reader, POLLOUT for a writer) is absent. After that read, no state change
can happen without a new edge.
Rule 2: while a task waits on the FD, no other task calls the socket, because such a call could
consume the edge the waiter needs and leave it asleep for good. Trio also refuses two waiters on
one FD, so each socket has exactly one task that ever waits on it: its owner.

A receiving socket is only ever called by its owner, so Rule 2 holds by construction. An
outbound link is called by many senders, so it keeps Rule 2 with one gate: a sender calls the
socket itself (no task switch, no object per message) only while no sender is waiting and the
owner is not watching; otherwise it parks behind the senders already waiting, and the owner, the
only caller while anyone waits, reads EVENTS, waits on the FD, and on POLLOUT unparks every waiter
to try again. A DEALER has one pipe, so its POLLOUT means exactly "this peer's queue has room" and a
woken sender's retry succeeds; there is no spin. The gate is not a lock around pyzmq: it is the
ownership rule of the FD written down (seed 004 §1, "one owner").
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import Final, cast

import trio
import zmq

from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["OutboundLink", "read_messages"]

_Events = Callable[[int], int]
"""``getsockopt`` as used here: ``zmq.EVENTS`` is an int (pyzmq types it ``int | bytes``)."""

_NOBLOCK: Final = zmq.NOBLOCK
_POLLIN: Final = zmq.POLLIN
_POLLOUT: Final = zmq.POLLOUT
_EVENTS: Final = zmq.EVENTS


async def read_messages(
    socket: zmq.Socket[bytes],
    handle: Callable[[list[bytes]], Awaitable[None]],
    batch: int,
    *,
    one_by_one: bool = False,
) -> None:
    """Receive every multipart message of ``socket`` into ``handle``, one at a time, forever.

    The caller's task becomes the socket's owner. It lets other tasks run after ``batch``
    messages, or when the socket is empty. It returns when the FD is closed under it
    (``trio.lowlevel.notify_closing``); ``handle`` may wait, and then the socket is not read.

    How it finds the socket empty: by default it receives until EAGAIN, which costs one raised
    ``zmq.Again`` per wake-up and nothing per message, the cheap way through a burst. With
    ``one_by_one`` it reads EVENTS after each message instead, which costs a little per message
    but less than an ``Again`` per wake-up: the cheap way when messages come singly and each one
    wakes a waiter whose latency counts (replies), because this reader runs until it waits again
    before the woken task resumes.
    """
    fd = socket.fileno()
    receive = socket.recv_multipart
    events = cast(_Events, socket.getsockopt)
    try:
        while True:
            empty = False  # EVENTS said so just now, with no call on the socket since
            for _ in range(batch):
                try:
                    frames = receive(_NOBLOCK)
                except zmq.Again:
                    break
                await handle(frames)
                if one_by_one and not events(_EVENTS) & _POLLIN:  # Rule 1
                    empty = True
                    break
            else:
                await trio.lowlevel.checkpoint()  # a full batch: give other tasks their turn
                continue
            if empty or not events(_EVENTS) & _POLLIN:  # Rule 1
                await trio.lowlevel.wait_readable(fd)
    except trio.ClosedResourceError:
        return


class OutboundLink:
    """One DEALER connected to one peer endpoint; the only way frames go to that peer in its role.

    ``try_send`` queues a message now or says the caller must wait; ``wait_capacity`` waits until
    a retry may succeed. After :meth:`close` both raise the ``ZLinkError`` given to close, and
    nothing more is sent through the socket.
    """

    __slots__ = ("_closed", "_fd", "_owner_idle", "_scope", "_socket", "_waiters", "_watching")

    def __init__(self, socket: zmq.Socket[bytes]) -> None:
        self._socket = socket
        self._fd = socket.fileno()
        self._waiters = trio.lowlevel.ParkingLot()
        self._owner_idle = trio.lowlevel.ParkingLot()
        self._watching = False
        self._closed: tuple[ErrorKind, str] | None = None
        self._scope = trio.CancelScope()

    @property
    def waiting(self) -> int:
        """How many senders wait for capacity on this link now."""
        return len(self._waiters)

    def try_send(self, frames: Sequence[bytes]) -> bool:
        """Queue ``frames`` as one message if the socket takes it now; False: wait, then retry.

        Raises the close error once the link is closed.
        """
        if self._closed is not None:
            raise ZLinkError(*self._closed)
        if self._waiters or self._watching:  # Rule 2: the owner has the socket
            return False
        try:
            self._socket.send_multipart(frames, _NOBLOCK)
        except zmq.Again:
            return False
        return True

    async def wait_capacity(self) -> None:
        """Wait until a retry of :meth:`try_send` may succeed; raises the close error if closed.

        Cancellable: a caller that must not be cancelled shields this wait itself.
        """
        if self._closed is not None:
            raise ZLinkError(*self._closed)
        self._owner_idle.unpark_all()
        await self._waiters.park()
        if self._closed is not None:
            raise ZLinkError(*self._closed)

    async def run_owner(self) -> None:
        """The link's owner task: watches the FD while senders wait; ends when the link closes."""
        events = cast(_Events, self._socket.getsockopt)
        with self._scope:
            try:
                while True:
                    if not self._waiters:
                        await self._owner_idle.park()
                        continue
                    if events(_EVENTS) & _POLLOUT:  # Rule 1
                        self._waiters.unpark_all()
                        continue
                    self._watching = True
                    try:
                        await trio.lowlevel.wait_readable(self._fd)
                    finally:
                        self._watching = False
            except trio.ClosedResourceError:
                return

    def close(self, kind: ErrorKind, message: str, linger: float) -> None:
        """Close the socket (idempotent): waiting senders raise ``ZLinkError(kind, message)``.

        Messages already queued may still leave for ``linger`` seconds; then libzmq drops them.
        """
        if self._closed is not None:
            return
        self._closed = (kind, message)
        self._waiters.unpark_all()
        self._scope.cancel()
        trio.lowlevel.notify_closing(self._fd)  # the owner may be waiting on the FD
        self._socket.close(linger=int(linger * 1000))
