"""The source's side of one Spot's move to another host (specs/relocation.md RELOC-47..RELOC-50;
the target's side is routing/arrivals.py).

Rule 1: seal, capture, prepare. The Spot is sealed at a turn boundary (spots/sealing.py), its
timers and adapter payload captured; an adapter that fails keeps the Spot serving here
(RELOC-18). The target gets the unit in ``zlink.RelocateIn`` and the payload in chunks of at
most ``relocation_payload_chunk_limit_bytes`` (RELOC-13), each request awaited before the next.
Rule 2: the commit is one conditional write. Once the target has restored the unit, the record
this host holds is rewritten, on its version, to name the target run with the same object
generation (RELOC-23). Anything that fails before it (the target refuses or is unreachable, the
deadline passes, the record moved, this run's lease is not good) aborts: the target drops what it
prepared and the Spot serves here again as if never sealed (RELOC-36, SHUT-3.9).
Rule 3: after the commit the target owns the unit: the cutover submit, the relay of what the
seal kept and the open there are host/cutover.py's (its Rule 1).
Rule 4: a User Spot moves with its member Actors (RELOC-6, RELOC-64). They are sealed with it
(actors/sealing.py ``seal_with_members``), each announced after the Spot with the Spot's id,
and the commit is one conditional batch over the Spot's record and every member's: all move or
none does. The target admits and opens them together; an abort drops them together. An Actor of
the Entry Spot moves alone the same way (``move_actor``).
Rule 5: a PER_ACTOR Spot moves as a shell, then its Actors one by one (RELOC-26..RELOC-28): its
own lane is sealed and moved without its members, its timers or any adapter (it is recreated,
RELOC-24, RELOC-25), so its record names the target first; then each member moves alone, as an
Entry Actor does, announced with the Spot's id, into the shell on the target. The
Spot closes here with ``RELOCATION_OUT`` and leaves the record alone, and what reaches this
host for it later is relayed for the follow window (routing/follow.py, RELOC-49).
Rule 6: a move is timed from the start of its seal to its cutover submit or its abort
(host/cutover.py Rule 2, RELOC-31).
Rule 7: an ``APPLICATION_SIGNALED`` Spot is sealed only at a boundary it signals: its move
waits for the next one within its deadline, and stays here when none comes (spots/boundary.py).
Rule 8: the seal waits for a running turn only until the move's deadline; then the seal is let
go and the unit serves here as if never sealed, what waited at it first, and the move ends
``DEADLINE_EXCEEDED``: a handler that never ends cannot hold ``host.relocate()`` past it.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import attrs
import cbor2
import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.sealing import SealedActor, seal_actor, seal_with_members
from zlink_trio._runtime.declarations.system import (
    RelocateAbort,
    RelocateAnswer,
    RelocateChunk,
    RelocateCommit,
    RelocateIn,
)
from zlink_trio._runtime.host.cutover import MovingUnit, cutover_ended, hand_over, tell_commit
from zlink_trio._runtime.ownership.node_record import NodeRecord
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.forward import starts_once
from zlink_trio._runtime.routing.owner import Owner
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.boundary import BoundaryWanted, signals
from zlink_trio._runtime.spots.ingress import Hold
from zlink_trio._runtime.spots.sealing import seal
from zlink_trio._runtime.spots.transfer import payload_chunks, timer_state_to_wire
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, SpotId, SpotKind, StableTypeName
from zlink_trio.options import RelocationReason, SpotFactoryMode

__all__ = ["MoveTimes", "move_actor", "move_spot", "move_to_join"]

_log = logging.getLogger("zlink_trio.runtime.relocation")
_times = logging.getLogger("zlink_trio.runtime.relocation.times")
"""Each completed move's ``MoveTimes`` at DEBUG: a bench turns this on without the rest of the
relocation's log, whose records would otherwise be made (and slow the moves it measures)."""


