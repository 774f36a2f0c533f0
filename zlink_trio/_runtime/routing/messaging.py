"""Sends and requests to Spots and Actors, here or at their owner (specs/completion.md CMP-2.2,
CMP-4.2, CMP-4.4, CMP-9.1..CMP-9.4, CMP-9.10, CMP-14.2, CMP-17.7; specs/spots.md SPOT-19..SPOT-26;
specs/errors.md ERR-4.1, ERR-4.2, ERR-5.1..ERR-5.9).

Rule 1: a one-way send completes at local admission: the message is in the target Spot's
mailbox; it waits for no handler (CMP-4.2). No time bound, no deadline; its caller cannot cancel
its waits for a permit, room and credit (DEC-1; local.py Rule 3) nor those of resolving its
route (CMP-7.11: a changed route's flush, the store read, remote.py's route, local.py Rule 6).
Rule 2: a request fixes one deadline when its terminal starts, on the host's application clock
(``node.clock``, VCLK-2); resolution, cold activation, admission and the reply wait all spend
from it (CMP-9.4). Its entry is registered before the message is admitted (completion.py Rule
1), and whichever of reply, timeout, cancellation or shutdown pops the entry first decides the
result (CMP-9.1). Timeout is the call's own deadline and gives ``DEADLINE_EXCEEDED``; a caller's
Trio cancel scope gives ``trio.Cancelled`` (CMP-9.10).
Rule 3: a send or request without ``instance_spot()`` never creates anything (SPOT-19); with it, a
missing id is activated cold on this host and the activating message is the first one in the new
Spot's mailbox (activation.py Rule 2).
Rule 4: a message takes its job permit before its target is resolved (mailbox.py Rule 1), so
resolving and admitting have no checkpoint between them and a cold-activating message stays the
first in its new mailbox. A request spends its deadline on the permit wait too.
Rule 5: ``Messaging`` is where a call chooses local or remote. It holds the host's Spot and Actor
catalogs and, once peers are served, its ``Remote``; what happens on this host is ``local.py``,
what happens on the wire is ``remote.py``, and inbound work from peers (``inbound.py``) calls
back in here with ``local=True`` so it is never forwarded again (but see Rule 10).
Rule 6: a User Spot this host is creating (claimed, not Ready) is waited for (a send without a
bound, a request within its deadline); the call then goes to it, or ends ``NOT_FOUND`` (SPOT-90).
Rule 7: ``close(ref)`` closes the incarnation where it lives (closing.py; SPOT-92).
Rule 8: a message is the same wherever its target lives (specs/messages.md). A call of this host
screens its message before it takes a permit or resolves anything: the field types are checked,
the encoded size must be within ``HostConfig.max_message_bytes``, and a target on this host gets
the decoded copy of that encoding (or the message itself when it is immutable, payload.py Rule
5), the wire the same bytes; the reply a local caller gets is copied the same way (local.py).
Work from peers (``local=True``) was decoded from the wire already and is not screened again.
Rule 9: a one-way message that its target's type has no handler for is refused at the sender
with ``NOT_FOUND``, wherever the target lives: for a remote target the owner's record names its
type, and the sender's own declarations (the same application) say whether that type handles
the message; a type this host does not declare is left for its owner to judge (MSG-7).
Rule 10: peers' work for a Spot that moved away is relayed to it (follow.py; RELOC-49).
Rule 11: a call of this host whose route changed flushes the old route first (reroute.py).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import trio

from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.declarations.handlers import HandlerKind
from zlink_trio._runtime.declarations.registry import Handler
from zlink_trio._runtime.declarations.values import MessageContext
from zlink_trio._runtime.engines.gate import current_turn
from zlink_trio._runtime.node.envelope import Envelope
from zlink_trio._runtime.routing.follow import Moved
from zlink_trio._runtime.routing.local import (
    InstanceChoice,
    actor_context,
    admit,
    handler_of,
    job_permit,
    outlive,
    reply_of,
    resolve_actor,
    resolve_spot,
    send_permit,
)
from zlink_trio._runtime.routing.owner import STALE, Owner, Stale
from zlink_trio._runtime.routing.remote import Remote
from zlink_trio._runtime.routing.reroute import Reroutes
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio._wire import OperationId
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, SpotId, StableTypeName

__all__ = ["Messaging"]

Encoded = tuple[StableTypeName, bytes] | None
"""A screened message's encoding; ``None`` for one that passes as it is (Rule 8)."""


