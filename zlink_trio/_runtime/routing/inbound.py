"""Work that peers send to this host: one-way messages and requests, delivered here only
(specs/global.md; specs/completion.md CMP-4.7, CMP-5.12; specs/errors.md ERR-5.11).

Rule 1: inbound work is delivered locally only. A message that arrives for a target this host
does not hold is not forwarded: a request gets ``NOT_FOUND`` (a stale route on the caller's side),
a send is dropped and logged. It enters ``Messaging`` with ``local=True``, so it never goes back
out to the wire. A request's handler sees the caller's deadline as ``ctx.deadline``.
Rule 2: a request to a Spot ready here, with a job permit free (or sealed: local.py Rule 5), is
admitted by the transport's reader itself: its entry completes into a callback (completion.py
Rule 5) sending the Reply or ErrorReply from the completion lane: no task, no cancel scope. Its
budget counts from arrival; a later result is not sent, as the caller's own transport ended the
call with ``DEADLINE_EXCEEDED`` by then. Anything else (an Actor target, no permit, a closing
incarnation to wait for) runs as a local request in a task in the nursery ``run`` keeps open.
Rule 4: a ``zlink.CloseSpot`` request is the framework's, not the application's: it closes the
named incarnation here exactly as a local ``close(ref)`` would, in a task of its own, and is
answered with what that returned (messaging.py Rule 7; SPOT-92); so are Flush and Leaving.
Rule 5: a send from a peer never makes the reader wait for its target: what cannot be admitted
at once waits in that target's backlog (``backlog.py``, OVL-1), fed by a task of its own in the
nursery ``run`` keeps open; only when every backlog together is full does the reader wait
(OVL-3); sends to Actors the same (OVL-5).
Rule 3: a full queue here is the owner's resource for the caller, so a caller on another host
sees ``UNAVAILABLE``, never ``CAPACITY_EXCEEDED`` (ERR-5.11); and this host's shutdown is, for
a caller whose own host runs on, an owner that went away: ``UNAVAILABLE``, never
``SHUTTING_DOWN`` (ROUTE-10).
Rule 6: a reply is encoded within this host's message limit and its caller's (limits.py Rule
2); one over either answers the request with the ``PROTOCOL_ERROR`` naming the limit instead
(MSG-2, MSG-6), one that cannot be encoded with ``INTERNAL_FAILURE`` (MSG-5).
Rule 8: work for a unit that moved away from here (follow.py) is relayed to its new owner by
the reader itself, a send once the transport has it and a request once it is on its way (its
answer awaited in a task), so one sender's messages reach the new owner in the order they came
(RELOC-68); each goes as it came, and a relayed request's Reply comes back here as it came,
readdressed to its caller's reply route (RELOC-29).
Rule 7: the requests of a unit moving here (``zlink.Relocate*``) are the framework's, and what
the source relays to a unit committed here but not open yet goes in front of it: both are
``moves_in.py``'s, from the reader itself where order matters.
"""

from __future__ import annotations

import logging
from functools import partial

import trio

from zlink_trio._integration.transport import PeerRun
from zlink_trio._runtime.declarations.handlers import HandlerKind
from zlink_trio._runtime.declarations.system import (
    CLOSE_SPOT,
    FLUSH,
    LEAVING,
    RELOCATE,
    CloseSpot,
    SpotClosed,
)
from zlink_trio._runtime.declarations.values import MessageContext
from zlink_trio._runtime.engines.completion import Outcome
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.routing.arrivals import Arrivals
from zlink_trio._runtime.routing.backlog import Backlogs
from zlink_trio._runtime.routing.credit import PAUSE, RESUME
from zlink_trio._runtime.routing.follow import relay_followed
from zlink_trio._runtime.routing.leaving import answer_leaving
from zlink_trio._runtime.routing.local import (
    InstanceChoice,
    permit_now,
    reply_failure,
    resolve_spot,
)
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio._runtime.routing.moves_in import MovesIn
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.routing.reroute import answer_flush
from zlink_trio._runtime.spots import creation
from zlink_trio._wire import ErrorReply, Reply, Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, NodeRid, ObjectGeneration, SpotId, SpotRef