@attrs.frozen
class MoveTimes:
    """When one completed move passed each step, on Trio's clock of the source (seconds)."""

    spot_id: str
    """The id of the moved unit (a Spot's, or an Actor's)."""
    payload_bytes: int
    """The adapter payloads of the unit and its members, together."""
    sealing: float
    """The seal began: from here on what reaches the unit is held."""
    sealed: float
    """The running turns had ended."""
    prepared: float
    """The target had restored the units (its last answer before the commit)."""
    committed: float
    """The records named the target."""
    told: float
    """The one-way ``RelocateCommit`` was on its way: the cutover submit had ended (RELOC-31)."""
    opened: float
    """The target had been told to serve the units after the relay of what waited here."""


async def move_spot(
    remote: Remote, moved: Moved, activation: Activation, target: NodeRecord, deadline: float
) -> RelocationReason | None:
    """Move ``activation`` (with its member Actors, if any) to ``target`` before ``deadline``
    (Trio's clock); ``None`` once the target owns it, else why it stayed here (Rules 1-4)."""
    with trio.move_on_at(deadline):
        await activation.settled.wait()  # a Spot still activating is moved once it is Ready
    held = None
    if signals(activation.spot_type):  # it moves only at a boundary it signals (Rule 7)
        held = await _boundary(activation, deadline)
        if held is None:
            _log.info("%s signalled no relocation boundary in time", activation.spot_id)
            return RelocationReason.DEADLINE_EXCEEDED
    sealing = trio.current_time()
    shell = activation.spot_type.mode is SpotFactoryMode.PER_ACTOR
    members: list[SealedActor]
    try:
        with trio.move_on_at(deadline) as waited:  # for the running turn (Rule 8)
            if shell:  # its members move one by one after it (Rule 5)
                sealed, members = await seal(activation, shell=True), []
            elif activation.members:
                sealed, members = await seal_with_members(activation, held)
            else:
                sealed, members = await seal(activation, held=held), []
    except ZLinkError as error:
        _log.info("%s cannot be moved now: %s", activation.spot_id, error)
        return RelocationReason.STATE_INCOMPATIBLE
    if waited.cancelled_caught:
        _log.info("%s: a turn ran past the relocation's deadline", activation.spot_id)
        return RelocationReason.DEADLINE_EXCEEDED
    snapshot = sealed.capture()
    # A PER_ACTOR Spot's own timers do not move (TIMER-18, RELOC-25).
    states = () if shell else snapshot.timers
    timers = cbor2.dumps([timer_state_to_wire(state) for state in states])
    kind, name = int(activation.kind), activation.spot_type.name.value
    generation = snapshot.generation.value
    units = [
        MovingUnit(
            activation.spot_id,
            activation.node,
            sealed,
            snapshot.entries,
            lambda chunks: RelocateIn(kind, name, generation, timers, chunks, ready=snapshot.ready),
            activation.spot_type.name if activation.kind is SpotKind.INSTANCE else None,
            activation.closed,
        )
    ]
    units.extend(_actor_unit(member, activation.spot_id.value) for member in members)
    with moved.under_way():
        return await _move(remote, moved, units, target, deadline, sealing)


async def _boundary(activation: Activation, deadline: float) -> Hold | None:
    """Wait for the next relocation boundary ``activation`` signals, which seals it; ``None``
    when none came before ``deadline`` (spots/boundary.py Rules 2, 4)."""
    wanted = BoundaryWanted()
    activation.boundary_wanted = wanted
    with trio.move_on_at(deadline):
        await wanted.reached.wait()
    if activation.boundary_wanted is wanted:
        activation.boundary_wanted = None
    return wanted.hold


async def move_actor(
    remote: Remote, moved: Moved, actor: ActorActivation, target: NodeRecord, deadline: float
) -> RelocationReason | None:
    """``move_spot`` for an Actor of the Entry Spot, or of a PER_ACTOR Spot whose shell moved
    before it (Rules 1-3, 5)."""
    hold = actor.hold
    if hold is not None and actor.joining:
        # A join is moving it already (host/joining.py): it moves here only if that join fails.
        with trio.move_on_at(deadline):
            await hold.ended.wait()
    if actor.hold is not None and actor.hold.forward is not None:
        with trio.move_on_at(deadline):  # the join moved it: its relay ends with its close
            await actor.closed.wait()
            return None
        return RelocationReason.DEADLINE_EXCEEDED
    sealing = trio.current_time()
    spot = actor.spot if actor.spot.spot_type.mode is SpotFactoryMode.PER_ACTOR else None
    try:
        with trio.move_on_at(deadline) as waited:  # for the running turn (Rule 8)
            sealed = await seal_actor(actor, spot)
    except ZLinkError as error:
        _log.info("Actor %s cannot be moved now: %s", actor.actor_id, error)
        return RelocationReason.STATE_INCOMPATIBLE
    if waited.cancelled_caught:
        _log.info("Actor %s: a turn ran past the relocation's deadline", actor.actor_id)
        return RelocationReason.DEADLINE_EXCEEDED
    in_spot = None if spot is None else spot.spot_id.value
    with moved.under_way():
        unit = _actor_unit(sealed, in_spot)
        return await _move(remote, moved, [unit], target, deadline, sealing)


