"""The execution gate of a SPOT_WIDE User Spot or an Instance Spot (specs/spots.md SPOT-67,
SPOT-68, SPOT-70, SPOT-74, SPOT-78; specs/completion.md CMP-2.4, CMP-2.7).

Rule 1: one turn at a time. A turn (handler, lifecycle callback) runs only while it holds the
gate, and keeps it across every ordinary await (SPOT-68).
Rule 2: first come, first served. The gate works as a ``trio.Semaphore(1)``: a release hands it
straight to the first waiter, in the order they arrived (its parking lot is made only while a
turn waits, so an idle gate is two fields); the Spot's gate task takes the gate for messages in
mailbox order, so turns start in the order their messages were admitted (FIFO per sender and
overall).
Rule 3: only ``yield_()`` gives the gate back inside a turn, and it takes the same gate again
before the code after it runs (SPOT-70). The gate has no owner task: a message turn runs inside
the Spot's gate task, and a turn that yields goes on holding the gate in that task while another
task takes over serving the mailbox (activation.py Rule 2). A turn may carry an ``on_yield`` hook
for that hand-over; it runs once, before the gate is given back.
Rule 4: the running turn is known through a context variable, so a call can tell whether it is
made inside a Spot turn (``yield_``) or inside any Trio task at all (``submit_sync``). A child
task inherits the variable but not the gate, so a turn counts only in the task that runs it.
Rule 5: a turn without a shared gate cannot yield. Turns of an Entry Spot's Actors and of a
PER_ACTOR User Spot (its Actors, its own lane, its timers) run on lanes of their own: such a turn
carries ``gate=None`` and ``yield_()`` refuses it (SPOT-78). An Actor turn also carries its
Actor (``actor``) and collects the joins its handler deferred (``joins``), which run only once
the turn has ended normally (actors/activation.py Rule 3).
"""

from __future__ import annotations

import contextvars
from collections.abc import Awaitable, Callable
from typing import TypeVar

import trio

__all__ = ["ExecutionGate", "Turn", "current_turn"]

T = TypeVar("T")


class ExecutionGate:
    """One turn at a time, in arrival order (Rule 2)."""

    __slots__ = ("_held", "_lot")

    def __init__(self) -> None:
        self._held = False
        self._lot: trio.lowlevel.ParkingLot | None = None
        """The turns waiting for the gate, in arrival order; made only when one waits."""

    @property
    def held(self) -> bool:
        """Whether a turn holds the gate now."""
        return self._held

    async def acquire(self) -> None:
        """Wait for the gate, behind everyone who asked earlier."""
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._held:
            lot = self._lot
            if lot is None:
                lot = self._lot = trio.lowlevel.ParkingLot()
            await lot.park()  # ``release`` hands the gate over: it stays held
        else:
            self._held = True
            await trio.lowlevel.cancel_shielded_checkpoint()

    def try_acquire(self) -> bool:
        """Take the gate without a checkpoint if it is free; ``False`` if it is held. A free
        gate never has waiters, so this never jumps the queue (Rule 2)."""
        if self._held:
            return False
        self._held = True
        return True

    def release(self) -> None:
        """Give the gate to the next waiter, or free it."""
        if not self._held:
            raise RuntimeError("release of a gate nobody holds")
        lot = self._lot
        if lot:
            lot.unpark()
        else:
            self._held = False
            self._lot = None  # an idle gate keeps no parking lot

    async def wait_outside(self, work: Callable[[], Awaitable[T]]) -> T:
        """Run ``work`` with the gate given back, then take it again (Rule 3), even when the work
        fails or the turn is cancelled, so the turn still ends holding its gate."""
        self.release()
        try:
            return await work()
        finally:
            with trio.CancelScope(shield=True):
                await self.acquire()


class Turn:
    """The turn a task is running: which gate it holds, the task that holds it, and what must
    happen before the turn first gives its gate back (Rule 3)."""

    __slots__ = ("actor", "boundary", "gate", "joins", "on_yield", "spot", "task")

    def __init__(
        self,
        gate: ExecutionGate | None,
        on_yield: Callable[[], None] | None = None,
        actor: object | None = None,
        spot: object | None = None,
    ) -> None:
        self.gate = gate
        self.task = trio.lowlevel.current_task()
        self.on_yield = on_yield
        self.actor = actor
        """The Actor activation whose turn this is, or ``None`` for a Spot turn (Rule 5)."""
        self.spot = spot
        """The Spot activation whose turn this is (a message or tick turn, its start-up, a
        control turn, ``on_closing``: each holds its gate), else ``None``: a one-way send from
        it to that Spot never waits for room, nor for the Spot's own creation or close
        (routing/local.py Rules 4 and 6)."""
        self.joins: list[object] = []
        """Joins deferred during this turn, in call order (Rule 5)."""
        self.boundary: bool | None = None
        """``None``: this turn cannot signal a relocation boundary; ``False``: it can
        (a message or tick turn of an ``APPLICATION_SIGNALED`` Spot); ``True``: it did
        (spots/boundary.py)."""

    async def wait_outside(self, work: Callable[[], Awaitable[T]]) -> T:
        """``ExecutionGate.wait_outside`` for this turn, running its ``on_yield`` hook first."""
        gate = self.gate
        if gate is None:
            raise RuntimeError("a turn without a shared gate cannot yield (gate.py Rule 5)")
        hook, self.on_yield = self.on_yield, None
        if hook is not None:
            hook()
        return await gate.wait_outside(work)


_current: contextvars.ContextVar[Turn | None] = contextvars.ContextVar(
    "zlink_trio_turn", default=None
)


def current_turn() -> Turn | None:
    """The turn the calling task is running, or ``None`` outside any Spot turn (Rule 4)."""
    turn = _current.get()
    if turn is None or turn.task is not trio.lowlevel.current_task():
        return None
    return turn


def enter_turn(turn: Turn) -> contextvars.Token[Turn | None]:
    """Mark the calling task as running ``turn``; undo with ``leave_turn``."""
    return _current.set(turn)


def leave_turn(token: contextvars.Token[Turn | None]) -> None:
    """Undo ``enter_turn``."""
    _current.reset(token)
