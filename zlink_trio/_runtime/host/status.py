"""The host's status and its observers (specs/relocation.md RELOC-43; specs/shutdown.md
SHUT-3.12).

Rule 1: one status at a time, changed only by the host: PREPARING until ``open_host`` hands the
host out, SERVING, RELOCATING and RELOCATED while a relocation runs and after it, DRAINING from
the moment shutdown starts, STOPPED when it ended, ERROR when the run ended with an error.
Rule 2: observers never hold the host up. Each observer has a queue of its own with no bound
(a host changes status a handful of times in its life), filled without waiting; an observer that
does not read loses nothing and delays nothing. Its stream starts with the current status and
ends after STOPPED or ERROR.
"""

from __future__ import annotations

import math

import trio

from zlink_trio.options import HostStatus

__all__ = ["StatusBoard", "StatusStream"]

_FINAL = frozenset({HostStatus.STOPPED, HostStatus.ERROR})


class StatusStream:
    """``async for status in host.observe()``: the current status, then every change (Rule 2)."""

    def __init__(self, receive: trio.MemoryReceiveChannel[HostStatus]) -> None:
        self._receive = receive

    def __aiter__(self) -> StatusStream:
        return self

    async def __anext__(self) -> HostStatus:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            raise StopAsyncIteration from None

    async def aclose(self) -> None:
        """Stop observing; idempotent."""
        await self._receive.aclose()


class StatusBoard:
    """The host's status (Rule 1) and the queues of its observers (Rule 2)."""

    def __init__(self) -> None:
        self.status = HostStatus.PREPARING
        self._observers: list[trio.MemorySendChannel[HostStatus]] = []

    def set(self, status: HostStatus) -> None:
        """Change the status and tell every observer, without waiting for any."""
        if status is self.status or self.status in _FINAL:
            return
        self.status = status
        for observer in list(self._observers):
            try:
                observer.send_nowait(status)
            except (trio.BrokenResourceError, trio.ClosedResourceError):
                self._observers.remove(observer)
        if status in _FINAL:
            for observer in self._observers:
                observer.close()
            self._observers.clear()

    def observe(self) -> StatusStream:
        """A stream of the current status and every later change."""
        send, receive = trio.open_memory_channel[HostStatus](math.inf)
        send.send_nowait(self.status)
        if self.status in _FINAL:
            send.close()
        else:
            self._observers.append(send)
        return StatusStream(receive)