async def move_to_join(
    remote: Remote,
    moved: Moved,
    sealed: SealedActor,
    target: NodeRecord,
    deadline: float,
    with_join: Callable[[RelocateIn], RelocateIn],
) -> RelocateAnswer | RelocationReason | None:
    """``move_actor`` for a join from the Actor's own lane (host/joining.py): the lane sealed
    it, ``with_join`` adds the join to its ``RelocateIn``, and the relay after the commit runs
    on in the host's activation nursery. ``None`` once the target owns it, else the target's
    refusal or why it stayed here (serving again)."""
    sealing = trio.current_time()
    plain = _actor_unit(sealed, None)
    unit = attrs.evolve(plain, announce=lambda chunks: with_join(plain.announce(chunks)))
    refusal: list[RelocateAnswer] = []
    nursery = sealed.actor.node.activation_nursery
    with moved.under_way():
        reason = await _move(remote, moved, [unit], target, deadline, sealing, refusal, nursery)
    return refusal[0] if refusal else reason


def _actor_unit(sealed: SealedActor, spot: str | None) -> MovingUnit:
    actor = sealed.actor
    snapshot = sealed.capture()
    name, generation = actor.actor_type.name.value, snapshot.generation.value
    no_timers = cbor2.dumps([])
    return MovingUnit(
        actor.actor_id,
        actor.node,
        sealed,
        snapshot.entries,
        lambda chunks: RelocateIn(int(SpotKind.INVALID), name, generation, no_timers, chunks, spot),
        None,
        actor.closed,
    )


