"""Global addressing: reaching Spots and Actors owned by other hosts of the mesh (specs/global.md;
specs/completion.md CMP-4.3, CMP-4.7, CMP-5.12, CMP-5.20; specs/errors.md ERR-5.11;
specs/mesh.md MESH-19).

Theory of operation.

Rule 1: the store says who owns an id; the routing cache remembers it. A call whose target is not
local reads the target's authority record (the resolve counts inside a request's deadline) and
keeps ``id -> owner`` in a cache. The cache forgets an entry when a store change hint names its
key, on a ``Resync``, when the owner's node record goes away (``PeerDown``), and when the owner
answers that it has no such target, so the next call resolves again. Misses are never cached.
Rule 2: an owner that is not live is nobody. A record whose owner's node record has lapsed is
stale: a call to it ends with ``UNAVAILABLE`` (the owner is unreachable), and a claim may take it
over (authority.py Rule 5), so a Spot of a killed host can be activated again elsewhere with a
higher generation.
Rule 3: the wire carries application messages as CBOR documents of their registered class;
a remote send completes when the local transport queue took it (CMP-4.3) and nothing later
changes its result; a remote request carries its remaining budget and ends with exactly one of
the reply, the remote error's kind, ``DEADLINE_EXCEEDED``, ``UNAVAILABLE`` or ``SHUTTING_DOWN``.
Nothing is re-sent automatically (CMP-5.20).
Rule 4: inbound work is delivered locally only. A message that arrives for a target this host does
not hold is not forwarded: a request gets ``NOT_FOUND`` (a stale route on the caller's side), a
send is dropped and logged. A request's handler sees the caller's deadline as ``ctx.deadline``.
A request to a Spot that is ready here, with a job permit free, is admitted by the reader itself:
its entry completes into a callback (completion.py Rule 5) that sends the Reply or ErrorReply
from the completion lane, so it needs no task and no cancel scope. Its budget counts from
arrival; a result that comes after it is not sent, because the caller's own transport has ended
the call with ``DEADLINE_EXCEEDED`` by then. Everything else (an Actor target, no free permit, a
closing incarnation to wait for) runs as a local request in a task of its own.
Rule 5: peers come from membership. The transport connects to a peer when its node record shows
endpoints and disconnects when the record goes away (MESH-19); a call waits, within its deadline,
for the route to a live owner to come up.
Rule 6: shutdown settles in-flight remote requests through the transport. ``settle_all`` ends
every request pending in the RouteMesh, and those still waiting for a route, with
``SHUTTING_DOWN``, so a remote request needs no cancel scope of its own.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING

import trio

from zlink_trio._integration.store import Changed, LocationStore, Resync
from zlink_trio._integration.transport import (
    PeerAddress,
    PeerRun,
    RouteMesh,
    RouteUp,
)
from zlink_trio._runtime.completion import Outcome
from zlink_trio._runtime.handlers import HandlerKind
from zlink_trio._runtime.mailbox import Envelope, InstanceChoice
from zlink_trio._runtime.membership import Membership, PeerChanged, PeerDown, PeerUp
from zlink_trio._runtime.spot import MessageContext
from zlink_trio._wire import ErrorReply, OperationId, Reply, Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, NodeRid, SpotId, StableTypeName

if TYPE_CHECKING:
    from zlink_trio._runtime.node import LocalNode

__all__ = ["STALE", "Owner", "Remote"]

_log = logging.getLogger("zlink_trio.runtime.remote")

Target = SpotId | ActorId


class _Stale:
    __slots__ = ()

    def __repr__(self) -> str:
        return "STALE"


STALE = _Stale()
"""``owner_of``'s answer for a record whose owner is not live (Rule 2)."""


class Owner:
    """A live remote owner of a target: the node to send to."""

    __slots__ = ("node_rid",)

    def __init__(self, node_rid: NodeRid) -> None:
        self.node_rid = node_rid


