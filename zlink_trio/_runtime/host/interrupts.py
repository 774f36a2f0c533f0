"""Ctrl-C: SIGINT becomes an orderly shutdown, then a plain KeyboardInterrupt (specs/shutdown.md
SHUT-8.1..SHUT-8.4).

Trio raises KeyboardInterrupt wherever the main thread happens to be when SIGINT arrives. Inside
the store bridge that is asyncpg's or trio-asyncio's own machinery, and the process crashed,
hung in epoll, or ended with TrioInternalError (issue 12, item 7). So while a host is open,
SIGINT is a message, not an exception:

Rule 1: one receiver per Trio run. The first host of a run (in the main thread) installs a SIGINT
handler that hands the signal to the Trio loop; every open host of the run registers a
callback, and each SIGINT calls all of them.
Rule 2: the host's callback starts its immediate shutdown (SHUT-4.5) and, once it has finished,
cancels the host's block; ``open_host`` then raises a plain KeyboardInterrupt (``tree.py``). A
SIGINT during start-up cancels the start-up the same way.
Rule 3: SIGINTs while a host already shuts down are logged and otherwise ignored: the shutdown
is bounded by its own timeouts and must not be torn apart half-way.
Rule 4: when the last host of the run leaves, the previous handler (Trio's) is put back at once
and SIGINT means KeyboardInterrupt again; a SIGINT that came before but is handled after is
raised again for Trio, so it is not lost.
Outside the main thread no receiver is installed: signals reach only the main thread.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Awaitable, Callable

import trio

__all__ = ["Interruption", "watch_interrupts"]

_log = logging.getLogger("zlink_trio.host")


class _Receiver:
    """The run's SIGINT handler and the hosts it tells (Rule 1). The handler only schedules
    ``_dispatch`` on the Trio loop (``run_sync_soon`` is safe in a signal handler; Trio's own
    signal receivers do the same), so nothing runs inside whatever the signal interrupted."""

    def __init__(self) -> None:
        self.hosts: dict[object, Callable[[], None]] = {}
        self.closed = False
        token = trio.lowlevel.current_trio_token()

        def handler(_signum: int, _frame: object) -> None:
            token.run_sync_soon(self._dispatch, idempotent=True)

        self._previous = signal.signal(signal.SIGINT, handler)

    def _dispatch(self) -> None:
        if not self.hosts:
            # The last host left after the signal came: Trio's handler is back (Rule 4).
            signal.raise_signal(signal.SIGINT)
            return
        for tell in list(self.hosts.values()):
            tell()

    def leave(self, key: object) -> None:
        del self.hosts[key]
        if not self.hosts and not self.closed:
            self.closed = True  # at once: from now on SIGINT is Trio's again (Rule 4)
            signal.signal(signal.SIGINT, self._previous)


_RECEIVER: trio.lowlevel.RunVar[_Receiver] = trio.lowlevel.RunVar("zlink_trio_sigint")


def watch_interrupts(tell: Callable[[], None]) -> Callable[[], None]:
    """Call ``tell`` at every SIGINT while this host is open; returns the function that ends the
    watch (call it when the host has closed). Does nothing outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        return lambda: None
    try:
        receiver: _Receiver | None = _RECEIVER.get()
    except LookupError:
        receiver = None
    if receiver is None or receiver.closed:
        receiver = _Receiver()
        _RECEIVER.set(receiver)
    key = object()
    receiver.hosts[key] = tell
    return lambda: receiver.leave(key)


class Interruption:
    """One host's answer to SIGINT (Rule 2, Rule 3): ``interrupted`` once a SIGINT arrived."""

    def __init__(self, nursery: trio.Nursery) -> None:
        self._nursery = nursery
        self.interrupted = False
        self.shutdown: Callable[[], Awaitable[None]] | None = None
        """The host's ``shutdown``, once the host is built; before that, SIGINT cancels the
        start-up."""

    def __call__(self) -> None:
        if self.interrupted:
            _log.warning("interrupted again while shutting down; the shutdown goes on")
            return
        self.interrupted = True
        _log.warning("interrupted (SIGINT): shutting down")
        self._nursery.start_soon(self._shut_down)

    async def _shut_down(self) -> None:
        shutdown = self.shutdown
        if shutdown is not None:
            await shutdown()
        self._nursery.cancel_scope.cancel()