async def _move(
    remote: Remote,
    moved: Moved,
    units: list[MovingUnit],
    target: NodeRecord,
    deadline: float,
    sealing: float,
    refusal: list[RelocateAnswer] | None = None,
    relaying: trio.Nursery | None = None,
) -> RelocationReason | None:
    """Rules 1-2 for a unit and the Actors that move with it (``units[1:]``, Rule 4).
    ``refusal`` receives the target's answer when it refuses a unit; with ``relaying`` the
    relay after the commit runs in a task there and the move returns at the commit (a join
    moves its Actor from the Actor's own lane, which must end for the relay to end)."""
    sealed_at = prepared = trio.current_time()
    primary = units[0]
    node, unit_id = primary.node, primary.target
    try:
        payloads = [await unit.sealed.capture_payload() for unit in units]
    except Exception as error:
        _log.warning("capturing %s failed; it serves on here: %s", unit_id, error)
        _abort(units)
        cutover_ended(primary, target, trio.current_time() - sealing, "was given up")
        return RelocationReason.STATE_INCOMPATIBLE
    owner = Owner(target.rid)
    limit = node.config.relocation_payload_chunk_limit_bytes

    async def ask(
        about: SpotId | ActorId,
        message: object,
        submitted: Callable[[], object] | None = None,
        encoded: tuple[StableTypeName, bytes] | None = None,
    ) -> RelocateAnswer:
        left = deadline - trio.current_time()
        if left <= 0:
            raise trio.TooSlowError
        at = node.clock.now() + left
        answer = await remote.request(
            owner, about, message, RelocateAnswer, {}, None, at, submitted, encoded=encoded
        )
        assert isinstance(answer, RelocateAnswer)  # remote.request checked the reply's class
        return answer

    async def send_chunks(about: SpotId | ActorId, chunks: list[bytes]) -> RelocateAnswer:
        """Every chunk on its way before the first answer: the target takes them in order
        (routing/moves_in.py), so only the answers are waited for, together."""
        answers: list[RelocateAnswer] = []
        failures: list[ZLinkError | trio.TooSlowError] = []

        async def one(index: int, *, task_status: trio.TaskStatus[None]) -> None:
            on_submitted = starts_once(task_status)

            chunk = RelocateChunk(index, len(chunks), chunks[index])
            try:
                answers.append(await ask(about, chunk, on_submitted))
            except (ZLinkError, trio.TooSlowError) as error:  # raised below, not as a group
                failures.append(error)
            finally:
                on_submitted()

        async with trio.open_nursery() as nursery:
            for index in range(len(chunks)):
                if failures:
                    break
                await nursery.start(one, index)
        if failures:
            raise failures[0]
        refused = [answer for answer in answers if not answer.ok]
        return refused[0] if refused else RelocateAnswer(True)

    handed = None
    quiet = False
    reason = RelocationReason.RELOCATION_FAILED
    try:
        answer = RelocateAnswer(True)
        for unit, payload in zip(units, payloads, strict=True):
            chunks = [] if payload is None else payload_chunks(payload, limit)
            announce = unit.announce(len(chunks))
            inline = None
            if len(chunks) == 1:  # the payload inside the announcement, if it fits (RELOC-71)
                inline = remote.limits.fits(attrs.evolve(announce, payload=chunks[0]), target.rid)
            answer = await ask(unit.target, announce, encoded=inline)
            if answer.ok and chunks and inline is None:
                answer = await send_chunks(unit.target, chunks)
            if not answer.ok:
                break
        if not answer.ok:
            if refusal is None:
                _log.warning("%s refused %s: %s", target.rid, unit_id, answer.why)
            else:
                refusal.append(answer)
            reason = RelocationReason.STATE_INCOMPATIBLE
        else:
            prepared = trio.current_time()
            node.fence.check()
            claims = [unit.sealed.claim for unit in units]
            quiet = moved.moving == 1  # alone: the move is published once it serves (Rule 3)
            handed = await node.authority.hand_over(
                claims, target.rid, target.generation, quiet=quiet
            )
    except trio.TooSlowError:
        reason = RelocationReason.DEADLINE_EXCEEDED
    except ZLinkError as error:
        _log.warning("moving %s to %s failed before its commit: %s", unit_id, target.rid, error)
        if error.kind is ErrorKind.DEADLINE_EXCEEDED:  # the move's own deadline ran out (RELOC-20)
            reason = RelocationReason.DEADLINE_EXCEEDED
    if handed is None:
        with trio.CancelScope(shield=True), trio.move_on_after(node.config.request_timeout):
            try:
                await ask(unit_id, RelocateAbort())  # the target drops the members with it
            except (ZLinkError, trio.TooSlowError) as error:
                _log.info("could not tell %s to drop %s: %s", target.rid, unit_id, error)
        _abort(units)
        cutover_ended(primary, target, trio.current_time() - sealing, "was given up")
        return reason
    committed = trio.current_time()
    for unit in units:
        # From its close on, what still reaches this host for it is relayed (routing/follow.py).
        moved.follow(unit.target, target.rid)
    members = tuple(
        (unit.target.value, claim.version)
        for unit, claim in zip(units[1:], handed[1:], strict=True)
    )
    commit = RelocateCommit(handed[0].version, members)
    # The cutover submit: the target hears of the commit, one way, ahead of the relay (Rule 3).
    await tell_commit(remote, primary, target, commit)
    told = trio.current_time()
    cutover_ended(primary, target, told - sealing, "was committed and told")
    if relaying is not None:  # returns once the units forward what reaches them (detached)
        await relaying.start(hand_over, remote, moved, units, target, quiet)
        return None
    opened = await hand_over(remote, moved, units, target, quiet)
    if _times.isEnabledFor(logging.DEBUG):
        size = sum(0 if payload is None else len(payload) for payload in payloads)
        times = MoveTimes(
            unit_id.value, size, sealing, sealed_at, prepared, committed, told, opened
        )
        _times.debug("%s", times)
    return None


def _abort(units: list[MovingUnit]) -> None:
    """Serve here again: the members first, so the Spot's first turn finds them serving."""
    for unit in reversed(units):
        unit.sealed.abort()
