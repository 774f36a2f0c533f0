"""Worker offload: the scheduler behind CPU and I/O worker calls (specs/completion.md §3,
CMP-3.20..27; DEC-4).

Owns the host's CPU slots and the way a worker call ends: its result, ``DEADLINE_EXCEEDED`` at
its deadline, ``INTERNAL_FAILURE`` when the work raises, ``SHUTTING_DOWN`` once closed, and
``trio.Cancelled`` when its caller is cancelled. It does not own call objects, turns or
``yield_()``: the host's call layer awaits :meth:`WorkerScheduler.run_cpu` or
:meth:`WorkerScheduler.run_io` inside whatever turn (or released gate) the terminal chose.

A CPU callback's thread is marked while the callback runs (``in_cpu_worker``), because it is a
runtime execution context although no Trio task runs in it: ``submit_sync()`` is refused there
(seed 002 §4 F2-a; CMP-2.6), like in any Trio task.
"""

from __future__ import annotations

import functools
import inspect
import math
import threading
from collections.abc import Awaitable, Callable
from typing import TypeVar, TypeVarTuple

import trio

from zlink_trio._runtime.engines.clock import TRIO_CLOCK, Clock
from zlink_trio.errors import ErrorKind, ZLinkError

__all__ = ["MAX_CPU_SLOTS", "WorkerScheduler", "in_cpu_worker"]

MAX_CPU_SLOTS = 1024
"""Most CPU slots a host may have: each is an OS thread, and a CPU-bound pool of more than a
thousand threads on one host is a configuration mistake, not a workload."""

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_cpu_worker = threading.local()


def in_cpu_worker() -> bool:
    """Whether the calling thread is running a CPU worker callback now."""
    return bool(getattr(_cpu_worker, "running", False))


def _marked(fn: Callable[[], T]) -> T:
    """Run ``fn`` with its thread marked as a CPU worker callback (module docstring)."""
    _cpu_worker.running = True
    try:
        return fn()
    finally:
        _cpu_worker.running = False


# Theory of operation
# -------------------
# Rule 1 (CMP-3.21): a CPU slot is a token of one trio.CapacityLimiter, borrowed by
#   trio.to_thread.run_sync only for as long as the worker thread runs ``fn``. I/O work never
#   touches the limiter, so any number of I/O calls can wait while every CPU slot is busy.
# Rule 2 (CMP-3.22): callers that find every slot busy queue on the limiter, which Trio serves in
#   FIFO order; the deadline is a cancel scope of the host's application clock (clock.py) around
#   that wait, so it ends the wait with DEADLINE_EXCEEDED before ``fn`` has started.
# Rule 3 (CMP-3.23, CMP-3.25): a started thread cannot be stopped. With abandon_on_cancel=True the
#   caller stops waiting at its deadline or cancellation, while the thread runs on and keeps its
#   slot until ``fn`` returns; Trio then releases the slot and drops the outcome. The call has
#   already ended with exactly one result, so the late one can never become a second.
# Rule 4 (CMP-3.24): only an ``Exception`` from the work becomes INTERNAL_FAILURE. Cancellation
#   and other BaseExceptions pass through unchanged, so a deadline (our scope), the caller's
#   cancellation (an outer scope) and a failure are told apart by the path, never by a message.


def _internal_failure(error: Exception) -> ZLinkError:
    # The class name says what failed without exposing the traceback; the original stays
    # reachable as __cause__ for logs and debuggers.
    text = str(error)
    name = type(error).__name__
    return ZLinkError(ErrorKind.INTERNAL_FAILURE, f"{name}: {text}" if text else name)


class WorkerScheduler:
    """The host's worker scheduler: ``cpu_slots`` CPU threads at most, I/O work unbounded."""

    def __init__(self, cpu_slots: int, clock: Clock = TRIO_CLOCK) -> None:
        if type(cpu_slots) is not int:
            raise TypeError(f"cpu_slots takes an int, not {type(cpu_slots).__name__}")
        if not 1 <= cpu_slots <= MAX_CPU_SLOTS:
            raise ValueError(f"cpu_slots must be in 1..{MAX_CPU_SLOTS}, got {cpu_slots}")
        self._cpu_slots = cpu_slots
        self._limiter = trio.CapacityLimiter(cpu_slots)
        self._closed = False
        self._clock = clock
        """The application clock the calls' deadlines are on (VCLK-2)."""

    @property
    def cpu_slots(self) -> int:
        return self._cpu_slots

    @property
    def cpu_slots_in_use(self) -> int:
        """CPU slots held right now, including those of abandoned threads still running."""
        return self._limiter.borrowed_tokens

    @property
    def cpu_calls_waiting(self) -> int:
        """CPU calls queued for a slot."""
        return self._limiter.statistics().tasks_waiting

    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Refuse new calls with ``SHUTTING_DOWN``; idempotent.

        Calls already made (queued or running) go on: ending them is the host's shutdown order,
        by cancelling the scopes they run in.
        """
        self._closed = True

    async def run_cpu(
        self,
        fn: Callable[[*Ts], T],
        *args: *Ts,
        deadline: float | None,
    ) -> T:
        """Run the sync ``fn(*args)`` on a worker thread holding one CPU slot; return its result.

        ``deadline`` is an absolute time of the scheduler's clock (``None``: no deadline).
        Waiting for a slot or for ``fn`` past it raises ``ZLinkError(DEADLINE_EXCEEDED)``; a
        thread that already started then runs to completion, holding its slot, and its result is
        discarded. ``fn`` raising gives ``ZLinkError(INTERNAL_FAILURE)`` with the original as
        ``__cause__``. Cancelling the caller raises ``trio.Cancelled``, with the same fate for a
        running thread.
        """
        if inspect.iscoroutinefunction(fn):
            # A coroutine function would "run" in a thread by returning an un-awaited coroutine.
            raise TypeError(f"run_cpu takes a sync function; use run_io for {fn!r}")
        self._admit()
        with self._clock.scope_until(_until(deadline)) as scope:
            try:
                return await trio.to_thread.run_sync(
                    _marked,
                    functools.partial(fn, *args),
                    abandon_on_cancel=True,
                    limiter=self._limiter,
                )
            except Exception as error:
                raise _internal_failure(error) from error
        raise _deadline_exceeded(scope, "CPU")

    async def run_io(
        self,
        afn: Callable[[*Ts], Awaitable[T]],
        *args: *Ts,
        deadline: float | None,
    ) -> T:
        """Await ``afn(*args)`` as part of the calling Trio task, holding no CPU slot.

        Same endings as :meth:`run_cpu`; at the deadline ``afn`` itself is cancelled, so it
        cannot finish later.
        """
        self._admit()
        with self._clock.scope_until(_until(deadline)) as scope:
            # A deadline already past must not start the work at all.
            await trio.lowlevel.checkpoint_if_cancelled()
            try:
                return await afn(*args)
            except Exception as error:
                raise _internal_failure(error) from error
        raise _deadline_exceeded(scope, "I/O")

    def _admit(self) -> None:
        if self._closed:
            raise ZLinkError(ErrorKind.SHUTTING_DOWN, "the worker scheduler is closed")


def _until(deadline: float | None) -> float:
    # No deadline is an infinite one: the scope then ends only by the caller's cancellation.
    return math.inf if deadline is None else deadline


def _deadline_exceeded(scope: trio.CancelScope, what: str) -> ZLinkError:
    # Reached only when our own scope caught its cancellation: the deadline, nothing else.
    assert scope.cancelled_caught
    return ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"the {what} worker call passed its deadline")
