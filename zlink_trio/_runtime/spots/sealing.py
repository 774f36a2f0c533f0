"""The part of one unit's move that lives in a Spot activation: seal it at a turn boundary,
capture what moves, abort or detach, and restore into a fresh activation (specs/relocation.md
RELOC-34..RELOC-41; specs/timers.md TIMER-15..TIMER-17; specs/spots.md SPOT-35, SPOT-46).

The host-level operation (target choice, the wire, the authority switch) calls these; on one host
they compose as ``seal`` -> ``capture`` -> ``prepare_restore`` -> ``detach(restored.take)`` ->
``restored.open()``, or ``seal`` -> ``abort``.

Theory of operation.

Rule 1: a seal is a barrier at a turn boundary (SPOT-75). ``seal`` sets the activation's hold at
once, so everything offered from then on waits in it (spots/ingress.py) and no new turn, tick or
control turn starts (activation.py Rule 9); it returns once no turn runs, a ``yield_()``
continuation included, every task that was waiting for the gate has backed off, the gate task
holds no message, and every timer is paused between ticks (a running tick ends on the source,
TIMER-17). Then it takes the front and the mailbox as the unrun entries. Cancelled before that,
it abandons the seal and admission is exactly as before (SPOT-76).
Rule 2: a snapshot is a plain value. ``capture`` returns a ``SpotSnapshot``: the unrun entries,
then the held ones, in order, each the admitted ``Envelope`` itself (message, handler, context
with metadata and deadline, reply route), and each timer's ``TimerState``. It marks how much of
the hold it took; capturing again takes what was held since as well.
Rule 3: abort serves as if never sealed: the unrun entries, then the held ones, go to the front,
and the timers go on from their states now (their overrun policy choosing among the ticks that
fell due meanwhile). Nothing is lost and nothing runs twice.
Rule 4: detach hands over for good. What the last capture did not take is given to ``forward`` in
order, and every later offer too (the hold stays set, forwarding); what it took is dropped here
(the target runs it). The activation then closes with ``RELOCATION_OUT`` (``on_closing`` runs)
and keeps its hands off the store record, which is the target's now.
Rule 5: a restore starts a fresh instance of the same id and generation. ``prepare_restore``
makes the instance (a new one from the type's class) and gives it the adapter payload, but no
lifecycle callback runs (``on_create`` and ``on_initialize`` ran for this generation) and no
timer is started again by the application; nobody reaches it yet. ``take`` queues forwarded
messages behind the snapshot's (each taking a job permit here, ERR-5.16); ``admit`` registers it
under the id, so what is offered to it waits in a hold of its own, unbounded (ERR-5.14); ``open``
lets it serve: its first turns are the snapshot's entries, then what it took, then what was
offered to it, and its timers start only now that it is Ready (TIMER-16, TIMER-17). A
snapshot's entries hold no job permit here. A Spot that a boundary it signalled sealed
(``seal(held=...)``, spots/boundary.py) is told ``RELOCATED`` first, and on an abort
``CONTINUED`` before it serves again.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import attrs
import trio

from zlink_trio._runtime.declarations.registry import SpotType
from zlink_trio._runtime.declarations.relocation import capture_payload, restore_payload
from zlink_trio._runtime.declarations.values import MessageContext
from zlink_trio._runtime.engines.completion import shutting_down
from zlink_trio._runtime.engines.timers import TimerState
from zlink_trio._runtime.node.envelope import Envelope, fail_one
from zlink_trio._runtime.ownership.authority import Claim
from zlink_trio._runtime.spots.activation import Activation, ActivationState
from zlink_trio._runtime.spots.boundary import ready_completed, serve_again
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._runtime.spots.ingress import Hold
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import (
    ObjectGeneration,
    SpotCloseReason,
    SpotId,
    SpotKind,
    StableTypeName,
)
from zlink_trio.options import RelocationReadyOutcome, SpotFactoryMode

__all__ = ["RestoredSpot", "SealedSpot", "SpotSnapshot", "prepare_restore", "seal"]

_log = logging.getLogger("zlink_trio.runtime.activation")


@attrs.frozen
class SpotSnapshot:
    """What a move of one Spot carries besides the adapter payload (Rule 2).

    The wire step must carry, per entry: the message (its stable type name and encoded payload,
    as ``Remote`` encodes a request), the handler kind (packet or request), the metadata, the
    remaining deadline (``context.deadline`` is on the source's application clock: send what is
    left, as a Request frame does), and the reply route — which, across hosts, becomes the
    caller's pending request on the source's transport, to be answered from the target (the
    operation identity and correlation travel with it; issue 14, item 4). Per timer: the fields
    of ``TimerState`` (``rebased`` moves its times onto the target's clock).
    """

    spot_id: SpotId
    type_name: StableTypeName
    generation: ObjectGeneration
    entries: tuple[Envelope, ...]
    """The entries left unrun in the front and mailbox at the seal, then the held ones, in
    order."""
    timers: tuple[TimerState, ...]
    captured_at: float
    """The source's application clock at the capture."""
    ready: bool = False
    """A boundary the Spot signalled sealed it: the restored instance is told ``RELOCATED``
    before anything runs (spots/boundary.py Rule 3)."""


def _refuse_seal(
    activation: Activation, with_members: bool, shell: bool, held: Hold | None
) -> ZLinkError | None:
    spot_id = activation.spot_id
    if activation.state is ActivationState.ACTIVATING:
        return ZLinkError(ErrorKind.UNAVAILABLE, f"{spot_id} is still activating")
    if activation.state is not ActivationState.READY:
        return ZLinkError(ErrorKind.UNAVAILABLE, f"{spot_id} is closing; it cannot be sealed")
    if activation.hold is not held:
        return ZLinkError(ErrorKind.INVALID_OPERATION, f"{spot_id} is sealed already")
    spot_type = activation.spot_type
    if spot_type.kind is SpotKind.ENTRY:
        return ZLinkError(ErrorKind.INVALID_OPERATION, "an Entry Spot never moves")
    if (spot_type.mode is SpotFactoryMode.PER_ACTOR) != shell:
        per_actor = f"{spot_id} is PER_ACTOR: it moves a shell"
        return ZLinkError(ErrorKind.INVALID_OPERATION, per_actor if not shell else "not PER_ACTOR")
    if activation.members and not (with_members or shell):
        return ZLinkError(
            ErrorKind.INVALID_OPERATION, f"{spot_id} has member Actors; moving them is not built"
        )
    return None


async def seal(
    activation: Activation,
    *,
    with_members: bool = False,
    shell: bool = False,
    held: Hold | None = None,
) -> SealedSpot:
    """Seal ``activation`` at a turn boundary (Rule 1). ``UNAVAILABLE`` when it is activating or
    closing (or host shutdown breaks the seal), ``INVALID_OPERATION`` when it is sealed already
    or cannot move as one unit (an Entry Spot, a PER_ACTOR Spot, a Spot with members unless
    ``with_members``: its members are sealed by the caller, actors/sealing.py). ``shell``
    seals a PER_ACTOR Spot's own lane only: its members run on, and move one by one after it
    (RELOC-26). ``held``: the seal a signalled boundary set already (spots/boundary.py Rule
    2); a seal that fails then tells the Spot ``CONTINUED`` before it serves again."""
    refused = _refuse_seal(activation, with_members, shell, held)
    if refused is not None:
        if held is not None and activation.hold is held:
            serve_again(activation, held)
        raise refused
    if held is None:
        hold = Hold()
        activation.hold = hold
        activation.timers.pause()
    else:
        hold = held
    gate = activation.gate
    try:
        while not hold.broken:
            # Whoever was waiting for the gate gets it before this and backs off (Rule 1).
            await gate.acquire()
            running, resting = activation.turns_running, activation.gate_task_resting
            gate.release()
            if running:
                await hold.quiet.wait()  # a turn, or a yield_() continuation, is still running
            elif resting:
                break
            else:
                # The gate task has a message in hand: let it run and put it back.
                await trio.lowlevel.checkpoint()
        await activation.timers.wait_paused()
    except BaseException:
        if activation.hold is hold:
            # The barrier failed: admission as it was (SPOT-76). What is queued still goes
            # before what was held.
            hold.unrun = activation.take_queued()
            _serve_again(activation, hold, signalled=held is not None)
        raise
    if hold.broken:
        raise shutting_down()
    hold.unrun = activation.take_queued()
    return SealedSpot(activation, hold, signalled=held is not None)


def _serve_again(activation: Activation, hold: Hold, *, signalled: bool) -> None:
    """End ``hold`` as if never sealed (Rule 3), after ``CONTINUED`` when a signalled
    boundary set it (spots/boundary.py Rule 3)."""
    if signalled:
        serve_again(activation, hold)
    else:
        activation.reopen()
        activation.timers.resume()


class SealedSpot:
    """A sealed activation: ``capture()``, then ``abort()`` or ``detach(forward)``."""

    def __init__(self, activation: Activation, hold: Hold, *, signalled: bool = False) -> None:
        self.activation = activation
        self._hold = hold
        self._signalled = signalled
        """A boundary the Spot signalled sealed it (spots/boundary.py)."""
        self._cut: int | None = None
        """How many held entries the last capture took (``None``: none yet)."""
        self._ended = False

    @property
    def claim(self) -> Claim:
        """The authority record this incarnation holds: a restore on this host reuses it."""
        claim = self.activation._claim
        assert claim is not None  # a Ready activation has claimed
        return claim

    def _live(self) -> Hold:
        if self._ended or self._hold.broken:
            raise ZLinkError(ErrorKind.INVALID_OPERATION, "the seal has ended")
        return self._hold

    def capture(self) -> SpotSnapshot:
        """What the move carries besides the adapter payload (Rule 2)."""
        hold = self._live()
        activation = self.activation
        now = activation.node.clock.now()
        self._cut = len(hold.held)
        return SpotSnapshot(
            spot_id=activation.spot_id,
            type_name=activation.spot_type.name,
            generation=activation.generation,
            entries=(*(envelope for envelope, _ in hold.unrun), *hold.held),
            timers=activation.timers.states(now),
            captured_at=now,
            ready=self._signalled,
        )

    async def capture_payload(self) -> bytes | None:
        """The adapter payload of a ``preserve_state_with`` type (RELOC-10, RELOC-11), ``None``
        for any other policy; the instance is not in a turn while sealed."""
        self._live()
        adapter = self.activation.spot_type.relocation.adapter
        if adapter is None:
            return None
        return await capture_payload(adapter(), self.activation._instance)

    def abort(self) -> None:
        """Serve again as if never sealed (Rule 3); after ``CONTINUED`` if a signalled
        boundary sealed it (spots/boundary.py Rule 3)."""
        hold = self._live()
        self._ended = True
        _serve_again(self.activation, hold, signalled=self._signalled)

    def detach(self, forward: Callable[[Envelope], None], *, closing: bool = True) -> None:
        """Hand over for good and start closing with ``RELOCATION_OUT`` (Rule 4); ``forward``
        must not block and receives each envelope once, in order. Await
        ``activation.closed`` for the end of ``on_closing``. With ``closing=False`` the Spot
        stays registered, forwarding, until ``close()``."""
        hold = self._live()
        self._ended = True
        activation = self.activation
        # What the last capture took, the target has: it leaves this host's queue unrun.
        hold.detach(self._cut, forward, activation.node.jobs.release)
        activation.keeps_record = True
        if closing:
            self.close()

    def close(self) -> None:
        """Start closing a detached Spot with ``RELOCATION_OUT`` (Rule 4)."""
        activation = self.activation
        assert self._ended, "detached"
        assert self._hold.forward is not None, "detached"
        deadline = activation.node.clock.now() + activation.node.config.closing_timeout
        activation.begin_close(SpotCloseReason.RELOCATION_OUT, deadline, drain=True)


async def prepare_restore(
    catalog: SpotCatalog[Activation],
    snapshot: SpotSnapshot,
    claim: Claim,
    payload: bytes | None = None,
) -> RestoredSpot:
    """A fresh activation of the snapshot's Spot, restored but not reachable yet (Rule 5):
    ``payload`` goes to the type's adapter (``None`` for a type without one). Raises what the
    instance or the adapter raised (``AdapterFailure``, as ``INTERNAL_FAILURE``); the
    carried messages are then not failed: they are still the source's."""
    node = catalog.node
    spot_type = node.registry.spot_types[snapshot.type_name]
    if claim.record.generation != snapshot.generation or claim.spot_id != snapshot.spot_id:
        raise ValueError(f"{claim.record} is not the authority of {snapshot.spot_id}")
    adapter = spot_type.relocation.adapter
    if (adapter is None) != (payload is None):
        raise ValueError(f"{spot_type.name} takes {'a' if adapter else 'no'} payload")
    activation = Activation(catalog, spot_type, snapshot.spot_id, claim)
    activation.keeps_record = True
    activation.front.extend((envelope, False) for envelope in snapshot.entries)
    activation.timers.restore(snapshot.timers)
    restored = RestoredSpot(activation)

    async def restore(instance: Any) -> None:
        if adapter is not None and payload is not None:
            await restore_payload(adapter(), instance, payload)
        restored._restored.set()
        await restored._opened.wait()
        if restored._discarded:
            raise ZLinkError(ErrorKind.UNAVAILABLE, f"the move of {snapshot.spot_id} ended")
        if snapshot.ready:  # under the gate, before anything the Spot holds runs
            await ready_completed(activation, RelocationReadyOutcome.RELOCATED)

    activation.restoring = restore
    node.activation_nursery.start_soon(restored._run)
    await restored._restored.wait()
    if restored._failure is not None:
        raise restored._failure
    return restored


class RestoredSpot:
    """A restored activation: ``take(envelope)`` for what the source forwards, then ``open()``."""

    def __init__(self, activation: Activation) -> None:
        self.activation = activation
        self._restored = trio.Event()
        self._opened = trio.Event()
        self._failure: ZLinkError | None = None
        self._discarded = False

    async def _run(self) -> None:
        try:
            await self.activation.run()
        except ZLinkError as error:
            _log.warning("restoring %s failed: %s", self.activation.spot_id, error)
            self._failure = error
        finally:
            self._restored.set()

    def take(self, envelope: Envelope) -> None:
        """Queue a forwarded message behind the snapshot's and earlier ones (Rule 5). Its lane
        is this host's now, and so is its job permit, taken past the size if none is free: the
        reservation applies to it here, but never bounds what the source relays (ERR-5.16)."""
        activation = self.activation
        if activation.closed.is_set():
            error = ZLinkError(ErrorKind.UNAVAILABLE, f"Spot {activation.spot_id} has closed")
            fail_one(activation.node.dispatcher, envelope, error)
            return
        activation.node.jobs.acquire_over()
        activation.push_front([(envelope, True)])

    def discard(self, give_back: Callable[[list[Envelope]], None] | None = None) -> None:
        """Give it up before it opened: it ends without a turn and leaves the store alone; what
        was offered to it since ``admit`` goes to ``give_back`` in order (each holding its job
        permit), and what it carried from the source is dropped (the source has it)."""
        if self._opened.is_set():
            return
        self._discarded = True
        activation = self.activation
        activation.keeps_record = True
        # Nothing more reaches it: a call made from now on meets the id anew.
        activation.state = ActivationState.CLOSING
        if activation.catalog.activations.get(activation.spot_id) is activation:
            del activation.catalog.activations[activation.spot_id]
        activation.front.clear()
        hold, activation.hold = activation.hold, None  # from now on an offer is refused
        held = [] if hold is None else hold.held
        offered = [*held, *(envelope for envelope, _permit in activation.take_queued())]
        if give_back is not None:
            give_back(offered)
        else:
            for envelope in offered:
                activation.node.jobs.release()
                gone = ZLinkError(ErrorKind.UNAVAILABLE, f"the move of {activation.spot_id} ended")
                fail_one(activation.node.dispatcher, envelope, gone)
        self._opened.set()

    @property
    def declared(self) -> SpotType:
        """The Spot's declared type (its handlers)."""
        return self.activation.spot_type

    def context(self, metadata: dict[str, str], deadline: float | None) -> MessageContext:
        """The context of a message relayed to it."""
        return MessageContext(self.activation.spot_id, metadata, None, deadline)

    def admit(self) -> None:
        """Make it the Spot's incarnation on this host, before the commit: what is offered to it
        from now on waits in its hold, which nothing bounds (ERR-5.14), behind what it takes,
        until ``open`` (Rule 5)."""
        activation = self.activation
        activation.hold = Hold()
        activation.catalog.activations[activation.spot_id] = activation

    def commit(self, claim: Claim) -> None:
        """The record names this host: ``claim`` is this incarnation's from now on."""
        activation = self.activation
        activation.claim = claim
        activation.keeps_record = False

    def open(self) -> None:
        """Let it serve, admitting it first if it was not (Rule 5)."""
        activation = self.activation
        if activation.catalog.activations.get(activation.spot_id) is not activation:
            self.admit()
        if (hold := activation.hold) is not None and hold.forward is None and not hold.broken:
            activation.reopen()  # what waited, behind what it took
        self._opened.set()