class Messaging:
    """Sends and requests of one host to Spots and Actors, wherever they are (Rule 5)."""

    def __init__(
        self, spots: SpotCatalog[Activation], actors: ActorCatalog[ActorActivation]
    ) -> None:
        self.node = spots.node
        self.spots = spots
        self.actors = actors
        self.remote: Remote | None = None
        """Global addressing (remote.py); set once the transport and membership run."""
        self._messages = spots.node.registry.messages
        self._limit = spots.node.config.max_message_bytes
        self.moved = Moved(spots, actors)  # Spots that moved away, followed for a while (Rule 10)
        self.reroutes = Reroutes(spots.node)  # the owners the routing cache forgot (reroute.py)

    def _screen(self, message: object, local: bool) -> Encoded:
        """Rule 8: the message's encoding (or ``None``); nothing for work from peers."""
        return None if local else self._messages.screen(message, self._limit)

    def _own(self, message: object, encoded: Encoded) -> object:
        """What a target on this host gets of a screened message (Rule 8)."""
        return message if encoded is None else self._messages.decode(*encoded)

    async def send(
        self,
        spot_id: SpotId,
        message: object,
        metadata: Mapping[str, str],
        instance: InstanceChoice | None,
        mesh: MeshName | None,
        *,
        local: bool = False,
    ) -> None:
        """Admit a one-way message into the target Spot's mailbox, here or at its owner (Rule 1;
        remote.py Rule 3). ``local``: inbound from a peer, never forwarded (inbound.py Rule 1)."""
        node = self.node
        node.check_admitting()
        node.check_mesh(mesh)
        encoded = self._screen(message, local)
        if not local and self.reroutes.waiting and spot_id in self.spots.activations:
            with trio.CancelScope(shield=True):  # Rule 1
                await self.reroutes.settle(self.remote, spot_id, node.node_rid, math.inf)
        if local and (followed := self.moved.followed(spot_id, self.remote)) is not None:
            relay, moved_to = followed
            await relay.send(moved_to, spot_id, message, metadata, self._type_of(instance))
            return
        jobs = node.jobs
        await send_permit(node, self.spots.activations, spot_id)  # local.py Rules 3-4
        held = True
        try:
            create = local or self.remote is None
            found = resolve_spot(
                self.spots, spot_id, type(message), HandlerKind.PACKET, instance, create
            )
            if not isinstance(found, tuple):
                with trio.CancelScope(shield=not local):  # a call of this host: Rule 1
                    located = await self._locate(
                        spot_id, type(message), HandlerKind.PACKET, instance, create, math.inf
                    )
                if isinstance(located, Owner):
                    # A remote target's queue is at its owner: no local permit is held for it.
                    held = False
                    jobs.release()
                    remote = self.remote
                    assert remote is not None  # an Owner comes only from it
                    self._check_handled(located, message)
                    await remote.send(
                        located, spot_id, message, metadata, self._type_of(instance), encoded
                    )
                    return
                found = located
            activation, handler = found
            envelope = Envelope(
                self._own(message, encoded), handler, MessageContext(spot_id, metadata), None
            )
            if not activation.try_put(envelope):
                await admit(activation, envelope)
        except BaseException:
            if held:
                jobs.release()
            raise

    async def request(
        self,
        spot_id: SpotId,
        message: object,
        reply_type: type,
        metadata: Mapping[str, str],
        instance: InstanceChoice | None,
        mesh: MeshName | None,
        time_limit: float,
        *,
        local: bool = False,
        operation_id: OperationId | None = None,
    ) -> object:
        """Send a request and wait for the one result that settles first (Rule 2), here or at the
        target's owner (remote.py Rule 3); ``operation_id``: a peer's, kept for a relay."""
        node = self.node
        node.check_admitting()
        node.check_mesh(mesh)
        encoded = self._screen(message, local)
        deadline = node.clock.now() + time_limit
        if not local and self.reroutes.waiting and spot_id in self.spots.activations:
            await self.reroutes.settle(self.remote, spot_id, node.node_rid, deadline)
        if local and (followed := self.moved.followed(spot_id, self.remote)) is not None:
            type_name = self._type_of(instance)
            return await self.moved.request(
                followed, spot_id, message, reply_type, metadata, type_name, deadline
            )
        await job_permit(node, deadline, self.spots.activations, spot_id)
        held = True
        try:
            create = local or self.remote is None
            found = resolve_spot(
                self.spots, spot_id, type(message), HandlerKind.REQUEST, instance, create
            )
            if not isinstance(found, tuple):
                located = await self._locate(
                    spot_id, type(message), HandlerKind.REQUEST, instance, create, deadline
                )
                if isinstance(located, Owner):
                    held = False
                    node.jobs.release()
                    remote = self.remote
                    assert remote is not None  # an Owner comes only from it
                    return await remote.request(
                        located,
                        spot_id,
                        message,
                        reply_type,
                        metadata,
                        self._type_of(instance),
                        deadline,
                        encoded=encoded,
                    )
                found = located
            activation, handler = found
            own = self._own(message, encoded)
            entry = node.dispatcher.register()
            try:
                context = MessageContext(spot_id, metadata, None, deadline)
                activation.offer(Envelope(own, handler, context, entry.route, operation_id))
            except BaseException:
                node.dispatcher.pop(entry.route)
                raise
        except BaseException:
            if held:
                node.jobs.release()
            raise
        # Outside the scope above: only reply_of's own scope may turn the deadline into a result,
        # after the pop race, so a reply that won the slot is never reported as a timeout.
        return await reply_of(node, entry, deadline, reply_type, copy=not local)

    def _check_handled(self, owner: Owner, message: object) -> None:
        """Rule 9: ``NOT_FOUND`` when the owner's record names a type this host declares too
        and that type has no packet handler for ``message``."""
        if owner.type_name is not None:
            declared = self.node.registry.declared(owner.type_name)
            if declared is not None:
                handler_of(declared, type(message), HandlerKind.PACKET)

    @staticmethod
    def _type_of(instance: InstanceChoice | None) -> StableTypeName | None:
        if instance is None:
            return None
        if instance.type_name is not None:
            return instance.type_name
        raise ZLinkError(
            ErrorKind.INVALID_OPERATION,
            "instance_spot() without a type cannot reach a Spot on another host; name the type",
        )

    async def _owner_of(
        self, remote: Remote, target: SpotId | ActorId, deadline: float
    ) -> Owner | Stale | None:
        """``remote.owner_of``, and for a live owner the old route flushed first (RELOC-70)."""
        owner = await remote.owner_of(target, deadline)
        if type(owner) is Owner and self.reroutes.waiting:
            await self.reroutes.settle(remote, target, owner.node_rid, deadline)
        return owner

    async def _locate(
        self,
        spot_id: SpotId,
        message_type: type,
        kind: HandlerKind,
        instance: InstanceChoice | None,
        create: bool,
        deadline: float,
    ) -> tuple[Activation, Handler] | Owner:
        """Where a target that is not ready here is: after its closing incarnation here, at a live
        remote owner, or (with ``instance_spot()``) a new cold activation here (remote.py Rule 1).
        ``create``: the call may not go remote, so a missing id is decided here."""
        spots = self.spots
        while True:
            found = resolve_spot(spots, spot_id, message_type, kind, instance, create)
            if isinstance(found, tuple):
                return found
            if isinstance(found, Activation | trio.Event):
                await outlive(self.spots, spot_id, found, deadline)  # then look again
                continue
            remote = self.remote
            # resolve_spot returns None only for a call of this host that may go remote.
            assert remote is not None
            owner = await self._owner_of(remote, spot_id, deadline)
            if isinstance(owner, Owner):
                return owner
            if owner is STALE and instance is None:
                raise ZLinkError(ErrorKind.UNAVAILABLE, f"the owner of Spot {spot_id} is not live")
            # No live owner anywhere: activate here (only with instance_spot(), else NOT_FOUND); the
            # store's claim decides if another host does the same at once.
            created = resolve_spot(spots, spot_id, message_type, kind, instance, True)
            if isinstance(created, tuple):
                return created
            if isinstance(created, Activation | trio.Event):
                continue
            raise ZLinkError(ErrorKind.NOT_FOUND, f"no Spot {spot_id}")

    async def send_actor(
        self,
        actor_id: ActorId,
        message: object,
        metadata: Mapping[str, str],
        *,
        local: bool = False,
    ) -> None:
        """Admit a one-way message into the Actor's queue, here or at its owner (Rule 1;
        CMP-5.8)."""
        node = self.node
        node.check_admitting()
        encoded = self._screen(message, local)
        remote = self.remote
        if not local and self.reroutes.waiting and actor_id in self.actors.actors:
            with trio.CancelScope(shield=True):  # Rule 1
                await self.reroutes.settle(remote, actor_id, node.node_rid, math.inf)
        if local and (followed := self.moved.followed(actor_id, remote)) is not None:
            await followed[0].send(followed[1], actor_id, message, metadata, None)
            return
        if not local and remote is not None and actor_id not in self.actors.actors:
            with trio.CancelScope(shield=True):  # Rule 1
                owner = await self._owner_of(remote, actor_id, math.inf)
            if isinstance(owner, Owner):
                self._check_handled(owner, message)
                await remote.send(owner, actor_id, message, metadata, None, encoded)
                return
            if owner is STALE:
                raise ZLinkError(
                    ErrorKind.UNAVAILABLE, f"the owner of Actor {actor_id} is not live"
                )
        await send_permit(node, self.actors.actors, actor_id)  # local.py Rules 3-4
        try:
            actor, handler = resolve_actor(self.actors, actor_id, type(message), HandlerKind.PACKET)
            context = actor_context(actor, actor_id, metadata)
            await admit(actor, Envelope(self._own(message, encoded), handler, context, None))
        except BaseException:
            node.jobs.release()
            raise

    async def request_actor(
        self,
        actor_id: ActorId,
        message: object,
        reply_type: type,
        metadata: Mapping[str, str],
        time_limit: float,
        *,
        local: bool = False,
        operation_id: OperationId | None = None,
    ) -> object:
        """A request to an Actor: one deadline, the first result wins (Rule 2), here or at its
        owner; ``operation_id`` as for ``request``."""
        node = self.node
        node.check_admitting()
        encoded = self._screen(message, local)
        deadline = node.clock.now() + time_limit
        remote = self.remote
        if not local and self.reroutes.waiting and actor_id in self.actors.actors:
            await self.reroutes.settle(remote, actor_id, node.node_rid, deadline)
        if local and (followed := self.moved.followed(actor_id, remote)) is not None:
            return await self.moved.request(
                followed, actor_id, message, reply_type, metadata, None, deadline
            )
        if not local and remote is not None and actor_id not in self.actors.actors:
            owner = await self._owner_of(remote, actor_id, deadline)
            if isinstance(owner, Owner):
                return await remote.request(
                    owner, actor_id, message, reply_type, metadata, None, deadline, encoded=encoded
                )
            if owner is STALE:
                raise ZLinkError(
                    ErrorKind.UNAVAILABLE, f"the owner of Actor {actor_id} is not live"
                )
        await job_permit(node, deadline, self.actors.actors, actor_id)
        try:
            actor, handler = resolve_actor(
                self.actors, actor_id, type(message), HandlerKind.REQUEST
            )
            turn = current_turn()
            if turn is not None and turn.actor is actor:
                # Its own turn holds the Actor's FIFO claim: the request could never run (ACT-17).
                raise ZLinkError(
                    ErrorKind.INVALID_OPERATION,
                    f"Actor {actor_id} cannot wait for a request to itself from its own turn",
                )
            own = self._own(message, encoded)
            entry = node.dispatcher.register()
            try:
                context = actor_context(actor, actor_id, metadata, deadline)
                actor.offer(Envelope(own, handler, context, entry.route, operation_id))
            except BaseException:
                node.dispatcher.pop(entry.route)
                raise
        except BaseException:
            node.jobs.release()
            raise
        return await reply_of(node, entry, deadline, reply_type, copy=not local)
