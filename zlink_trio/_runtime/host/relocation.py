"""Host relocation as one operation of the host (specs/relocation.md RELOC-41..RELOC-44;
specs/shutdown.md SHUT-3.x, SHUT-7.1, SHUT-7.2; issue 14, item 2).

``host.relocate(mode, target_version=, deadline=)`` runs here; ``relocate_and_shutdown`` is it
followed by ``shutdown()`` when everything moved.

Rule 1: bad arguments change nothing. The mode, the target version (none for planned
maintenance; a higher, well-formed one for a rolling update) and the deadline are checked
before the status is read, as ``TypeError`` or ``ValueError`` (RELOC-41).
Rule 2: one operation at a time. A call while one runs joins it when it names the same mode and
effective target version, and is answered ``BLOCKED/OPERATION_IN_PROGRESS`` at once otherwise
(SHUT-3.2, SHUT-3.3); after ``RELOCATED`` the same conditions get that result again. A blocked
result is not kept: the next call starts over (SHUT-3.7). A caller's cancellation ends only its
own wait; the operation is the host's (a task of the host nursery).
Rule 3: the check comes first. While the status stays SERVING and everything is admitted as
before, the operation lists what would move (every live User and Instance Spot and every Actor;
the Entry Spot stays) and refuses a host holding a type that may not move
(``RELOCATION_DISABLED``) (SHUT-3.5).
Rule 4: the host stops taking new work only for a move. With something to move, the operation
waits until the deadline for a target: a peer that is SERVING, runs the version the mode asks
for, and declares every type to move; none by then is ``TARGET_UNAVAILABLE`` with the host
unchanged (SHUT-3.6, SHUT-7.2). With nothing to move, the host becomes RELOCATING (its record
says so, and it places no new Spot or Actor: RELOC-44), lets creations already under way end,
and becomes RELOCATED without a target (SHUT-3.8).
Rule 5: shutdown wins. Once shutdown starts, a running operation ends
``BLOCKED/SHUTDOWN_REQUESTED`` and a new one is refused the same way (SHUT-3.4, SHUT-7.1); no
blocked relocation shuts the host down, and a host that was RELOCATING serves again (SHUT-3.9,
SHUT-3.11).
Rule 6: with a target found, the host becomes RELOCATING and moves its Spots, each User Spot
with its member Actors, then the Actors of the Entry Spot (host/moving.py), ``MOVES_AT_ONCE``
at a time, once its node record says RELOCATING (or the deadline came) and the target has
answered ``zlink.RelocateBegin``, which it does once it sees that record (RELOC-74); the first
that stays here ends the operation with its reason once the moves under way have ended, what
moved stays moved and the host serves again (SHUT-3.10). A target must serve every type to move
(its node record lists the Spot and Actor types it serves). While the units move, the cyclic
garbage collector is paused (RELOC-75).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable
from functools import partial

import attrs
import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.declarations.system import RelocateAnswer, RelocateBegin
from zlink_trio._runtime.engines.heap import collector_paused
from zlink_trio._runtime.host.moving import move_actor, move_spot
from zlink_trio._runtime.host.status import StatusBoard
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.membership import Membership
from zlink_trio._runtime.ownership.node_record import RELOCATED, RELOCATING, SERVING, NodeRecord
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._wire.versions import parse_application_version
from zlink_trio.errors import ZLinkError
from zlink_trio.ids import SpotKind, StableTypeName
from zlink_trio.options import (
    HostStatus,
    RelocationMode,
    RelocationOutcome,
    RelocationReason,
    RelocationResult,
    SpotFactoryMode,
)

__all__ = ["DEFAULT_DEADLINE", "Relocator"]

_log = logging.getLogger("zlink_trio.runtime.relocation")

DEFAULT_DEADLINE = 30.0
"""Seconds a relocation may take when the call gives no deadline."""

MOVES_AT_ONCE = 16
"""Units moving at the same time. One move waits mostly on round trips and one store write
(bench/relocation.py: 11-23 ms each, the process mostly idle), so a few at once shorten a
host's relocation many times over; more than this mostly adds to the store's and the target's
queues."""


@attrs.frozen
class _Conditions:
    mode: RelocationMode
    version: str
    """The effective target version, as text."""
    numbers: tuple[int, ...]
    deadline: float = attrs.field(eq=False)

    def result(self, reason: RelocationReason) -> RelocationResult:
        outcome = (
            RelocationOutcome.RELOCATED
            if reason is RelocationReason.NONE
            else RelocationOutcome.BLOCKED
        )
        return RelocationResult(self.mode, self.version, outcome, reason)


class _Operation:
    def __init__(self, conditions: _Conditions) -> None:
        self.conditions = conditions
        self.result: RelocationResult | None = None
        self.done = trio.Event()
        self.scope = trio.CancelScope()

    def finish(self, reason: RelocationReason) -> None:
        if self.result is None:
            self.result = self.conditions.result(reason)
            self.done.set()


def check_arguments(
    mode: object, target_version: object, deadline: object, own_version: str
) -> _Conditions:
    """Rule 1: the call's conditions, or ``TypeError`` / ``ValueError``."""
    if not isinstance(mode, RelocationMode):
        raise TypeError(f"mode takes a zl.RelocationMode, not {mode!r}")
    if isinstance(deadline, bool) or not isinstance(deadline, int | float):
        raise TypeError(f"deadline takes seconds as a number, not {type(deadline).__name__}")
    if not (deadline > 0 and math.isfinite(deadline)):
        raise ValueError(f"deadline must be a positive finite number of seconds, got {deadline}")
    own = parse_application_version(own_version)
    if mode is RelocationMode.PLANNED_MAINTENANCE:
        if target_version is not None:
            raise ValueError(
                "a planned maintenance moves to hosts of this host's own application version "
                f"({own_version}); it takes no target_version, got {target_version!r}"
            )
        return _Conditions(mode, own_version, own, float(deadline))
    if target_version is None:
        raise ValueError("a rolling update needs target_version, the version to move to")
    numbers = parse_application_version(target_version)
    assert isinstance(target_version, str)  # parse_application_version checked it
    if numbers <= own:
        raise ValueError(
            f"a rolling update moves to a higher application version than this host's "
            f"({own_version}), got {target_version!r}"
        )
    return _Conditions(mode, target_version, numbers, float(deadline))


