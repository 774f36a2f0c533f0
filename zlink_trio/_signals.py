"""Ctrl-C for the one-shot commands (``zlink-trio store inspect``, ``store retire``): SIGINT or
SIGTERM cancels the command's work and it ends with one line, not a traceback.

Trio raises KeyboardInterrupt wherever the main thread is when SIGINT arrives, which for these
commands is usually inside the store bridge (asyncpg, trio-asyncio): the command then ended in a
traceback (found 2026-12-06). ``run_until_signal`` receives the two signals as messages instead
and cancels the work, so the store's calls end as a caller's cancellation ends them (the
connection is given back or terminated, specs/store.md STORE-43), and then raises
``Interrupted``. A host's own command (``zlink-trio node``) and the demo handle signals
themselves.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

from zlink_trio._exception_groups import sole_error

__all__ = ["Interrupted", "run_until_signal"]

T = TypeVar("T")


class Interrupted(Exception):
    """SIGINT or SIGTERM ended the command's work; the message names the signal."""


def run_until_signal(work: Callable[[], Awaitable[T]]) -> T:
    """``trio.run(work)``; ``Interrupted`` once SIGINT or SIGTERM has cancelled it, whatever
    the cancelled work raised meanwhile (a store call cut short, say)."""
    received: list[signal.Signals] = []

    async def run() -> T:
        results: list[T] = []
        if threading.current_thread() is not threading.main_thread():
            return await work()  # signals reach only the main thread: nothing to receive
        with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
            async with trio.open_nursery() as nursery:

                async def watch() -> None:
                    async for signum in signals:
                        received.append(signal.Signals(signum))
                        nursery.cancel_scope.cancel()
                        return

                nursery.start_soon(watch)
                results.append(await work())
                nursery.cancel_scope.cancel()
        if not results:  # only a signal cancels the nursery before the work returned
            raise Interrupted(f"interrupted ({received[0].name})")
        return results[0]

    try:
        return trio.run(run)
    except Interrupted:
        raise
    except BaseException as error:
        if received:
            raise Interrupted(f"interrupted ({received[0].name})") from None
        if isinstance(error, BaseExceptionGroup) and (lone := sole_error(error)) is not None:
            raise lone from None
        raise
