"""Global addressing, outbound: reaching Spots and Actors owned by other hosts of the mesh
(specs/global.md; specs/completion.md CMP-4.3, CMP-4.7, CMP-5.12, CMP-5.20; MESH-19).

Longer than 400 lines: one class, this host's end of global addressing, whose state (the routing
cache, the peers gone or lost, the calls waiting for a route) every outbound call and every task
following the store, the membership and the transport reads and changes; split, each rule about
when a call ends ``UNAVAILABLE`` would be read in two places. The janitor is apart (janitor.py).

Rule 1: the store says who owns an id; the routing cache remembers it. A call whose target is not
local reads the target's authority record (the resolve counts inside a request's deadline) and
keeps ``id -> owner`` in a cache. The cache forgets an entry when a store change hint names its
key, on a ``Resync``, when the owner's node record goes away (``PeerDown``), and when the owner
answers that it has no such target, so the next call resolves again. Misses are never cached.
An owner read while a hint or a forget for its target came in may predate the change, and a
stale entry would outlive it (ROUTE-13): it is read once more, and that read is cached unless
another change came in during it too (then it serves its call uncached).
Rule 2: an owner that is not live is nobody. A record whose owner's node record is gone is
stale: a call to it ends with ``UNAVAILABLE``, and a claim may take it over (authority.py Rule
5), so a Spot of a killed host can be activated again elsewhere with a higher generation.
Rule 3: the wire carries application messages as CBOR documents of their registered class;
a remote send completes when the local transport queue took it (CMP-4.3) and nothing later
changes its result; a remote request carries its remaining budget and ends with exactly one of
the reply, the remote error's kind, ``DEADLINE_EXCEEDED``, ``UNAVAILABLE`` or ``SHUTTING_DOWN``.
Nothing is re-sent automatically (CMP-5.20). Its deadline and budget are application time
(``node.clock``, VCLK-2): on a test's clock the call's own scope ends it, not the transport.
Rule 4: inbound work is delivered locally only; that side is ``inbound.py``.
Rule 5: peers come from membership. The transport connects to a peer when its node record shows
endpoints and disconnects when the record goes away (MESH-19); a call waits, within its deadline,
for the route to a live owner to come up (also while the transport retries its links, TRN-29).
Rule 7: a lost route is a gone owner until it comes back. When the transport reports a peer's
route lost (silence past its window, a restart), calls to ids it owns end ``UNAVAILABLE`` at
once, and the cache forgets it, so the next call resolves again; ``RouteUp`` lifts it (ROUTE-12).
Rule 8: the janitor reclaims what a departed peer left and sweeps for what any dead run left
(janitor.py, GLOBAL-13).
Rule 6: shutdown settles in-flight remote requests through the transport. ``settle_all`` ends
every request pending in the RouteMesh, and those still waiting for a route, with
``SHUTTING_DOWN``, so a remote request needs no cancel scope of its own.
Rule 9: a message to a peer is bounded by the peer's limit too, once its route is up (MSG-6).
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Mapping
from functools import partial

import trio

from zlink_trio._integration.store import Changed, LocationStore, Resync
from zlink_trio._integration.transport import PeerAddress, RouteLost, RouteMesh, RouteUp
from zlink_trio._runtime.engines.clock import Clock
from zlink_trio._runtime.node.node import LocalNode
from zlink_trio._runtime.ownership.membership import Membership
from zlink_trio._runtime.ownership.node_record import NodeRecord, PeerChanged, PeerDown, PeerUp
from zlink_trio._runtime.routing.credit import Credits
from zlink_trio._runtime.routing.janitor import Janitor
from zlink_trio._runtime.routing.limits import PeerLimits
from zlink_trio._runtime.routing.owner import STALE, Owner, Stale, Target
from zlink_trio._wire import Metadata, OperationId, Reply, Request, Send
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, NodeRid, SpotId, StableTypeName

__all__ = ["STALE", "Owner", "Remote"]

_log = logging.getLogger("zlink_trio.runtime.remote")

_NO_SCOPE = contextlib.nullcontext()
"""No scope of its own for a remote request on Trio's clock: the transport's timeout bounds it."""


def _left(clock: Clock, deadline: float) -> float:
    """What a remote request on a test's clock has left of its budget (Rule 3)."""
    return deadline - clock.now()