class Relocator:
    """The host's relocation operation (Rules 2-5)."""

    def __init__(
        self,
        node: LocalNode,
        board: StatusBoard,
        spots: SpotCatalog[Activation],
        actors: ActorCatalog[ActorActivation],
    ) -> None:
        self._node = node
        self._board = board
        self._spots = spots
        self._actors = actors
        self.membership: Membership | None = None
        self.remote: Remote | None = None
        self.moved: Moved | None = None
        self.nursery: trio.Nursery | None = None
        self._running: _Operation | None = None
        self._relocated: _Operation | None = None
        self._shutting_down = False

    async def relocate(
        self, mode: object, target_version: object, deadline: object
    ) -> RelocationResult:
        """Rules 1 and 2: check, then start, join or refuse, and wait for the result."""
        conditions = check_arguments(
            mode, target_version, deadline, self._node.config.application_version
        )
        status = self._board.status
        if self._shutting_down or status is HostStatus.DRAINING:
            return conditions.result(RelocationReason.SHUTDOWN_REQUESTED)
        if status in (HostStatus.PREPARING, HostStatus.STOPPED, HostStatus.ERROR):
            return conditions.result(RelocationReason.RUNTIME_NOT_READY)
        operation = self._running or self._relocated
        if operation is not None:
            if operation.conditions != conditions:
                return conditions.result(RelocationReason.OPERATION_IN_PROGRESS)
        else:
            assert self.nursery is not None  # bound once the host serves
            operation = self._running = _Operation(conditions)
            self.nursery.start_soon(self._run, operation)
        await operation.done.wait()
        assert operation.result is not None
        return operation.result

    def shutdown_started(self) -> None:
        """Rule 5: the running operation ends ``SHUTDOWN_REQUESTED``; no new one starts."""
        self._shutting_down = True
        running = self._running
        if running is not None:
            running.finish(RelocationReason.SHUTDOWN_REQUESTED)
            running.scope.cancel()

    async def _run(self, operation: _Operation) -> None:
        try:
            with operation.scope:
                reason = await self._relocate(operation.conditions)
                operation.finish(reason)
        except Exception:
            _log.exception("relocation of host %s failed", self._node.node_rid)
            operation.finish(RelocationReason.RELOCATION_FAILED)
        finally:
            operation.finish(RelocationReason.SHUTDOWN_REQUESTED)  # cancelled by shutdown
            self._running = None
            if operation.result is not None and operation.result.relocated:
                self._relocated = operation
            elif not self._shutting_down and self._board.status is HostStatus.RELOCATING:
                self._serve_again()

    async def _relocate(self, conditions: _Conditions) -> RelocationReason:
        deadline = trio.current_time() + conditions.deadline
        units = self._units()
        disabled = sorted({name.value for name, policy in units if policy == "disable"})
        if disabled:
            _log.info("relocation blocked: these types may not move: %s", ", ".join(disabled))
            return RelocationReason.RELOCATION_DISABLED
        if not units:
            return await self._relocate_nothing(deadline)
        # Node records list the Spot and Actor types a host serves.
        types = {name for name, _policy in units}
        target: NodeRecord | None = None
        with trio.move_on_at(deadline):
            target = await self._target(conditions, types)
        if target is None:
            return RelocationReason.TARGET_UNAVAILABLE
        return await self._move_all(target, deadline)

    async def _move_all(self, target: NodeRecord, deadline: float) -> RelocationReason:
        """Rule 6: the Spots, then the Actors of the Entry Spot, ``MOVES_AT_ONCE`` at a time;
        the first that stays here ends the operation once the moves under way have ended."""
        self._stop_placing(RELOCATING, HostStatus.RELOCATING)
        if self.membership is not None:
            # The record says RELOCATING before the first seal: peers stop placing here, and
            # the first commits do not share the store with that write (Rule 6).
            with trio.move_on_at(deadline):
                await self.membership.published()
        await self._greet(target, deadline)
        with collector_paused():  # no full collection inside a unit's seal (RELOC-75)
            return await self._move_units(target, deadline)

    async def _move_units(self, target: NodeRecord, deadline: float) -> RelocationReason:
        remote, moved = self.remote, self.moved
        assert remote is not None  # bound with the membership
        assert moved is not None
        stayed: list[RelocationReason] = []
        room = trio.Semaphore(MOVES_AT_ONCE)

        async def move(one: Callable[[], Awaitable[RelocationReason | None]]) -> None:
            try:
                reason = await one()
            except Exception:  # one unit's failure must not end the others' moves
                _log.exception("a move failed")
                reason = RelocationReason.RELOCATION_FAILED
            finally:
                room.release()
            if reason is not None and not stayed:
                stayed.append(reason)

        async def phase(moves: list[Callable[[], Awaitable[RelocationReason | None]]]) -> None:
            async with trio.open_nursery() as moving:
                for one in moves:
                    await room.acquire()
                    if stayed:
                        room.release()
                        return
                    moving.start_soon(move, one)

        await phase(
            [partial(move_spot, remote, moved, a, target, deadline) for a in self._spots_to_move()]
        )
        if not stayed:  # the Actors still in the Entry Spot or a PER_ACTOR shell once Spots moved
            await phase(
                [
                    partial(move_actor, remote, moved, actor, target, deadline)
                    for actor in self._actors_to_move()
                ]
            )
        if stayed:
            return stayed[0]
        return await self._relocate_nothing(deadline)

    async def _greet(self, target: NodeRecord, deadline: float) -> None:
        """Rule 6: ``zlink.RelocateBegin`` (naming the Entry Spot: only its class matters), once
        the target has taken in this host's RELOCATING record (RELOC-74), so that its store read
        runs before the first seal. A failure is logged: the first move meets it."""
        remote = self.remote
        assert remote is not None  # bound with the membership
        left = min(deadline - trio.current_time(), self._node.config.request_timeout)
        if left <= 0:
            return
        at, about = self._node.clock.now() + left, self._spots.entry.spot_id
        try:
            answer = await remote.request(
                Owner(target.rid), about, RelocateBegin(), RelocateAnswer, {}, None, at
            )
        except ZLinkError as error:
            _log.info("%s did not answer the start of this relocation: %s", target.rid, error)
            return
        if isinstance(answer, RelocateAnswer) and not answer.ok:
            _log.info("%s answered the start of this relocation: %s", target.rid, answer.why)

    def _actors_to_move(self) -> list[ActorActivation]:
        """Every Ready Actor of the Entry Spot or of a PER_ACTOR Spot (whose shell moved before
        it), in id order; a member of a SPOT_WIDE User Spot moved with it."""
        return sorted(
            (
                actor
                for actor in self._actors.live
                if actor.accepting
                and (
                    actor.spot.kind is SpotKind.ENTRY
                    or actor.spot.spot_type.mode is SpotFactoryMode.PER_ACTOR
                )
            ),
            key=lambda actor: actor.actor_id.value,
        )

    def _spots_to_move(self) -> list[Activation]:
        """Every live Spot but the Entry Spot (which stays), in id order."""
        return sorted(
            (a for a in self._spots.live if a.kind is not SpotKind.ENTRY and a.accepting),
            key=lambda activation: activation.spot_id.value,
        )

    def _units(self) -> list[tuple[StableTypeName, str]]:
        """Rule 3: every live Spot (the Entry Spot stays) and Actor, by type and policy kind."""
        units: list[tuple[StableTypeName, str]] = [
            (activation.spot_type.name, activation.spot_type.relocation.kind)
            for activation in self._spots_to_move()
        ]
        units.extend(
            (actor.actor_type.name, actor.actor_type.relocation.kind)
            for actor in self._actors.live
            if actor.accepting
        )
        return units

    async def _relocate_nothing(self, deadline: float) -> RelocationReason:
        """Rule 4's second half (SHUT-3.8), and the end of Rule 6."""
        self._stop_placing(RELOCATING, HostStatus.RELOCATING)
        with trio.move_on_at(deadline):
            creating = [*self._spots.creating.values(), *self._actors.creating.values()]
            for done in creating:
                await done.wait()
            if self._units():
                # Made by a creation that was under way at the check: something is left to
                # move; the next call moves it.
                return RelocationReason.RELOCATION_FAILED
            self._stop_placing(RELOCATED, HostStatus.RELOCATED)
            return RelocationReason.NONE
        return RelocationReason.DEADLINE_EXCEEDED

    def _stop_placing(self, state: str, status: HostStatus) -> None:
        self._node.placing = f"it is {state}"
        if self.membership is not None:
            self.membership.update(state=state)
        self._board.set(status)

    def _serve_again(self) -> None:
        """SHUT-3.9, SHUT-3.11: a blocked relocation leaves the host serving."""
        self._node.placing = None
        if self.membership is not None:
            self.membership.update(state=SERVING)
        self._board.set(HostStatus.SERVING)

    async def _target(self, conditions: _Conditions, types: set[StableTypeName]) -> NodeRecord:
        """Rule 4: the first fitting peer, waiting for membership changes until one fits."""
        assert self.membership is not None
        while True:
            events = self.membership.subscribe()
            async with events:
                while True:
                    for record in self.membership.peers().values():
                        if _fits(record, conditions, types):
                            return record
                    try:
                        await events.receive()
                    except trio.EndOfChannel:
                        break  # fell behind: a fresh subscription starts from a snapshot


def _fits(record: NodeRecord, conditions: _Conditions, types: set[StableTypeName]) -> bool:
    try:
        version = parse_application_version(record.application_version)
    except (TypeError, ValueError):
        return False
    return (
        record.state == SERVING
        and version == conditions.numbers
        and types.issubset(set(record.types))
    )
