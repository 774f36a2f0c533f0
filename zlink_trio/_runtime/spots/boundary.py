"""The relocation boundary an ``APPLICATION_SIGNALED`` User Spot signals (specs/spots.md
SPOT-81..SPOT-85): ``self.context.relocation_ready().defer()`` in one of its turns.

Rule 1: only such a Spot's own message and timer turns signal, once each. ``defer()`` anywhere
else (a ``FRAMEWORK_MANAGED``, PER_ACTOR, Entry or Instance Spot, a lifecycle or control turn,
a member Actor's turn, outside any turn) or a second time in one turn raises
``INVALID_OPERATION`` and changes nothing; otherwise it marks the running turn (gate.py
``Turn.boundary``) and returns.
Rule 2: the boundary is decided when the turn ends, the gate still held, so nothing of the Spot
runs in between. A move of this Spot that waits for it (``BoundaryWanted``, host/moving.py)
takes it: the Spot is sealed on the spot (its hold set, its timers paused) and the move goes on
from there (spots/sealing.py ``seal(held=...)``). With no move waiting,
``on_relocation_ready_completed(CONTINUED)`` runs there and then, still in that turn.
Rule 3: a move that took the boundary ends in exactly one callback. After its commit the target
calls ``on_relocation_ready_completed(RELOCATED)`` on the restored instance before its first
message or tick (spots/sealing.py ``prepare_restore``); a move given up before its commit calls
``CONTINUED`` on the source under the gate, and only then serves what the seal held
(``serve_again``). A callback that raises is logged; the Spot serves on.
Rule 4: a move of such a Spot waits for its next boundary for as long as its deadline allows;
a Spot that signals none by then stays where it is (host/moving.py).
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

import trio

from zlink_trio._runtime.declarations.registry import SpotType
from zlink_trio._runtime.engines.gate import (
    ExecutionGate,
    Turn,
    current_turn,
    enter_turn,
    leave_turn,
)
from zlink_trio._runtime.spots.ingress import Hold
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import SpotId, SpotKind
from zlink_trio.options import (
    RelocationCoordinationMode,
    RelocationReadyCompletion,
    RelocationReadyOutcome,
    SpotFactoryMode,
)

__all__ = ["BoundaryWanted", "RelocationReady", "at_boundary", "ready_completed", "serve_again"]

_log = logging.getLogger("zlink_trio.runtime.activation")


class _Signalling(Protocol):
    """What of a Spot activation (spots/activation.py) a boundary uses."""

    spot_id: SpotId
    spot_type: SpotType
    gate: ExecutionGate
    shared_gate: ExecutionGate | None
    hold: Hold | None
    boundary_wanted: BoundaryWanted | None
    _instance: Any

    @property
    def timers(self) -> Any: ...

    @property
    def accepting(self) -> bool: ...

    def reopen(self) -> None: ...

    def start_soon(self, function: Any, *args: Any) -> bool: ...


def signals(spot_type: SpotType) -> bool:
    """Whether turns of ``spot_type`` may signal a boundary (Rule 1)."""
    return spot_type.coordination is RelocationCoordinationMode.APPLICATION_SIGNALED


class RelocationReady:
    """``self.context.relocation_ready()``: ``defer()`` signals a boundary after this turn."""

    def __init__(self, activation: _Signalling) -> None:
        self._activation = activation

    def defer(self) -> None:
        """Signal that the Spot may move once the running turn ends (Rule 1)."""
        activation = self._activation
        spot_type = activation.spot_type
        name = f"Spot {activation.spot_id}"
        if spot_type.kind is not SpotKind.USER:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"relocation_ready().defer(): {name} is not a User Spot; only an "
                "APPLICATION_SIGNALED User Spot signals its relocation boundary",
            )
        if spot_type.mode is SpotFactoryMode.PER_ACTOR or not signals(spot_type):
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"relocation_ready().defer(): {name} is not declared with "
                "coordination=RelocationCoordinationMode.APPLICATION_SIGNALED (SPOT_WIDE only); "
                "the framework picks its boundary",
            )
        turn = current_turn()
        if turn is None or turn.boundary is None or turn.gate is not activation.gate:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"relocation_ready().defer() is called in a message or timer turn of {name}",
            )
        if turn.boundary:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"relocation_ready().defer() was called already in this turn of {name}",
            )
        turn.boundary = True


class BoundaryWanted:
    """A move waiting for the Spot's next signalled boundary (Rules 2, 4): ``reached`` is set
    when the boundary sealed the Spot, with that seal in ``hold``."""

    def __init__(self) -> None:
        self.reached = trio.Event()
        self.hold: Hold | None = None


async def at_boundary(activation: _Signalling) -> None:
    """The end of a turn that signalled, the gate still held (Rule 2)."""
    wanted = activation.boundary_wanted
    if wanted is not None and activation.hold is None and activation.accepting:
        activation.boundary_wanted = None
        hold = Hold()
        activation.hold = hold  # from here on nothing new runs (activation.py Rule 9)
        activation.timers.pause()
        wanted.hold = hold
        wanted.reached.set()
        return
    await ready_completed(activation, RelocationReadyOutcome.CONTINUED)


async def ready_completed(activation: _Signalling, outcome: RelocationReadyOutcome) -> None:
    """Call the Spot's ``on_relocation_ready_completed``; a failure is logged (Rule 3)."""
    instance = activation._instance
    if instance is None:
        return
    try:
        await instance.on_relocation_ready_completed(RelocationReadyCompletion(outcome))
    except Exception:
        _log.exception("on_relocation_ready_completed of %s raised", activation.spot_id)


def serve_again(activation: _Signalling, hold: Hold) -> None:
    """A move gave up a Spot that a signalled boundary sealed: ``CONTINUED`` runs under its
    gate, then it serves what the seal kept, as if never sealed (Rule 3). Once per seal."""
    if hold.continuing:
        return
    hold.continuing = True
    if not activation.start_soon(_continue, activation, hold):
        _reopen(activation, hold)


async def _continue(activation: _Signalling, hold: Hold) -> None:
    gate = activation.gate
    await gate.acquire()
    token = enter_turn(Turn(activation.shared_gate, spot=activation))
    try:
        await ready_completed(activation, RelocationReadyOutcome.CONTINUED)
    finally:
        leave_turn(token)
        _reopen(activation, hold)
        gate.release()


def _reopen(activation: _Signalling, hold: Hold) -> None:
    if activation.hold is hold and not hold.broken:
        activation.reopen()
        activation.timers.resume()