__all__ = ["Inbound"]

_log = logging.getLogger("zlink_trio.runtime.remote")

# Compared as plain strings: every message from a peer passes these checks (the wire's hot path).
_CLOSE_SPOT = CLOSE_SPOT.value
_FLUSH = FLUSH.value
_LEAVING = LEAVING.value
_FRAMEWORK = RELOCATE | {_CLOSE_SPOT, _FLUSH, _LEAVING}
"""The framework's requests: never relayed for a unit that moved away."""
_CREDIT = frozenset({PAUSE.value, RESUME.value})
_ONE_WAY_WORDS = _CREDIT | RELOCATE


class Inbound:
    """This host's side of work from peers; ``on_message`` is the transport's reader callback."""

    def __init__(self, messaging: Messaging, remote: Remote) -> None:
        self._messaging = messaging
        self._node = messaging.node
        self._remote = remote
        self._nursery: trio.Nursery | None = None
        self.backlogs = Backlogs(messaging, signal=self._signal)
        """The per-target backlogs of sends from peers (backlog.py)."""
        self.arrivals = Arrivals(messaging.spots, messaging.actors, remote, messaging)
        """The Spots and Actors moving to this host (arrivals.py)."""
        self._moves = MovesIn(self.arrivals, self._node, self._reply, self._answer_outcome)

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep the nursery of inbound requests open until cancelled (Rule 2)."""
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()
        finally:
            self._nursery = None

    async def on_message(self, origin: PeerRun, message: Send | Request) -> None:
        """The transport's application reader hands each message here (Rule 1)."""
        if type(message) is Send and (name := message.message_type.value) in _ONE_WAY_WORDS:
            if name in _CREDIT:
                credits = self._remote.credits
                change = credits.pause if message.message_type == PAUSE else credits.resume
                change(origin.node_rid, message.target)
            elif not (self.arrivals.under_way and self._moves.take(origin, message)):
                # A move's one-way word (its commit) with no move of the unit under way here.
                word, target = message.message_type, message.target
                _log.error(
                    "%s for %s from %s: no move of it is under way here", word, target, origin
                )
            return
        if self.arrivals.under_way and self._moves.take(origin, message):
            return
        moved = self._messaging.moved  # relay_followed counts a relayed call (RELOC-79)
        followed = moved.followed(message.target, self._remote, count=False)
        if followed is not None and message.message_type.value not in _FRAMEWORK:
            reply = partial(self._reply, origin)
            await relay_followed(self._node, moved, followed, message, reply, self._nursery)
            return
        if type(message) is Send:
            await self._inbound_send(origin, message)
            return
        assert isinstance(message, Request)
        nursery = self._nursery
        if nursery is None:
            self._answer(origin, message, ZLinkError(ErrorKind.SHUTTING_DOWN, "not serving"))
            return
        # The budget counts from arrival, not from a task's start, on the app clock (VCLK-2).
        arrived = self._node.clock.now()
        if message.message_type.value == _CLOSE_SPOT:
            nursery.start_soon(self._inbound_close, origin, message)
            return
        if message.message_type.value == _FLUSH:  # after the sender's earlier messages
            nursery.start_soon(self._inbound_flush, origin, message, arrived)
            return
        if message.message_type.value == _LEAVING:  # the peer stops (leaving.py Rule 2)
            nursery.start_soon(answer_leaving, self._remote, origin, message, arrived, self._reply)
            return
        if message.message_type.value in RELOCATE:
            self._moves.answer(origin, message, nursery)
            return
        target = message.target
        if waiting := self.backlogs.holds(target):
            # Full, with sends that came first still waiting: refused, never ahead of them.
            full = f"{target} is full: {waiting} messages from peers wait for it"
            self._answer(origin, message, ZLinkError(ErrorKind.UNAVAILABLE, full))
            return
        if not self._admit_request(origin, message, arrived):
            nursery.start_soon(self._inbound_request, origin, message, arrived)

    def _admit_request(self, origin: PeerRun, message: Request, arrived: float) -> bool:
        """Admit a request to a Spot ready here at once, its reply sent from the completion
        lane (Rule 2); or answer its error now. ``False`` when it has to wait (no free job
        permit, a closing incarnation) or targets an Actor: the caller runs it in a task.

        The same steps, in the same order, as ``Messaging.request`` for a local target."""
        target = message.target
        if type(target) is not SpotId:
            return False
        node = self._node
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            node.check_admitting()
            jobs = node.jobs
            if not permit_now(node, self._messaging.spots.activations, target):
                return False
            try:
                instance = _instance_of(message)
                found = resolve_spot(
                    self._messaging.spots,
                    target,
                    type(decoded),
                    HandlerKind.REQUEST,
                    instance,
                    True,
                )
                if not isinstance(found, tuple):
                    jobs.release()
                    return False
                activation, handler = found
                deadline = arrived + max(message.budget_us / 1_000_000, 1e-6)
                dispatcher = node.dispatcher
                entry = dispatcher.register(
                    partial(self._answer_outcome, origin, message, deadline)
                )
                try:
                    activation.offer(
                        Envelope(
                            decoded,
                            handler,
                            MessageContext(target, dict(message.metadata), None, deadline),
                            entry.route,
                            message.operation_id,
                        )
                    )
                except BaseException:
                    dispatcher.pop(entry.route)
                    raise
            except BaseException:
                jobs.release()
                raise
        except ZLinkError as error:
            self._answer(origin, message, _for_caller(error))
        return True

    def _answer_outcome(
        self, origin: PeerRun, request: Request, deadline: float, outcome: Outcome
    ) -> None:
        """The completion of an admitted inbound request, on the completion lane (Rule 2)."""
        if self._node.clock.now() >= deadline:
            # The caller's transport ended the call with DEADLINE_EXCEEDED by now.
            _log.debug("a reply to %s after its deadline was not sent", origin.node_rid)
            return
        error = outcome.error
        self._answer(origin, request, outcome.value if error is None else _for_caller(error))

    async def _inbound_send(self, origin: PeerRun, message: Send) -> None:
        node = self._node
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            metadata = dict(message.metadata)
            target = message.target
            instance = _instance_of(message)
            backlogs, nursery = self.backlogs, self._nursery
            if backlogs.try_admit(target, decoded, metadata, instance):
                return
            if nursery is None:
                raise ZLinkError(ErrorKind.SHUTTING_DOWN, "not serving peers any more")
            # Never wait here for one target: the others keep being served (Rule 5).
            await backlogs.park(nursery, origin.node_rid, target, decoded, metadata, instance)
        except ZLinkError as error:
            # Its sender saw it admitted: a loss worth a warning, unless this host is ending.
            level = logging.INFO if error.kind is ErrorKind.SHUTTING_DOWN else logging.WARNING
            _log.log(
                level,
                "a send from %s to %s was not admitted: %s",
                origin.node_rid,
                message.target,
                error,
            )

    def _signal(self, peer: NodeRid, spot_id: SpotId | ActorId, pause: bool) -> None:
        """Tell ``peer`` to pause or resume its sends to ``spot_id`` (backlog.py Rule 5)."""
        nursery, mesh = self._nursery, self._remote.mesh
        if nursery is None or mesh is None:
            return
        control = Send(spot_id, PAUSE if pause else RESUME, b"")

        async def tell() -> None:
            try:
                await mesh.send(peer, control)
            except ZLinkError as error:  # the peer is gone: its pauses went with it
                _log.debug("could not tell %s about %s: %s", peer, spot_id, error)

        nursery.start_soon(tell)

    async def _inbound_close(self, origin: PeerRun, message: Request) -> None:
        """A peer's ``close(ref)`` of a User Spot of this host (Rule 4)."""
        node = self._node
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            target = message.target
            if not isinstance(decoded, CloseSpot) or not isinstance(target, SpotId):
                raise ZLinkError(ErrorKind.PROTOCOL_ERROR, "a zlink.CloseSpot names a Spot id")
            ref = SpotRef(target, ObjectGeneration(decoded.generation), node.mesh, node.node_rid)
            closed = await creation.close(self._messaging.spots, ref)
        except ZLinkError as error:
            self._answer(origin, message, _for_caller(error))
            return
        self._answer(origin, message, SpotClosed(closed))

    async def _inbound_flush(self, origin: PeerRun, message: Request, arrived: float) -> None:
        """A sender's ``zlink.Flush`` (reroute.py Rule 2), within its budget."""
        messaging, target = self._messaging, message.target
        answer: object = ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"flushing {target} timed out")
        try:
            with self._node.clock.scope_until(arrived + message.budget_us / 1_000_000):
                await self.backlogs.wait_drained(target)
                answer = await answer_flush(self._node, self._remote, messaging.moved, target)
        except ZLinkError as error:
            answer = error
        self._answer(origin, message, answer)

    async def _inbound_request(self, origin: PeerRun, message: Request, arrived: float) -> None:
        messaging = self._messaging
        node = self._node
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            # The caller checks the reply's class; here any declared message passes through.
            handler_reply = object
            metadata = dict(message.metadata)
            spent = node.clock.now() - arrived
            budget = max(message.budget_us / 1_000_000 - spent, 1e-6)
            if isinstance(message.target, ActorId):
                result = await messaging.request_actor(
                    message.target,
                    decoded,
                    handler_reply,
                    metadata,
                    budget,
                    local=True,
                    operation_id=message.operation_id,
                )
            else:
                instance = _instance_of(message)
                result = await messaging.request(
                    message.target,
                    decoded,
                    handler_reply,
                    metadata,
                    instance,
                    None,
                    budget,
                    local=True,
                    operation_id=message.operation_id,
                )
        except ZLinkError as error:
            self._answer(origin, message, _for_caller(error))
            return
        self._answer(origin, message, result)

    def _reply(self, origin: PeerRun, request: Request, result: object) -> None:
        """``_answer``, an error as the remote caller sees it (Rule 3)."""
        self._answer(
            origin, request, _for_caller(result) if isinstance(result, ZLinkError) else result
        )

    def _answer(self, origin: PeerRun, request: Request, result: object) -> None:
        mesh = self._remote.mesh
        if mesh is None:
            return
        answer: Reply | ErrorReply
        if isinstance(result, ZLinkError):
            failure = result
        else:
            try:
                if type(result) is Reply:  # a relayed answer (follow.py): its bytes as they came
                    name, payload = result.reply_type, result.payload
                    self._remote.limits.check(origin.node_rid, name, payload)
                else:
                    # Within this host's limit and the caller's: a larger reply would be dropped
                    # by the caller's transport and its request would wait out its timeout
                    # (MSG-6).
                    name, payload = self._remote.limits.encode(result, origin.node_rid)
            except (TypeError, ValueError, ZLinkError) as error:
                failure = reply_failure(error)  # as for a caller on this host (local.py)
            else:
                answer = Reply(
                    request.reply_route, request.operation_id, origin.generation, name, payload
                )
                failure = None
        if failure is not None:
            answer = ErrorReply(
                request.reply_route,
                request.operation_id,
                origin.generation,
                failure.kind,
                failure.message,
            )
        try:
            mesh.reply(origin, answer)
        except ZLinkError as error:
            _log.info("a reply to %s was not sent: %s", origin.node_rid, error)


def _for_caller(error: ZLinkError) -> ZLinkError:
    """The error a remote caller gets for ``error`` raised here."""
    if error.kind is ErrorKind.CAPACITY_EXCEEDED:
        # This host's queue is full: for the caller that is a resource another runtime owns, so
        # it sees UNAVAILABLE, never CAPACITY_EXCEEDED (ERR-5.11).
        return ZLinkError(ErrorKind.UNAVAILABLE, f"the owner's queue is full: {error}")
    if error.kind is ErrorKind.SHUTTING_DOWN:
        # This host is shutting down, not the caller's: for the caller the owner went away,
        # which is UNAVAILABLE (seed 003 §5; ROUTE-10).
        return ZLinkError(ErrorKind.UNAVAILABLE, f"the owner is shutting down: {error}")
    return error


def _instance_of(message: Send | Request) -> InstanceChoice | None:
    """The ``instance_spot(type)`` choice a message from a peer carries, if any."""
    kind = message.instance_spot_type
    return None if kind is None else InstanceChoice(kind)