class Remote:
    """This host's end of global addressing: the transport, the routing cache and the routes to
    peers. ``load()`` counts what this host runs, for its node record."""

    def __init__(
        self,
        node: LocalNode,
        store: LocationStore,
        membership: Membership,
        load: Callable[[], int],
    ) -> None:
        self._node = node
        self._load = load
        self._store = store
        self._membership = membership
        self.janitor = Janitor(node, membership)
        """What this host reclaims of dead runs (janitor.py)."""
        self.mesh: RouteMesh | None = None
        self._cache: dict[Target, Owner] = {}
        self._sending: dict[NodeRid, int] = {}
        """Sends to each peer between their owner's lookup and the transport taking them."""
        self._sent: dict[NodeRid, trio.Event] = {}
        """Set when a peer's count in ``_sending`` comes to nothing (``sends_taken``)."""
        self._resolving: dict[Target, list[int]] = {}
        """Targets whose owner is being read: [reads under way, forgets since] (Rule 1)."""
        self._route_waiters: dict[NodeRid, trio.Event] = {}
        self._tasks: trio.Nursery | None = None
        self._gone: set[NodeRid] = set()
        """Peers whose node record went away and has not come back (their calls end)."""
        self._lost: set[NodeRid] = set()
        """Peers whose route the transport reported lost and that have not come back (Rule 7)."""
        self._settled = False
        self.credits = Credits()
        """What the owners paused (credit.py); read by ``send``, set by ``inbound.py``."""
        self.limits = PeerLimits(node)
        """What each peer takes (limits.py); kept by ``_follow_peers``, read by both sides."""
        self._spot_prefix = f"m/{node.mesh.value}/spot/"
        self.forgotten: Callable[[Target, NodeRid], None] = lambda target, owner: None
        """Told of each owner the cache forgets on a store change (bound by the host)."""

    # --- outbound ------------------------------------------------------------------------------

    async def owner_of(self, target: Target, deadline: float) -> Owner | Stale | None:
        """The live remote owner of ``target``; ``STALE`` when its record names an owner that is
        not live (Rule 2); ``None`` when the store has no record or the record is this host's
        own. ``DEADLINE_EXCEEDED`` when the store does not answer in time, ``UNAVAILABLE`` when
        it cannot be reached."""
        cached = self._cache.get(target)
        if cached is not None:
            return cached
        node = self._node
        # [resolutions of the target under way, forgets of it meanwhile] (Rule 1, ROUTE-13).
        watch = self._resolving.setdefault(target, [0, 0])
        watch[0] += 1
        try:
            with node.clock.scope_until(deadline):
                for last in (False, True):
                    forgets = watch[1]
                    record = await node.authority.read(target)
                    if record is None or record.owner == node.node_rid:
                        return None
                    if watch[1] != forgets and not last:
                        continue  # it may predate the change that came in: read once more
                    known = self._membership.peers().get(record.owner)
                    if (
                        known is None or known.generation != record.owner_generation
                    ) and await node.authority.is_stale(record):
                        return STALE
                    owner = Owner(record.owner, record.type_name)
                    if watch[1] == forgets:  # no change of it came in while it was read
                        self._cache[target] = owner
                    return owner
        finally:
            watch[0] -= 1
            if not watch[0]:
                del self._resolving[target]
        raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"resolving {target} timed out")

    def forget(self, target: Target, *, flush: bool = False) -> None:
        """Drop ``target`` from the routing cache (Rule 1); ``flush``: the next call to it
        flushes the route to the owner it named first (reroute.py)."""
        owner = self._cache.pop(target, None)
        if (watch := self._resolving.get(target)) is not None:
            watch[1] += 1  # an owner being read for it now is not cached (Rule 1)
        if flush and owner is not None:
            self.forgotten(target, owner.node_rid)

    async def sends_taken(self, rid: NodeRid, deadline: float) -> None:
        """Return once no send of this host to ``rid`` is between its owner's lookup and the
        transport (a wait for the route, for credit, at the high-water mark): every send that
        named ``rid`` before is on the connection (RELOC-78); or at ``deadline``."""
        with self._node.clock.scope_until(deadline):
            while rid in self._sending:
                await self._sent.setdefault(rid, trio.Event()).wait()

    def forget_owner(self, rid: NodeRid) -> int:
        """Drop every route that names ``rid``, each flushed to it first on its next call, and
        read again whatever owner is being read now (Rule 1: ``rid`` leaves, RELOC-78); how
        many routes named it."""
        named = [target for target, owner in self._cache.items() if owner.node_rid == rid]
        for target in named:
            self.forget(target, flush=True)
        self._read_again()
        return len(named)

    def _read_again(self) -> None:
        """Every owner read under way is read once more, and not cached as it is (Rule 1)."""
        for watch in self._resolving.values():
            watch[1] += 1

    def peer_record(self, rid: NodeRid) -> NodeRecord | None:
        """The node record of ``rid`` while it is a live member of the mesh, else ``None``."""
        return self._membership.peers().get(rid)

    async def sees_state(self, rid: NodeRid, state: str) -> None:
        """Return once this host's view of peer ``rid`` says ``state`` (Membership)."""
        await self._membership.sees_state(rid, state)

    async def _route_ready(self, owner: NodeRid, deadline: float) -> RouteMesh:
        """The transport once its route to ``owner`` is up. A call waits for it until its
        deadline (requests) or without a bound (sends), and in every case ends when shutdown
        settles calls (``SHUTTING_DOWN``) or the owner's node record goes away
        (``UNAVAILABLE``): a one-way send ends only by admission, route loss or shutdown."""
        mesh = self._mesh()
        while mesh.is_up(owner) is None:
            if owner in self._gone:
                raise ZLinkError(ErrorKind.UNAVAILABLE, f"{owner} left the mesh")
            if owner in self._lost:
                raise ZLinkError(ErrorKind.UNAVAILABLE, f"the route to {owner} is lost")
            event = self._route_waiters.setdefault(owner, trio.Event())
            with self._node.clock.scope_until(deadline):
                await event.wait()
            if self._settled:  # settle_all woke it (Rule 6)
                raise ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down")
            if mesh.is_up(owner) is None and self._node.clock.now() >= deadline:
                # The request's own deadline ran out while the route was still coming up: that
                # is its timeout, not a lost route (ROUTE-11).
                waited = f"the request timed out waiting for a route to {owner}"
                raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, waited)
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
        encoded: tuple[StableTypeName, bytes] | None = None,
    ) -> None:
        """A one-way message to ``target`` at ``owner``: completes at local transport
        admission (Rule 3). Waits for the route with no time bound of its own; the route's
        loss or the owner's departure ends it with ``UNAVAILABLE``. ``encoded``: the message's
        encoding when the caller made it already (messaging.py Rule 8)."""
        name, payload = encoded or self._encode(message)
        await self.send_as_is(
            owner, Send(target, name, payload, instance_type, tuple(metadata.items()))
        )

    async def send_as_is(self, owner: Owner, send: Send) -> None:
        """``send``, encoded already, to its target at ``owner``, unchanged (``send``; a relay
        of a peer's send, follow.py)."""
        target, name, payload = send.target, send.message_type, send.payload
        rid, sending = owner.node_rid, self._sending
        sending[rid] = sending.get(rid, 0) + 1  # until the transport has it (``sends_taken``)
        try:
            mesh = self._mesh()
            if mesh.is_up(rid) is None:
                with trio.CancelScope(shield=True):  # a send's route resolution (CMP-7.11)
                    mesh = await self._route_ready(rid, math.inf)
            self.limits.check(rid, name, payload)  # a route that is up has its limit
            if self.credits.is_paused(rid, target):
                await self.credits.wait(rid, target)  # the owner's Spot is full (OVL-2)
            try:
                await mesh.send(rid, send)
            except ZLinkError as error:
                if error.kind is ErrorKind.UNAVAILABLE:
                    self.forget(target)
                raise
        finally:
            if left := sending[rid] - 1:
                sending[rid] = left
            else:
                del sending[rid]
                if (taken := self._sent.pop(rid, None)) is not None:
                    taken.set()
        if self._node.trace is not None:  # node.py: what a test watches
            self._node.trace(f"admitted send {name} to {target} at {owner.node_rid} (remote)")

    async def tell(self, owner: Owner, target: Target, message: object) -> None:
        """One of the framework's one-way words to ``target`` at ``owner`` (a move's
        ``zlink.RelocateCommit``, host/cutover.py Rule 1): ``send`` without the wait for the
        owner's credit, which pauses application sends to a full unit, never the framework's,
        and within ``request_timeout`` (a route to wait for, a full queue), or ``UNAVAILABLE``."""
        name, payload = self._encode(message)
        mesh, within = self._mesh(), self._node.config.request_timeout
        if mesh.is_up(owner.node_rid) is None:
            mesh = await self._route_ready(owner.node_rid, self._node.clock.now() + within)
        self.limits.check(owner.node_rid, name, payload)
        until = trio.current_time() + within
        await mesh.send(owner.node_rid, Send(target, name, payload), until=until)

    async def request(
        self,
        owner: Owner,
        target: Target,
        message: object,
        reply_type: type,
        metadata: Mapping[str, str],
        instance_type: StableTypeName | None,
        deadline: float,
        on_submitted: Callable[[], object] | None = None,
        *,
        encoded: tuple[StableTypeName, bytes] | None = None,
        operation_id: OperationId | None = None,
    ) -> object:
        """A request to ``target`` at ``owner``; its reply decoded (Rule 3). Shutdown ends it
        with ``SHUTTING_DOWN`` through the transport (Rule 6). ``on_submitted`` is called once
        the Request is in the owner's queue (the transport's hook). ``operation_id``: the
        operation this request goes on with (a peer's request relayed, CMP-10.5), else a new
        one."""
        name, payload = encoded or self._encode(message)
        reply = await self._call(
            owner,
            operation_id or OperationId.new(),
            (target, name, payload, instance_type, tuple(metadata.items())),
            deadline,
            on_submitted,
        )
        value = self._node.registry.messages.decode(reply.reply_type, reply.payload)
        if self._node.trace is not None:
            self._node.trace(f"reply {reply.reply_type} from {target} (remote)")
        if not isinstance(value, reply_type):
            raise ZLinkError(
                ErrorKind.PROTOCOL_ERROR,
                f"the reply is a {type(value).__qualname__}, not a {reply_type.__qualname__}",
            )
        return value

    async def request_as_is(
        self,
        owner: Owner,
        request: Request,
        deadline: float,
        on_submitted: Callable[[], object] | None = None,
    ) -> Reply:
        """``request``, encoded already, to its target at ``owner`` as the same operation: its
        operation id, message, metadata and instance type unchanged, its budget what is left
        of ``deadline`` (``request``; a relay of a peer's request keeps them, RELOC-29). The
        reply as it came; an error as for ``request``."""
        what = (
            request.target,
            request.message_type,
            request.payload,
            request.instance_spot_type,
            request.metadata,
        )
        return await self._call(owner, request.operation_id, what, deadline, on_submitted)

    async def _call(
        self,
        owner: Owner,
        operation_id: OperationId,
        what: tuple[Target, StableTypeName, bytes, StableTypeName | None, Metadata],
        deadline: float,
        on_submitted: Callable[[], object] | None,
    ) -> Reply:
        """The request ``what`` (target, message type, payload, instance type, metadata) as
        operation ``operation_id``: its reply, or the error ``request`` describes."""
        target, name, payload, instance_type, metadata = what
        try:
            mesh = self._mesh()
            if mesh.is_up(owner.node_rid) is None:
                mesh = await self._route_ready(owner.node_rid, deadline)
            self.limits.check(owner.node_rid, name, payload)  # a route that is up has its limit
            clock = self._node.clock
            remaining = deadline - clock.now()
            # On Trio's clock the transport's own timeout is the deadline (no scope per request);
            # on a test's clock the call's scope on it is, and the budget is on it (Rule 3).
            trio_time = clock.trio_time
            reply = None
            if remaining > 0:
                if self._node.trace is not None:  # node.py: what a test watches
                    self._node.trace(f"request {name} to {target} at {owner.node_rid} (remote)")
                with _NO_SCOPE if trio_time else clock.scope_until(deadline):
                    reply = await mesh.request(
                        owner.node_rid,
                        operation_id=operation_id,
                        target=target,
                        message_type=name,
                        payload=payload,
                        timeout=remaining if trio_time else math.inf,
                        budget=None if trio_time else partial(_left, clock, deadline),
                        instance_spot_type=instance_type,
                        metadata=metadata,
                        on_submitted=on_submitted,
                    )
            if reply is None:
                raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"the request to {target} timed out")
        except ZLinkError as error:
            if self._node.trace is not None:
                self._node.trace(f"request to {target} failed: {error.kind.name} (remote)")
            if error.kind is ErrorKind.SHUTTING_DOWN and not self._settled:
                # Not this host's shutdown (that settles through settle_all): the owner's. For
                # a caller whose host runs on, the owner went away (ROUTE-10).
                self.forget(target)
                raise ZLinkError(
                    ErrorKind.UNAVAILABLE, f"the owner of {target} is shutting down"
                ) from None
            if error.kind in (ErrorKind.NOT_FOUND, ErrorKind.UNAVAILABLE):
                self.forget(target)
            raise
        return reply

    def _encode(self, message: object) -> tuple[StableTypeName, bytes]:
        """The message's payload, within this host's message limit (MSG-1)."""
        node = self._node
        return node.registry.messages.encode_within(message, node.config.max_message_bytes)

    def settle_all(self) -> None:
        """Shutdown: every remote request still waiting ends with ``SHUTTING_DOWN`` (Rule 6)."""
        self._settled = True
        waiters = list(self._route_waiters.values())
        self._route_waiters.clear()
        for event in waiters:
            event.set()  # every call waiting for its route ends SHUTTING_DOWN
        if self.mesh is not None:
            ending = ZLinkError(ErrorKind.SHUTTING_DOWN, "the host is shutting down")
            self.mesh.end_requests(ending)
            # A send waiting at a peer's high-water mark is shielded from its caller; only the
            # transport can end it, and it must end now, not when the transport closes after
            # every activation (whose turn may be that sender) has closed (TRN-25).
            self.mesh.end_sends(ending)

    # --- the tasks ------------------------------------------------------------------------------

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Peers from membership, routes from the transport, cache hints from the store and the
        load report; until cancelled."""
        mesh = self._mesh()
        async with trio.open_nursery() as nursery:
            self._tasks = nursery
            nursery.start_soon(self._follow_peers, mesh)
            nursery.start_soon(self._follow_routes, mesh)
            nursery.start_soon(self._follow_store)
            self._membership.load_from(self._load)  # read at each renewal (MESH-14)
            nursery.start_soon(self.janitor.sweep_loop)
            task_status.started()

    async def _follow_peers(self, mesh: RouteMesh) -> None:
        events = self._membership.subscribe()
        async with events:
            async for event in events:
                if isinstance(event, PeerUp | PeerChanged):
                    record = event.record
                    self._gone.discard(record.rid)
                    self.limits.learn(record)  # before its route can come up (limits.py Rule 3)
                    if record.application_endpoint and record.completion_endpoint:
                        try:
                            mesh.add_peer(
                                PeerAddress(
                                    record.rid,
                                    record.application_endpoint,
                                    record.completion_endpoint,
                                    record.curve_key.encode() or None,
                                )
                            )
                        except (ValueError, ZLinkError) as error:
                            _log.warning("cannot connect to %s: %s", record.rid, error)
                elif isinstance(event, PeerDown):
                    if self.janitor.on_duty() and self._tasks is not None:
                        self._tasks.start_soon(self.janitor.reclaim, event.rid)
                    mesh.remove_peer(event.rid)
                    self.limits.forget(event.rid)
                    self._gone.add(event.rid)
                    waiter = self._route_waiters.pop(event.rid, None)
                    if waiter is not None:
                        waiter.set()  # calls waiting for its route end UNAVAILABLE
                    self._owner_gone(event.rid)

    def _owner_gone(self, owner: NodeRid) -> None:
        """``owner`` left or lost its route: forget what it owned (Rule 1), lift its pauses."""
        self.credits.drop_owner(owner)
        for target in [t for t, cached in self._cache.items() if cached.node_rid == owner]:
            del self._cache[target]

    async def _follow_routes(self, mesh: RouteMesh) -> None:
        async for change in mesh.route_changes:
            rid = change.run.node_rid
            if isinstance(change, RouteUp):
                self._lost.discard(rid)
            elif isinstance(change, RouteLost):
                # The transport's liveness says the owner is gone (Rule 7): calls to it end
                # UNAVAILABLE at once, and its routes are resolved again next time.
                self._lost.add(rid)
                self._owner_gone(rid)
            waiter = self._route_waiters.pop(rid, None)
            if waiter is not None:
                waiter.set()

    async def _follow_store(self) -> None:
        with self._store.changes() as subscription:
            async for event in subscription:
                if isinstance(event, Resync):  # each target's next call flushes its route
                    for target in list(self._cache):
                        self.forget(target, flush=True)
                    self._read_again()
                elif isinstance(event, Changed):
                    for key in event.keys:
                        self._forget_key(key)

    def _forget_key(self, key: str) -> None:
        spot = key.startswith(self._spot_prefix)
        if spot or key.startswith("actor/"):
            id_ = SpotId(key[len(self._spot_prefix) :]) if spot else ActorId(key[len("actor/") :])
            self.forget(id_, flush=True)