class Remote:
    """This host's end of global addressing: the transport, the routing cache, inbound work."""

    def __init__(self, node: LocalNode, store: LocationStore, membership: Membership) -> None:
        self._node = node
        self._store = store
        self._membership = membership
        self.mesh: RouteMesh | None = None
        self._cache: dict[Target, NodeRid] = {}
        self._route_waiters: dict[NodeRid, trio.Event] = {}
        self._gone: set[NodeRid] = set()
        """Peers whose node record went away and has not come back (their calls end)."""
        self._inbound: trio.Nursery | None = None
        self._settled = False
        self._spot_prefix = f"m/{node.mesh.value}/spot/"
        # Imported here, once: messaging reaches this module, so it cannot be imported above.
        from zlink_trio._runtime import messaging

        self._messaging = messaging

    # --- outbound ------------------------------------------------------------------------------

    async def owner_of(self, target: Target, deadline: float) -> Owner | _Stale | None:
        """The live remote owner of ``target``; ``STALE`` when its record names an owner that is
        not live (Rule 2); ``None`` when the store has no record or the record is this host's
        own. ``DEADLINE_EXCEEDED`` when the store does not answer in time, ``UNAVAILABLE`` when
        it cannot be reached."""
        cached = self._cache.get(target)
        if cached is not None:
            return Owner(cached)
        node = self._node
        record = None
        with trio.move_on_at(deadline):
            record = await node.authority.read(target)
            if record is None:
                return None
            if record.owner == node.node_rid:
                return None
            known = self._membership.peers().get(record.owner)
            if (
                known is None or known.generation != record.owner_generation
            ) and await node.authority.is_stale(record):
                return STALE
            self._cache[target] = record.owner
            return Owner(record.owner)
        raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"resolving {target} timed out")

    def forget(self, target: Target) -> None:
        """Drop ``target`` from the routing cache (Rule 1)."""
        self._cache.pop(target, None)

    async def _route_ready(self, owner: NodeRid, deadline: float) -> RouteMesh:
        """The transport once its route to ``owner`` is up. A call waits for it until its
        deadline (requests) or without a bound (sends), and in every case ends when shutdown
        settles calls (``SHUTTING_DOWN``) or the owner's node record goes away
        (``UNAVAILABLE``): a one-way send ends only by admission, route loss or shutdown."""
        mesh = self._mesh()
        while mesh.is_up(owner) is None:
            if owner in self._gone:
                raise ZLinkError(ErrorKind.UNAVAILABLE, f"{owner} left the mesh")
            event = self._route_waiters.get(owner)
            if event is None:
                event = self._route_waiters[owner] = trio.Event()
            with trio.move_on_at(deadline):
                await event.wait()
            if self._settled:  # settle_all woke it (Rule 6)
                raise ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down")
            if mesh.is_up(owner) is None and trio.current_time() >= deadline:
                raise ZLinkError(ErrorKind.UNAVAILABLE, f"no route to {owner}")
        return mesh

    def _mesh(self) -> RouteMesh:
        if self.mesh is None or self._settled:
            raise ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down")
        return self.mesh

    async def send(
        self,
        owner: Owner,
        target: Target,
        message: object,
        metadata: Mapping[str, str],
        instance_type: StableTypeName | None,
    ) -> None:
        """A one-way message to ``target`` at ``owner``: completes at local transport
        admission (Rule 3). Waits for the route with no time bound of its own; the route's
        loss or the owner's departure ends it with ``UNAVAILABLE``."""
        name, payload = self._node.registry.messages.encode(message)
        mesh = self._mesh()
        if mesh.is_up(owner.node_rid) is None:
            mesh = await self._route_ready(owner.node_rid, math.inf)
        try:
            await mesh.send(
                owner.node_rid,
                Send(target, name, payload, instance_type, tuple(metadata.items())),
            )
        except ZLinkError as error:
            if error.kind is ErrorKind.UNAVAILABLE:
                self.forget(target)
            raise

    async def request(
        self,
        owner: Owner,
        target: Target,
        message: object,
        reply_type: type,
        metadata: Mapping[str, str],
        instance_type: StableTypeName | None,
        deadline: float,
    ) -> object:
        """A request to ``target`` at ``owner``; its reply decoded (Rule 3). Shutdown ends it
        with ``SHUTTING_DOWN`` through the transport (Rule 6)."""
        name, payload = self._node.registry.messages.encode(message)
        try:
            mesh = self._mesh()
            if mesh.is_up(owner.node_rid) is None:
                mesh = await self._route_ready(owner.node_rid, deadline)
            remaining = deadline - trio.current_time()
            if remaining <= 0:
                raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"the request to {target} timed out")
            reply = await mesh.request(
                owner.node_rid,
                operation_id=OperationId.new(),
                target=target,
                message_type=name,
                payload=payload,
                timeout=remaining,
                instance_spot_type=instance_type,
                metadata=tuple(metadata.items()),
            )
        except ZLinkError as error:
            if error.kind in (ErrorKind.NOT_FOUND, ErrorKind.UNAVAILABLE):
                self.forget(target)
            raise
        value = self._node.registry.messages.decode(reply.reply_type, reply.payload)
        if not isinstance(value, reply_type):
            raise ZLinkError(
                ErrorKind.PROTOCOL_ERROR,
                f"the reply is a {type(value).__qualname__}, not a {reply_type.__qualname__}",
            )
        return value

    def settle_all(self) -> None:
        """Shutdown: every remote request still waiting ends with ``SHUTTING_DOWN`` (Rule 6)."""
        self._settled = True
        waiters = list(self._route_waiters.values())
        self._route_waiters.clear()
        for event in waiters:
            event.set()  # every call waiting for its route ends SHUTTING_DOWN
        if self.mesh is not None:
            self.mesh.end_requests(ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down"))

    # --- inbound -------------------------------------------------------------------------------

    async def on_message(self, origin: PeerRun, message: Send | Request) -> None:
        """The transport's application reader hands each message here (Rule 4)."""
        if type(message) is Send:
            await self._inbound_send(origin, message)
            return
        assert isinstance(message, Request)
        nursery = self._inbound
        if nursery is None:
            self._answer(origin, message, ZLinkError(ErrorKind.SHUTTING_DOWN, "not serving"))
            return
        # The budget counts from arrival, not from when the task gets to run.
        arrived = trio.current_time()
        if not self._admit_request(origin, message, arrived):
            nursery.start_soon(self._inbound_request, origin, message, arrived)

    def _admit_request(self, origin: PeerRun, message: Request, arrived: float) -> bool:
        """Admit a request to a Spot ready here at once, its reply sent from the completion
        lane (Rule 4); or answer its error now. ``False`` when it has to wait (no free job
        permit, a closing incarnation) or targets an Actor: the caller runs it in a task.

        The same steps, in the same order, as ``messaging.request`` for a local target."""
        target = message.target
        if type(target) is not SpotId:
            return False
        node = self._node
        messaging = self._messaging
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            node.check_admitting()
            jobs = node.jobs
            if not jobs.try_acquire():
                return False
            try:
                instance = _instance_of(message)
                found = messaging._resolve_now(
                    node, target, type(decoded), HandlerKind.REQUEST, instance, True
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
        """The completion of an admitted inbound request, on the completion lane (Rule 4)."""
        if trio.current_time() >= deadline:
            # The caller's transport ended the call with DEADLINE_EXCEEDED by now.
            _log.debug("a reply to %s after its deadline was not sent", origin.node_rid)
            return
        error = outcome.error
        self._answer(origin, request, outcome.value if error is None else _for_caller(error))

    async def _inbound_send(self, origin: PeerRun, message: Send) -> None:
        messaging = self._messaging
        node = self._node
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            metadata = dict(message.metadata)
            if isinstance(message.target, ActorId):
                await messaging.send_actor(node, message.target, decoded, metadata, local=True)
            else:
                instance = _instance_of(message)
                await messaging.send(
                    node, message.target, decoded, metadata, instance, None, local=True
                )
        except ZLinkError as error:
            _log.info(
                "a send from %s to %s was not admitted: %s", origin.node_rid, message.target, error
            )

    async def _inbound_request(self, origin: PeerRun, message: Request, arrived: float) -> None:
        messaging = self._messaging
        node = self._node
        try:
            decoded = node.registry.messages.decode(message.message_type, message.payload)
            # The caller checks the reply's class; here any declared message passes through.
            handler_reply = object
            metadata = dict(message.metadata)
            budget = max(message.budget_us / 1_000_000 - (trio.current_time() - arrived), 1e-6)
            if isinstance(message.target, ActorId):
                result = await messaging.request_actor(
                    node, message.target, decoded, handler_reply, metadata, budget, local=True
                )
            else:
                instance = _instance_of(message)
                result = await messaging.request(
                    node,
                    message.target,
                    decoded,
                    handler_reply,
                    metadata,
                    instance,
                    None,
                    budget,
                    local=True,
                )
        except ZLinkError as error:
            self._answer(origin, message, _for_caller(error))
            return
        self._answer(origin, message, result)

    def _answer(self, origin: PeerRun, request: Request, result: object) -> None:
        mesh = self.mesh
        if mesh is None:
            return
        answer: Reply | ErrorReply
        if isinstance(result, ZLinkError):
            answer = ErrorReply(
                request.reply_route,
                request.operation_id,
                origin.generation,
                result.kind,
                result.message,
            )
        else:
            try:
                name, payload = self._node.registry.messages.encode(result)
            except (TypeError, ValueError) as error:
                answer = ErrorReply(
                    request.reply_route,
                    request.operation_id,
                    origin.generation,
                    ErrorKind.INTERNAL_FAILURE,
                    f"the reply cannot be encoded: {error}",
                )
            else:
                answer = Reply(
                    request.reply_route, request.operation_id, origin.generation, name, payload
                )
        try:
            mesh.reply(origin, answer)
        except ZLinkError as error:
            _log.info("a reply to %s was not sent: %s", origin.node_rid, error)

    # --- the tasks ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Peers from membership, routes from the transport, cache hints from the store, the
        nursery of inbound requests and the load report; until cancelled."""
        mesh = self._mesh()
        async with trio.open_nursery() as nursery:
            self._inbound = nursery
            nursery.start_soon(self._follow_peers, mesh)
            nursery.start_soon(self._follow_routes, mesh)
            nursery.start_soon(self._follow_store)
            nursery.start_soon(self._report_load)
            task_status.started()

    async def _follow_peers(self, mesh: RouteMesh) -> None:
        events = self._membership.subscribe()
        async with events:
            async for event in events:
                if isinstance(event, PeerUp | PeerChanged):
                    record = event.record
                    self._gone.discard(record.rid)
                    if record.application_endpoint and record.completion_endpoint:
                        try:
                            mesh.add_peer(
                                PeerAddress(
                                    record.rid,
                                    record.application_endpoint,
                                    record.completion_endpoint,
                                )
                            )
                        except (ValueError, ZLinkError) as error:
                            _log.warning("cannot connect to %s: %s", record.rid, error)
                elif isinstance(event, PeerDown):
                    mesh.remove_peer(event.rid)
                    self._gone.add(event.rid)
                    waiter = self._route_waiters.pop(event.rid, None)
                    if waiter is not None:
                        waiter.set()  # calls waiting for its route end UNAVAILABLE
                    for target, owner in list(self._cache.items()):
                        if owner == event.rid:
                            del self._cache[target]

    async def _follow_routes(self, mesh: RouteMesh) -> None:
        async for change in mesh.route_changes:
            if isinstance(change, RouteUp):
                waiter = self._route_waiters.pop(change.run.node_rid, None)
                if waiter is not None:
                    waiter.set()

    async def _follow_store(self) -> None:
        with self._store.changes() as subscription:
            async for event in subscription:
                if isinstance(event, Resync):
                    self._cache.clear()
                elif isinstance(event, Changed):
                    for key in event.keys:
                        self._forget_key(key)

    def _forget_key(self, key: str) -> None:
        if key.startswith(self._spot_prefix):
            self._cache.pop(SpotId(key[len(self._spot_prefix) :]), None)
        elif key.startswith("actor/"):
            self._cache.pop(ActorId(key[len("actor/") :]), None)

    async def _report_load(self) -> None:
        node = self._node
        while True:
            self._membership.update(load=len(node.live) + len(node.live_actors))
            await trio.sleep(1.0)

    def close_inbound(self) -> None:
        """Stop taking inbound requests (those running keep their reply path)."""
        self._inbound = None


def _for_caller(error: ZLinkError) -> ZLinkError:
    """The error a remote caller gets for ``error`` raised here."""
    if error.kind is ErrorKind.CAPACITY_EXCEEDED:
        # This host's queue is full: for the caller that is a resource another runtime owns, so
        # it sees UNAVAILABLE, never CAPACITY_EXCEEDED (ERR-5.11).
        return ZLinkError(ErrorKind.UNAVAILABLE, f"the owner's queue is full: {error}")
    return error


def _instance_of(message: Send | Request) -> InstanceChoice | None:
    """The ``instance_spot(type)`` choice a message from a peer carries, if any."""
    kind = message.instance_spot_type
    return None if kind is None else InstanceChoice(kind)
