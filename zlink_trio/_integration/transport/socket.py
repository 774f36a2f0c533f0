"""pyzmq driven by Trio: one owner task per socket, no threads, no busy polling (TRN-8..11).

- :func:`read_messages` / :func:`read_replies`: the owner loop of a receiving socket (our bound
  ROUTERs), for messages handled by awaiting, and for replies handled without waiting.
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
from zmq.backend import Socket as _BackendSocket

from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["OutboundLink", "read_messages", "read_replies"]

_Events = Callable[[int], int]
"""``getsockopt`` as used here: ``zmq.EVENTS`` is an int (pyzmq types it ``int | bytes``)."""
_Receive = Callable[[int, bool], zmq.Frame]
"""``recv`` as used here: one frame, not copied (``copy=False``), read with ``bytes``/``more``."""

_NOBLOCK: Final = zmq.NOBLOCK
_MORE_NOBLOCK: Final = zmq.SNDMORE | zmq.NOBLOCK
_POLLIN: Final = zmq.POLLIN
_POLLOUT: Final = zmq.POLLOUT
_EVENTS: Final = zmq.EVENTS
_USER_ID: Final = "User-Id"
_SUCCEEDED: Final = trio.lowlevel.Abort.SUCCEEDED
# pyzmq's own frame calls, without the Python layer of ``send_multipart`` / ``recv_multipart``
# around them (type checks, keyword handling, a Python call per frame): a message here is always
# a short list of ``bytes``, sent with the copying defaults those wrappers would use. Receiving
# takes each frame as a ``zmq.Frame`` and asks it whether more follow, instead of reading
# ``RCVMORE`` with ``getsockopt`` (which pyzmq 27 makes look the option up in a Python enum); its
# ``bytes`` is the same copy ``recv_multipart`` returns.
_send_frame = _BackendSocket.send


async def read_messages(
    socket: zmq.Socket[bytes],
    handle: Callable[[list[bytes], str | None], Awaitable[None]],
    batch: int,
    users: bool = False,
) -> None:
    """Receive every multipart message of ``socket`` into ``handle``, one at a time, forever.
    With ``users`` each message comes with the User-Id its connection was authenticated as
    (security.py Rule 3), else with ``None``.

    The caller's task becomes the socket's owner. It lets other tasks run after ``batch``
    messages, or when the socket is empty. It returns when the FD is closed under it
    (``trio.lowlevel.notify_closing``); ``handle`` may wait, and then the socket is not read.

    It finds the socket empty by receiving until EAGAIN, which costs one raised ``zmq.Again`` per
    wake-up and nothing per message: the cheap way through a burst.
    """
    fd = socket.fileno()
    receive = cast(_Receive, socket.recv)
    events = cast(_Events, socket.get)
    try:
        while True:
            for _ in range(batch):
                try:
                    frame = receive(_NOBLOCK, False)
                except zmq.Again:
                    break
                frames = [frame.bytes]
                user = cast(str, frame.get(_USER_ID)) if users else None
                # The rest of a multipart message is already here: libzmq delivers it whole.
                while frame.more:
                    frame = receive(_NOBLOCK, False)
                    frames.append(frame.bytes)
                await handle(frames, user)
            else:
                await trio.lowlevel.checkpoint()  # a full batch: give other tasks their turn
                continue
            if not events(_EVENTS) & _POLLIN:  # Rule 1
                await trio.lowlevel.wait_readable(fd)
    except trio.ClosedResourceError:
        return


async def read_replies(
    socket: zmq.Socket[bytes],
    handle: Callable[[list[bytes], str | None], None],
    batch: int,
    users: bool = False,
) -> None:
    """:func:`read_messages` for a ``handle`` that never waits (it is called, not awaited).

    It reads EVENTS after each message instead of receiving until EAGAIN, which costs a little
    per message but less than an ``Again`` per wake-up: the cheap way when messages come singly
    and each one wakes a waiter whose latency counts (replies), because this reader runs until it
    waits again before the woken task resumes.
    """
    fd = socket.fileno()
    receive = cast(_Receive, socket.recv)
    events = cast(_Events, socket.get)
    try:
        while True:
            empty = False  # EVENTS said so just now, with no call on the socket since
            for _ in range(batch):
                try:
                    frame = receive(_NOBLOCK, False)
                except zmq.Again:
                    break
                frames = [frame.bytes]
                user = cast(str, frame.get(_USER_ID)) if users else None
                while frame.more:
                    frame = receive(_NOBLOCK, False)
                    frames.append(frame.bytes)
                handle(frames, user)
                if not events(_EVENTS) & _POLLIN:  # Rule 1
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

    __slots__ = (
        "_closed",
        "_ended",
        "_fd",
        "_owner_idle",
        "_scope",
        "_socket",
        "_waiters",
        "_watching",
    )

    def __init__(self, socket: zmq.Socket[bytes]) -> None:
        self._socket = socket
        self._fd = socket.fileno()
        # The parked senders, in arrival order: a plain dict, so the gate test on every send is
        # a C-level truth test (a ParkingLot's is a Python call).
        self._waiters: dict[trio.lowlevel.Task, None] = {}
        self._owner_idle = trio.lowlevel.ParkingLot()
        self._watching = False
        self._closed: tuple[ErrorKind, str] | None = None
        self._ended: tuple[ErrorKind, str] | None = None
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
        socket = self._socket
        try:
            # A DEALER takes a multipart message whole or not at all: only its first frame can
            # meet the high-water mark, so an Again comes before anything was queued.
            for frame in frames[:-1]:
                _send_frame(socket, frame, _MORE_NOBLOCK)
            _send_frame(socket, frames[-1], _NOBLOCK)
        except zmq.Again:
            return False
        return True

    async def wait_capacity(self) -> None:
        """Wait until a retry of :meth:`try_send` may succeed; raises the close error if closed.

        Cancellable: a caller that must not be cancelled shields this wait itself.
        """
        if self._closed is not None:
            raise ZLinkError(*self._closed)
        if self._ended is not None:
            raise ZLinkError(*self._ended)
        self._owner_idle.unpark_all()
        task = trio.lowlevel.current_task()
        self._waiters[task] = None

        def abort(_raise_cancel: object) -> trio.lowlevel.Abort:
            del self._waiters[task]
            return _SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
        if self._closed is not None:
            raise ZLinkError(*self._closed)
        if self._ended is not None:
            raise ZLinkError(*self._ended)

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
                        self._unpark_all()
                        continue
                    self._watching = True
                    try:
                        await trio.lowlevel.wait_readable(self._fd)
                    finally:
                        self._watching = False
            except trio.ClosedResourceError:
                return

    def _unpark_all(self) -> None:
        """Wake every parked sender, oldest first (what ``ParkingLot.unpark_all`` did)."""
        waiters = list(self._waiters)
        self._waiters.clear()
        for task in waiters:
            trio.lowlevel.reschedule(task)

    def end_waits(self, kind: ErrorKind, message: str) -> None:
        """End every wait for capacity, now and later, with ``ZLinkError(kind, message)``; the
        socket stays open and a send that finds room still goes (its host shuts down, TRN-25)."""
        self._ended = (kind, message)
        self._unpark_all()

    def close(self, kind: ErrorKind, message: str, linger: float) -> None:
        """Close the socket (idempotent): waiting senders raise ``ZLinkError(kind, message)``.

        Messages already queued may still leave for ``linger`` seconds; then libzmq drops them.
        """
        if self._closed is not None:
            return
        self._closed = (kind, message)
        self._unpark_all()
        self._scope.cancel()
        trio.lowlevel.notify_closing(self._fd)  # the owner may be waiting on the FD
        self._socket.close(linger=int(linger * 1000))
