"""One live Spot on this host: its gate task, turns and lifecycle (specs/spots.md
SPOT-13, SPOT-14, SPOT-26, SPOT-39..SPOT-48, SPOT-50, SPOT-59, SPOT-65, SPOT-67, SPOT-68;
specs/errors.md ERR-5.9; specs/shutdown.md SHUT-7.3; specs/timers.md TIMER-9, TIMER-14). What
it admits and where that waits (mailbox, front, relocation hold) is its base, spots/ingress.py.

Longer than 400 lines: one state machine (activating, ready, closing, closed) whose rules span
its methods: the gate task hands serving over when a turn yields (Rule 2), closing seals before
anything else runs (Rule 3), the id stays registered until the record is released, and an idle
activation holds no task (Rule 10). Split across modules, each of those invariants would have to
be read in two places.

Theory of operation.

Rule 1: the lifecycle is a start and a close. ``run`` claims authority (Instance Spots; a User
Spot's creator claimed already), makes the instance, runs ``on_create`` (User Spots) and
``on_initialize`` under the gate and records Ready in the store; then it ends, and the Ready
activation holds no task of its own until there is work (Rule 10). ``begin_close`` starts
``_close``, which waits for every task of the activation, runs ``on_closing`` and finally
releases the store record (``run`` does it itself when closing began while it started).
Nothing of the Spot runs before ``on_initialize`` has returned or after ``on_closing`` has
started (SPOT-43).
Rule 2: admission is the mailbox. A message is admitted when it is in the mailbox
(engines/mailbox.py); a gate task takes the gate for each message in mailbox order and runs its
turn itself, giving the gate back when the turn ends (gate.py Rule 2), so a turn costs no task of
its own. Only ``yield_()`` needs another task: a yielding turn gives the gate back while it
waits, and the next messages must still be served meanwhile, so before giving it back the turn
starts a new gate task, and its own task stops serving once the turn ends. One task serves the
mailbox at any time and takes messages in order, so FIFO holds across the hand-over. A
cold-activating Instance Spot takes messages from the moment it is registered, so the activating
message is the first in its mailbox and is handled first, right after ``on_initialize``
(SPOT-26).
Rule 3: closing seals first. ``begin_close`` closes the mailbox's sending side, so nothing new is
admitted; what was admitted still runs (explicit close) or is dropped (host shutdown, whose calls
were already settled), turns still running at the closing deadline are cancelled, and then
``on_closing`` runs under the gate while the Spot is still registered and still holds its store
record (SHUT-7.3). ``on_closing`` is cancelled at the deadline (SPOT-47) and its exceptions are
logged (SPOT-48). The id stays registered to the closing incarnation until its record is
released, so the next incarnation is activated only after that. Closing stops the Spot's timers
before anything else (spots/timers.py Rule 3).
Rule 4: a timer tick is a turn. ``run_tick`` takes the gate like a message turn and runs the tick
handler only while the activation is Ready; the timer tasks are the activation's tasks (Rule 10),
so the closing deadline cuts a running tick like any turn (TIMER-9, TIMER-14).
Rule 6: Actor membership and lanes. A User Spot or the Entry Spot keeps its member Actors in
``members``; Actor control work (``on_actor_join``, ``on_joined_actor``, ``on_leave_actor``,
``on_disconnect_actor``, ``on_create_actor``) runs as a ``control_turn`` under the Spot's gate, so
it never overlaps the Spot's other turns. In a SPOT_WIDE User Spot the member Actors' turns take
that same gate (``shared_gate``); in the Entry Spot and in a PER_ACTOR User Spot each Actor runs
on its own lane and the gate is only the Spot's direct and lifecycle lane, and in a PER_ACTOR Spot
each timer ticks on its own lane too (SPOT-71, TIMER-34). Only turns on a shared gate, those of
a SPOT_WIDE User Spot or an Instance Spot, may ``yield_()`` (gate.py Rule 5).
Rule 7: a lost cold race forwards. Two hosts may activate one Instance Spot id cold at the same
instant; the store's claim picks one. The loser's incarnation never starts: the messages it had
admitted are handed, in admission order, to the winner over the wire (a request's caller still
waits on its own entry and gets the winner's answer), so no caller sees the race (ROUTE-8). The
hand-over itself is routing's (``SpotCatalog.forward``, routing/forward.py); this module only
decides that it happens.
Rule 8: an unknown outcome is settled by reading. A claim or Ready write that raised or was
cancelled may have committed (DEC-17); the activation then releases its record by reading it
and deleting it if this run wrote it (``forget_if_ours``), never by the version it last knew,
so no phantom record is left to make the id unavailable for the rest of the host's run.
Rule 5: idle eviction. With ``instance_idle_timeout`` set, an Instance Spot also runs a watcher
task (Rule 10) that starts an ``IDLE_EVICTED`` close once no turn (message or tick) has run or
held the gate for that long (SPOT-50). The close drains like an explicit one, so a message
admitted at the same instant still runs; the next ``instance_spot()`` message waits for the
close and activates a new incarnation (routing/messaging.py Rule 3). Idleness, closing deadlines
and timers are on the host's application clock (``node.clock``, VCLK-2); the release of the
store record after closing keeps Trio's clock.
Rule 9: a seal stops turns at their boundary (spots/sealing.py). While ``hold`` is set, a message
the gate task took goes back to the front unrun (the seal waits until the gate task rests, so
none is left in its hands), a tick is deferred (engines/timers.py Rule 6),
control turns wait for the seal to end, and the end of the last running turn sets ``hold.quiet``.
Only host shutdown breaks a seal; any other close is refused (SPOT-35). A detached incarnation
(``RELOCATION_OUT``) or one restored but not opened does not release the store record: it is the
other incarnation's (``keeps_record``).
Rule 10: an idle activation holds no task (issue 15: memory per idle activation). The gate
task, the timers' tasks and the idle watch are the activation's tasks (``start_soon``): each runs
in the host's activation nursery in a cancel scope of its own, which the closing deadline cuts
like the turns nursery it replaces, its failure is logged, and ``_close`` waits until none is
left. A gate task is started when the mailbox tells of an arrival and none exists
(``_arrived``); it serves until the mailbox is closed and empty, or until it was parked in the
mailbox through a whole idle period (engines/mailbox.py Rule 5), so a busy Spot keeps one gate
task and an idle one has none. A Spot with running timers keeps their tasks. When a part of the
host crashed, the activations nursery ends before the shutdown closes the Spots: no task can
start (``LocalNode.spawn`` says so), so ``begin_close`` marks the activation ``stranded`` and
the shutdown runs its close in a task of its own (host/tree.py); an Actor the same way.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

from zlink_trio._runtime.declarations.handlers import is_default
from zlink_trio._runtime.declarations.registry import SpotType
from zlink_trio._runtime.declarations.values import SpotClosingContext, SpotCreateResponse
from zlink_trio._runtime.engines.completion import shutting_down
from zlink_trio._runtime.engines.gate import ExecutionGate, Turn, enter_turn, leave_turn
from zlink_trio._runtime.engines.mailbox import Burst, Retired
from zlink_trio._runtime.engines.timers import TickDeferred, TimerTick
from zlink_trio._runtime.node.envelope import Envelope, expired, fail_one, handler_failed, reply
from zlink_trio._runtime.ownership.authority import Claim, Held
from zlink_trio._runtime.spots.boundary import BoundaryWanted, at_boundary, signals
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._runtime.spots.ingress import WAKE, SpotIngress
from zlink_trio._runtime.spots.timers import SpotTimers
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import NodeRid, ObjectGeneration, SpotCloseReason, SpotId, SpotKind, SpotRef
from zlink_trio.options import SpotFactoryMode

__all__ = ["Activation", "ActivationState", "Envelope"]

T = TypeVar("T")

_NOT_CLOSING = SpotClosingContext(SpotCloseReason.HOST_SHUTDOWN, math.inf)

_SET = trio.Event()
"""The event an activation's ``closed`` or ``settled`` is when nobody made its own before it
was set (Rule 10)."""
_SET.set()

_log = logging.getLogger("zlink_trio.runtime.activation")


class ActivationState(enum.Enum):
    """Where an activation is in its life."""

    ACTIVATING = "activating"
    READY = "ready"
    CLOSING = "closing"
    CLOSED = "closed"


class Activation(SpotIngress):
    """One incarnation of a Spot on this host."""

    __slots__ = (
        "_busy",
        "_claim",
        "_closed",
        "_closing",
        "_drained",
        "_drop_admitted",
        "_failure",
        "_gate_running",
        "_idle_since",
        "_idle_watch",
        "_instance",
        "_members",
        "_parked",
        "_scopes",
        "_settled",
        "_signals",
        "_starting",
        "_timers",
        "_unsettled",
        "boundary_wanted",
        "catalog",
        "forward_to",
        "gate",
        "keeps_record",
        "restoring",
        "shared_gate",
        "spot_type",
        "state",
        "stranded",
        "timer_gate",
    )

    def __init__(
        self,
        catalog: SpotCatalog[Activation],
        spot_type: SpotType,
        spot_id: SpotId,
        claim: Claim | None,
    ) -> None:
        node = catalog.node
        super().__init__(node)
        self.catalog = catalog
        self.node = node
        self.spot_type = spot_type
        self.spot_id = spot_id
        self._claim = claim
        self.state = ActivationState.ACTIVATING
        self.gate = ExecutionGate()
        spot_wide = spot_type.mode is SpotFactoryMode.SPOT_WIDE
        shared = spot_type.kind is SpotKind.INSTANCE or (
            spot_type.kind is SpotKind.USER and spot_wide
        )
        self.shared_gate: ExecutionGate | None = self.gate if shared else None
        """The gate member Actors share and turns may yield (Rule 6); ``None`` if lanes."""
        self.timer_gate: ExecutionGate | None = self.gate if spot_wide else None
        """The gate timer ticks take; ``None`` in a PER_ACTOR Spot, whose timers have lanes."""
        self._members: set[Any] | None = None
        self._starting: trio.CancelScope | None = trio.CancelScope()
        """Cuts the start at the closing deadline; dropped once started."""
        self._scopes: list[trio.CancelScope] | None = None
        """One cancel scope per task of the activation (gate, timer, idle watch) started and
        not ended, which the closing deadline cuts (Rules 3, 10); ``None`` when there is none."""
        self._drained: trio.Event | None = None
        self._gate_running = False
        """A gate task exists (serving, or parked in the mailbox: Rule 10)."""
        self._closing = _NOT_CLOSING
        self._drop_admitted = False
        self._instance: Any = None
        self._failure: ZLinkError | None = None
        self._unsettled = False
        """A write of this incarnation's record had an unknown outcome (Rule 8)."""
        self.forward_to: NodeRid | None = None
        """Where what it admitted goes when it ends unstarted: the winner of a lost cold race
        (Rule 7), or the source of a move given up (spots/sealing.py ``discard``)."""
        self._closed: trio.Event | None = None
        self._settled: trio.Event | None = None
        self._timers: SpotTimers | None = None
        self._busy = 0
        self._idle_since = math.inf
        self._idle_watch: trio.CancelScope | None = None
        self._parked = False
        self.keeps_record = False
        """The store record is another incarnation's: ``_finish`` leaves it (Rule 9)."""
        self.stranded = False
        """Closing began after the activations nursery ended: the shutdown closes it."""
        self.restoring: Callable[[Any], Awaitable[None]] | None = None
        """Set for an incarnation restored from a snapshot (sealing.py): runs instead of the
        lifecycle callbacks, which ran for this generation already."""
        self._signals = signals(spot_type)
        """Its turns may signal a relocation boundary (spots/boundary.py Rule 1)."""
        self.boundary_wanted: BoundaryWanted | None = None
        """A move waiting for its next signalled boundary (spots/boundary.py Rule 2)."""
        # Known to shutdown from the moment it exists, even before its task first runs.
        catalog.live.add(self)

    @property
    def members(self) -> set[Any]:
        """The Actor activations that are members of this Spot (Rule 6); made when first used,
        like the events and timers below (Rule 10)."""
        members = self._members
        if members is None:
            members = self._members = set()
        return members

    @property
    def closed(self) -> trio.Event:
        """Set once the activation has closed for good."""
        closed = self._closed
        if closed is None:
            closed = self._closed = trio.Event()
        return closed

    @property
    def settled(self) -> trio.Event:
        """Set once the activation is Ready or has closed (a relocation waits for it)."""
        settled = self._settled
        if settled is None:
            settled = self._settled = trio.Event()
        return settled

    @property
    def timers(self) -> SpotTimers:
        """The Spot's timers (spots/timers.py)."""
        timers = self._timers
        if timers is None:
            spot_type, spot_id = self.spot_type, self.spot_id
            timers = self._timers = SpotTimers(spot_type, spot_id, self.run_tick, self.node.clock)
            if self.state is ActivationState.READY:
                timers.attach(self)
            elif self.state is not ActivationState.ACTIVATING:
                timers.stop_all()  # closing stopped every timer (spots/timers.py Rule 3)
        return timers

    @property
    def kind(self) -> SpotKind:
        """The Spot's kind."""
        return self.spot_type.kind

    @property
    def claim(self) -> Claim | None:
        """The authority this activation holds in the store (``None`` before its claim)."""
        return self._claim

    @claim.setter
    def claim(self, claim: Claim) -> None:
        self._claim = claim

    @property
    def generation(self) -> ObjectGeneration:
        """The object generation; known once authority is claimed."""
        if self._claim is None:
            raise ZLinkError(ErrorKind.INVALID_OPERATION, f"{self.spot_id} is still activating")
        return self._claim.record.generation

    @property
    def ref(self) -> SpotRef:
        """The snapshot naming this incarnation."""
        return SpotRef(self.spot_id, self.generation, self.node.mesh, self.node.node_rid)

    @property
    def accepting(self) -> bool:
        """Whether the mailbox still admits messages."""
        return self.state in (ActivationState.ACTIVATING, ActivationState.READY)

    def traced_name(self) -> str:
        """``Spot <id>#<generation>`` for a trace line (node.py), ``#?`` while unclaimed."""
        generation = "?" if self._claim is None else self._claim.record.generation.value
        return f"Spot {self.spot_id}#{generation}"

    async def control_turn(self, callback: Callable[[Any], Awaitable[T]]) -> T:
        """Run ``callback(instance)`` as a turn of this Spot's direct and lifecycle lane: Actor
        control work (Rule 6). Raises ``NOT_FOUND`` once the Spot has no instance any more."""
        await self.gate.acquire()
        while (hold := self.hold) is not None and hold.forward is None:
            self.gate.release()  # sealed: wait for the seal to end (Rule 9)
            await hold.ended.wait()
            await self.gate.acquire()
        token = enter_turn(Turn(self.shared_gate, spot=self))
        self._turn_started()
        try:
            await self.node.fence.wait_serving()
            gone = self._instance is None or self.state is ActivationState.CLOSED
            if gone or self.hold is not None:
                raise ZLinkError(ErrorKind.NOT_FOUND, f"Spot {self.spot_id} has closed")
            return await callback(self._instance)
        finally:
            self._turn_ended()
            leave_turn(token)
            self.gate.release()

    @property
    def turns_running(self) -> int:
        """Message, tick and control turns started and not ended, yielded ones included."""
        return self._busy

    @property
    def gate_task_resting(self) -> bool:
        """The gate task has no message in hand: it waits in the mailbox, or for a seal to end
        (trio hands a received message over before the receiver runs: Rule 9)."""
        return self._parked or not self._gate_running or self.mailbox.server_waiting

    @property
    def closing_deadline(self) -> float:
        """When closing cuts this incarnation's turns, on the host's application clock;
        ``math.inf`` while it is not closing."""
        return self._closing.deadline

    @property
    def busy(self) -> bool:
        """Whether a turn of this Spot runs now (message, tick, lifecycle or control turn)."""
        return self._busy > 0 or self.gate.held

    def begin_close(self, reason: SpotCloseReason, deadline: float, *, drain: bool) -> bool:
        """Seal the mailbox and start closing (Rule 3); ``False`` if closing had begun."""
        if not self.accepting:
            return False
        if (hold := self.hold) is not None and hold.forward is None:
            if drain:  # only host shutdown breaks a seal (Rule 9)
                raise ZLinkError(ErrorKind.UNAVAILABLE, f"{self.spot_id} is sealed to move")
            hold.broken = True
            hold.quiet.set()
            self.reopen()
        starting = self.state is ActivationState.ACTIVATING
        self.state = ActivationState.CLOSING
        self._closing = SpotClosingContext(reason, deadline)
        self._drop_admitted = not drain
        self.mailbox.close()
        if self._timers is not None:
            self._timers.stop_all()
        # Only what can be running is touched: each change to a cancel scope costs, and a host
        # closes thousands of activations at once (SHUT-4.17).
        if self._idle_watch is not None:
            self._idle_watch.cancel()  # only Instance Spots watch for idleness
        # Lifecycle work still running at the closing deadline is cancelled (SPOT-47).
        clock = self.node.clock
        for scope in self._scopes or ():
            clock.set_deadline(scope, deadline)
        if starting:
            assert self._starting is not None
            clock.set_deadline(self._starting, deadline)  # ``run`` closes it once started
        elif not self.node.spawn(self._close):
            self.stranded = True  # the shutdown runs ``close_stranded`` itself (Rule 10)
        return True

    async def run(
        self,
        request: object | None = None,
        *,
        task_status: trio.TaskStatus[SpotCreateResponse] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        """The start of the activation (Rule 1), and its close if closing began meanwhile; once
        Ready it holds no task until there is work (Rule 10). Before ``task_status.started`` a
        failure propagates to whoever started it; afterwards it is logged."""
        finish = True
        try:
            try:
                starting = self._starting
                assert starting is not None
                with starting:
                    response = await self._activate(request)
                if starting.cancelled_caught:
                    raise shutting_down() if not self.node.admitting else _gone(self.spot_id)
            except ZLinkError as error:
                self._failure = error
                raise
            except Exception as error:
                self._failure = _internal(f"activation raised {type(error).__name__}")
                raise self._failure from None
            if not response.accepted:
                task_status.started(response)
                return
            self._starting = None
            if self.state is ActivationState.ACTIVATING:
                self.state = ActivationState.READY
            self._settled = _fired(self._settled)
            self.catalog.activations[self.spot_id] = self
            task_status.started(response)
            self._start_serving()
            finish = False
            if self.state is ActivationState.CLOSING:
                await self._close()  # closing began while it started
        finally:
            if finish:
                with trio.CancelScope(shield=True) as finishing:
                    await self._finish(finishing)

    async def run_cold(self) -> None:
        """``run`` for a cold-activated Instance Spot, whose activation nobody awaits: a failure
        is logged and given to the requests waiting in its mailbox."""
        try:
            await self.run()
        except ZLinkError as error:
            _log.warning("cold activation of %s failed: %s", self.spot_id, error)

    async def _activate(self, request: object | None) -> SpotCreateResponse:
        node = self.node
        if self._claim is None:
            try:
                claimed = await node.authority.claim(self.spot_id, self.kind, self.spot_type.name)
            except BaseException:
                self._unsettled = True  # the claim may have committed (Rule 8)
                raise
            if isinstance(claimed, Held):
                record = claimed.record
                if (
                    self.kind is SpotKind.INSTANCE
                    and self.catalog.forward is not None
                    and record.kind is SpotKind.INSTANCE
                    and record.type_name == self.spot_type.name
                    and record.owner != node.node_rid
                ):
                    self.forward_to = record.owner
                raise _held_error(self.spot_id, claimed, self.spot_type)
            self._claim = claimed
        cls: Any = self.spot_type.cls
        response = SpotCreateResponse.accept()
        await self.gate.acquire()
        token = enter_turn(Turn(self.shared_gate, spot=self))  # on_create, on_initialize
        try:
            await node.fence.wait_serving()
            if not node.admitting:
                # Sealed while the claim or the gate was awaited: nothing of the Spot runs after
                # the seal, not even its constructor (SHUT-4.6); _finish releases the claim.
                raise shutting_down()
            try:
                instance = cls.__new__(cls)
                instance._zl_context = self.catalog.make_context(self)
                instance.__init__()
            except Exception as error:
                raise _internal(f"{cls.__qualname__}() raised {type(error).__name__}") from None
            self._instance = instance
            if self.restoring is not None:
                await self.restoring(instance)
                return response  # Ready already: the record is the moved incarnation's
            if self.kind is SpotKind.USER:
                try:
                    response = await instance.on_create(request)
                except Exception as error:
                    raise _internal(f"on_create raised {type(error).__name__}") from None
                if not isinstance(response, SpotCreateResponse):
                    raise _internal("on_create must return a SpotCreateResponse")
                if not response.accepted:
                    return response
            try:
                await instance.on_initialize()
            except Exception as error:
                raise _internal(f"on_initialize raised {type(error).__name__}") from None
        finally:
            leave_turn(token)
            self.gate.release()
        try:
            self._claim = await node.authority.mark_ready(self._claim)
        except BaseException:
            self._unsettled = True  # the Ready record may have committed (Rule 8)
            raise
        return response

    def _start_serving(self) -> None:
        """Ready: timers and the idle watch may run, and a gate task serves what is queued
        (Rule 10)."""
        self._idle_since = self.node.clock.now()
        if self._timers is not None:
            self._timers.attach(self)
        idle_timeout = self.node.config.instance_idle_timeout
        if self.kind is SpotKind.INSTANCE and idle_timeout is not None:
            self._idle_watch = trio.CancelScope()
            self.start_soon(self._evict_when_idle, idle_timeout)
        if self.queued:
            self._arrived()

    def _arrived(self) -> None:
        """The mailbox's ``on_arrival``: an item no parked gate task will take (Rule 10)."""
        if self._gate_running or self.state is ActivationState.ACTIVATING:
            return  # the gate task will find it, or ``run`` starts one once Ready
        self._gate_running = self.start_soon(self._serve_mailbox)

    def start_soon(self, function: Callable[..., Awaitable[None]], *args: Any) -> bool:
        """Run ``function(*args)`` as a task of this activation: counted, in a cancel scope of
        its own that the closing deadline cuts, its failure logged (Rule 10). ``False`` when
        the host is ending after a crash and no task can start."""
        scope = trio.CancelScope()
        if self.state is ActivationState.CLOSING or self.state is ActivationState.CLOSED:
            self.node.clock.set_deadline(scope, self._closing.deadline)
        if not self.node.spawn(self._task, scope, function, args):
            return False
        scopes = self._scopes
        if scopes is None:
            scopes = self._scopes = []
        scopes.append(scope)
        return True

    async def close_stranded(self) -> None:
        """The close that ``begin_close`` could not start (``stranded``), run by the shutdown
        of a host whose activations nursery has ended."""
        self.stranded = False
        await self._close()

    async def _task(
        self,
        scope: trio.CancelScope,
        function: Callable[..., Awaitable[None]],
        args: tuple[Any, ...],
    ) -> None:
        try:
            with scope:
                await function(*args)
        except Exception:
            _log.exception("Spot %s failed while serving", self.spot_id)
        finally:
            scopes = self._scopes
            assert scopes is not None  # holds this task's scope
            scopes.remove(scope)
            if not scopes:
                self._scopes = None
                if self._drained is not None:
                    self._drained.set()

    async def _close(self) -> None:
        """Closing after Ready (Rule 3): what was admitted drains or is dropped by a gate task,
        every task of the activation ends, then ``on_closing`` runs and the record goes."""
        try:
            if self.queued:
                self._arrived()  # a gate task drains or drops what was admitted
            while self._scopes:
                self._drained = trio.Event()
                await self._drained.wait()
            await self._run_on_closing()
        except Exception:
            _log.exception("Spot %s failed while closing", self.spot_id)
        finally:
            with trio.CancelScope(shield=True) as finishing:
                await self._finish(finishing)

    async def _serve_mailbox(self) -> None:
        """A gate task: run the turns of admitted messages in order until the mailbox is closed
        and empty or has been idle a whole period, or until a turn's ``yield_()`` hands serving
        to a new gate task (Rules 2 and 10)."""
        handed_over = False

        def hand_over() -> None:
            nonlocal handed_over
            handed_over = True
            self.start_soon(self._serve_mailbox)

        front = self.front
        try:
            permits = self.node.jobs
            burst = Burst(self.mailbox)  # one wake-up serves what is queued (mailbox.py Rule 4)
            while True:
                if front:  # served before the mailbox (ingress.py Rule 1)
                    envelope, permit = front.popleft()
                    await trio.lowlevel.checkpoint()
                    burst.checkpointed()
                else:
                    try:
                        envelope = await burst.take()
                    except (trio.EndOfChannel, Retired):
                        return
                    if envelope is WAKE:
                        continue
                    permit = True
                # A free gate is taken without a checkpoint.
                if not self._drop_admitted and not self.gate.try_acquire():
                    try:
                        await self.gate.acquire()
                    except trio.Cancelled:
                        front.appendleft((envelope, permit))  # failed with the rest at _finish
                        raise
                if self._drop_admitted or (hold := self.hold) is None:
                    if permit:  # the job leaves the queue: about to start or dropped (mailbox.py)
                        permits.release()
                else:  # sealed while it waited: back in front, unrun (Rule 9)
                    self.gate.release()
                    front.appendleft((envelope, permit))
                    self._parked = True
                    try:
                        await hold.ended.wait()
                    finally:
                        self._parked = False
                    continue
                if self._drop_admitted:
                    self._fail_one(envelope, _gone(self.spot_id))
                    continue
                await self._turn(envelope, hand_over)
                if handed_over:
                    return
        finally:
            if not handed_over:
                self._gate_running = False
                if not front:
                    self._front = None  # an idle activation keeps no deque (Rule 10)

    async def _evict_when_idle(self, idle_timeout: float) -> None:
        clock = self.node.clock
        assert self._idle_watch is not None
        with self._idle_watch:
            while self.accepting:
                now = clock.now()
                if self._busy or self.gate.held or self.hold is not None:
                    # A turn is running; its end moves _idle_since, so look again one timeout on.
                    await clock.sleep_until(now + idle_timeout)
                elif now >= self._idle_since + idle_timeout:
                    deadline = now + self.node.config.closing_timeout
                    self.begin_close(SpotCloseReason.IDLE_EVICTED, deadline, drain=True)
                    return
                else:
                    await clock.sleep_until(self._idle_since + idle_timeout)

    def _turn_started(self) -> None:
        self._busy += 1

    def _turn_ended(self) -> None:
        self._busy -= 1
        if self._idle_watch is not None:  # only the idle watch reads it (Rule 5)
            self._idle_since = self.node.clock.now()
        if self.hold is not None and not self._busy:
            self.hold.quiet.set()

    async def run_tick(self, method: str, tick: TimerTick) -> None:
        """The engine's ``on_tick``: run one tick as a turn under the gate, or on the timer's own
        lane in a PER_ACTOR Spot (Rules 4 and 6)."""
        gate = self.timer_gate
        if gate is not None:
            await gate.acquire()
            if self.hold is not None:  # sealed: the tick stays pending (Rule 9)
                gate.release()
                raise TickDeferred
        turn = Turn(self.shared_gate)
        if self._signals:
            turn.boundary = False
        token = enter_turn(turn)
        self._turn_started()
        if self.node.trace is not None:
            self.node.trace(f"tick {method} of {self.traced_name()} starts")
        try:
            # A tick that got the gate after closing began does not start (TIMER-14, SPOT-43).
            await self.node.fence.wait_serving()
            if self.state is ActivationState.READY:
                await getattr(self._instance, method)(tick)
                if turn.boundary:
                    await at_boundary(self)
        finally:
            if self.node.trace is not None:
                self.node.trace(f"tick {method} of {self.traced_name()} ends")
            self._turn_ended()
            leave_turn(token)
            if gate is not None:
                gate.release()

    async def _turn(self, envelope: Envelope, on_yield: Callable[[], None]) -> None:
        """One message turn; the caller holds the gate, and the turn gives it back at its end."""
        handler = envelope.handler
        turn = Turn(self.shared_gate, on_yield, spot=self)
        if self._signals:
            turn.boundary = False
        token = enter_turn(turn)
        self._turn_started()
        if self.node.trace is not None:
            self.node.trace(f"turn {handler.name} of {self.traced_name()} starts")
        try:
            method = getattr(self._instance, handler.name)
            arguments = (
                (envelope.message, envelope.context)
                if handler.takes_context
                else (envelope.message,)
            )
            try:
                fence = self.node.fence
                if not fence.serving:  # a turn starts only while the lease holds (MESH-21)
                    await fence.wait_serving()
                late = expired(envelope, self.node.clock)
                if late is not None:  # nobody waits for it any more (envelope.py Rule 3)
                    self._fail_one(envelope, late)
                    return
                result = await method(*arguments)
            except Exception as error:
                if envelope.reply_route is None:
                    _log.exception("packet handler %s of %s raised", handler.name, self.spot_id)
                    return
                _log.exception("request handler %s of %s raised", handler.name, self.spot_id)
                result = handler_failed(handler, f"Spot {self.spot_id}", error)
            except trio.Cancelled:
                self._fail_one(envelope, _gone(self.spot_id))
                raise
            if envelope.reply_route is not None:
                reply(
                    self.node.dispatcher,
                    envelope.reply_route,
                    handler,
                    result,
                    f"Spot {self.spot_id}",
                )
            if turn.boundary:
                await at_boundary(self)
        finally:
            if self.node.trace is not None:
                self.node.trace(f"turn {handler.name} of {self.traced_name()} ends")
            self._turn_ended()
            leave_turn(token)
            self.gate.release()

    async def _run_on_closing(self) -> None:
        if is_default(type(self._instance).on_closing) and self.gate.try_acquire():
            # Nothing to run and nobody in a turn: the turn would only take and give back the
            # gate (SHUT-4.17). A busy gate is waited for below, as the turn would wait.
            self.gate.release()
            return
        await self.gate.acquire()
        token = enter_turn(Turn(self.shared_gate, spot=self))
        try:
            with self.node.clock.scope_until(self._closing.deadline):
                await self.node.fence.wait_serving()
                await self._instance.on_closing(self._closing)
        except Exception:
            _log.exception("on_closing of %s raised; closing goes on", self.spot_id)
        finally:
            leave_turn(token)
            self.gate.release()

    async def _finish(self, finishing: trio.CancelScope) -> None:
        """Close for good; runs shielded in ``finishing``, whose deadline bounds the release."""
        self.state = ActivationState.CLOSED
        self.catalog.live.discard(self)
        self.mailbox.close()
        forward = self.catalog.forward
        if self.forward_to is not None and forward is not None:
            queued = []
            for envelope, permit in self.take_queued():  # each entry says if it holds one
                if permit:
                    self.node.jobs.release()
                queued.append(envelope)
            self.node.activation_nursery.start_soon(forward, self, self.forward_to, queued)
        elif not self.keeps_record:  # else what it carries is still the other incarnation's
            self._fail_admitted(self._failure or _gone(self.spot_id))
        try:
            # The shield's own deadline bounds the release: one cancel scope fewer per
            # activation than a nested move_on_after (SHUT-4.17).
            finishing.deadline = trio.current_time() + self.node.config.store_release_timeout
            await self._release_record()
        except ZLinkError as error:
            _log.warning("could not release the record of %s: %s", self.spot_id, error)
        finally:
            # Only now does the id leave the table: until the record is released, a message for
            # a new incarnation finds this closing one and waits for ``closed`` instead of
            # claiming an id the store still shows as held (Rule 3).
            if self.catalog.activations.get(self.spot_id) is self:
                del self.catalog.activations[self.spot_id]
            self._instance = None  # the instance does not outlive its activation (SPOT-61)
            self._closed = _fired(self._closed)
            self._settled = _fired(self._settled)

    async def _release_record(self) -> None:
        """Delete this incarnation's store record (Rule 8): by the version it holds, or, after a
        write whose outcome is unknown, by reading the record and deleting it if this run wrote
        it."""
        authority = self.node.authority
        if self.keeps_record:
            return  # another incarnation's record (Rule 9)
        if self._claim is not None and not self._unsettled:
            if await authority.release(self._claim):
                return
        elif self._claim is None and not self._unsettled:
            return  # never claimed: nothing of ours can be in the store
        await authority.forget_if_ours(self.spot_id)

    def _fail_one(self, envelope: Envelope, error: ZLinkError) -> None:
        fail_one(self.node.dispatcher, envelope, error)


def _fired(event: trio.Event | None) -> trio.Event:
    """``event`` set, or the shared set one if nobody made it yet (Rule 10)."""
    if event is None:
        return _SET
    event.set()
    return event


def _internal(message: str) -> ZLinkError:
    return ZLinkError(ErrorKind.INTERNAL_FAILURE, message)


def _gone(spot_id: SpotId) -> ZLinkError:
    return ZLinkError(ErrorKind.UNAVAILABLE, f"Spot {spot_id} closed before handling the message")


def _held_error(spot_id: SpotId, held: Held, wanted: SpotType) -> ZLinkError:
    record = held.record
    if record.kind is not wanted.kind or record.type_name != wanted.name:
        return ZLinkError(
            ErrorKind.TYPE_MISMATCH,
            f"{spot_id} is held by a {record.kind.name} Spot of type {record.type_name}",
        )
    return ZLinkError(ErrorKind.UNAVAILABLE, f"{spot_id} is held by node {record.owner}")
