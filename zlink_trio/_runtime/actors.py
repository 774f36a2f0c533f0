"""The Actor manager: create, get-or-create, find, destroy and disconnect notices (specs/actors.md
ACT-1..ACT-9, ACT-22..ACT-28; specs/spots.md SPOT-51, SPOT-52).

Rule 1: one creation per id at a time, as for User Spots (creation.py Rule 1): concurrent calls on
this host meet in ``LocalNode.creating_actors``; across hosts the store's conditional claim
decides. Only the claim's winner runs the constructor and ``on_create_actor``.
Rule 2: the Entry Spot decides. The new instance is made, then the host's Entry Spot runs
``on_create_actor(actor, request)`` as one of its control turns; only on acceptance is the Actor
recorded Ready, made a member of the Entry Spot and given its lane. A rejected Actor releases its
claim and was never findable or addressable (SPOT-52). An exception in the constructor or the
callback is a failure (``INTERNAL_FAILURE``), not a rejection.
Rule 3: one deadline covers the whole creation, claim to Ready; when it passes the claim is
released and the call ends with ``DEADLINE_EXCEEDED``.
Rule 4: destroy takes the exact incarnation, is not a membership move (no ``on_leave_actor``) and
needs the Actor to be back in the Entry Spot first.
"""

from __future__ import annotations

import trio

from zlink_trio._runtime.actor import ActorCreateResult, ActorCreateStatus
from zlink_trio._runtime.actor_activation import ActorActivation
from zlink_trio._runtime.authority import Held
from zlink_trio._runtime.calls import _SingleUse
from zlink_trio._runtime.config import check_timeout
from zlink_trio._runtime.node import LocalNode
from zlink_trio._runtime.route import actor_id_of
from zlink_trio._runtime.spot import ActorCreateResponse
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, ActorRef, MeshName, SpotKind, StableTypeName

__all__ = ["ActorCreateCall", "ActorManager"]


class ActorManager:
    """Actor creation and lookup; ``host.actors`` and ``context.actors``."""

    def __init__(self, node: LocalNode) -> None:
        self._node = node

    def create(self, actor_id: ActorId | str, actor_type: str) -> ActorCreateCall:
        """A single-use call creating the Actor ``actor_id``; ``ALREADY_EXISTS`` if it exists."""
        return ActorCreateCall(
            self._node, actor_id_of(actor_id), StableTypeName(actor_type), exclusive=True
        )

    def get_or_create(self, actor_id: ActorId | str, actor_type: str) -> ActorCreateCall:
        """A single-use call returning the Ready Actor ``actor_id``, creating it when free."""
        return ActorCreateCall(
            self._node, actor_id_of(actor_id), StableTypeName(actor_type), exclusive=False
        )

    async def find(self, actor_id: ActorId | str) -> ActorRef | None:
        """The ``ActorRef`` of the Ready Actor ``actor_id``, or ``None``; creates nothing."""
        target = actor_id_of(actor_id)
        node = self._node
        node.check_admitting()
        local = node.actors.get(target)
        if local is not None and local.accepting:
            return local.ref
        record = await node.authority.read(target)
        if record is None or record.state != "ready" or await node.authority.is_stale(record):
            return None  # a record whose owner is not live names no Ready Actor (ROUTE-4)
        mesh = node.mesh if record.mesh is None else record.mesh
        return ActorRef(target, record.generation, mesh, record.owner)

    async def destroy(self, actor_ref: ActorRef) -> bool:
        """End exactly the incarnation ``actor_ref`` names: ``True`` once closed, ``False`` if it
        no longer exists; ``INVALID_OPERATION`` for another generation or an Actor still in a
        User Spot; ``UNAVAILABLE`` while a join is moving it or it is already closing."""
        if not isinstance(actor_ref, ActorRef):
            raise TypeError(f"destroy() takes an ActorRef, not {type(actor_ref).__name__}")
        node = self._node
        node.check_admitting()
        current = node.actors.get(actor_ref.actor_id)
        if current is None or actor_ref.mesh_name != node.mesh:
            return False
        generation = current.ref.object_generation
        if generation != actor_ref.object_generation:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"Actor {actor_ref.actor_id} is now generation {generation.value}, not "
                f"{actor_ref.object_generation.value}",
            )
        if current.spot.kind is not SpotKind.ENTRY:
            raise ZLinkError(
                ErrorKind.INVALID_OPERATION,
                f"Actor {actor_ref.actor_id} is a member of {current.spot.spot_id}; it must "
                "join the Entry Spot before it is destroyed",
            )
        if current.joining:
            raise ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor_ref.actor_id} is joining")
        deadline = trio.current_time() + node.config.closing_timeout
        if not current.begin_close(deadline, drain=True):
            raise ZLinkError(ErrorKind.UNAVAILABLE, f"Actor {actor_ref.actor_id} is closing")
        current.leave_membership()
        await current.closed.wait()
        return True

    async def notify_disconnected(self, actor_id: ActorId | str) -> bool:
        """Tell the Actor's current Spot that its client went away: runs that Spot's
        ``on_disconnect_actor`` once; ``False`` when no Ready Actor has the id here. Neither
        destroys the Actor nor changes its membership."""
        target = actor_id_of(actor_id)
        node = self._node
        node.check_admitting()
        current = node.actors.get(target)
        if current is None or not current.accepting:
            return False
        await current.notify_disconnected()
        return True


class ActorCreateCall(_SingleUse):
    """``actors.create`` / ``actors.get_or_create``; its result is an ``ActorCreateResult``."""

    def __init__(
        self,
        node: LocalNode,
        actor_id: ActorId,
        actor_type: StableTypeName,
        *,
        exclusive: bool,
    ) -> None:
        super().__init__(node)
        self._actor_id = actor_id
        self._actor_type = actor_type
        self._exclusive = exclusive
        self._request: object | None = None
        self._mesh: MeshName | None = None
        self._timeout = node.config.request_timeout

    def request(self, message: object) -> ActorCreateCall:
        """The message ``on_create_actor`` receives."""
        if not self._node.registry.is_message(type(message)):
            raise TypeError(f"{type(message).__qualname__} is not declared with @app.message")
        self._option("request")
        self._request = message
        return self

    def in_mesh(self, name: str) -> ActorCreateCall:
        """The mesh to create the Actor in (this host's own mesh only, for now)."""
        mesh = name if isinstance(name, MeshName) else MeshName(name)
        self._option("in_mesh")
        self._mesh = mesh
        return self

    def timeout(self, seconds: float) -> ActorCreateCall:
        """One deadline for the whole creation; the default is ``HostConfig.request_timeout``."""
        checked = check_timeout(seconds, "timeout")
        self._option("timeout")
        self._timeout = checked
        return self

    async def submit(self) -> ActorCreateResult:
        """The typed result: ``CREATED``, ``EXISTING`` or ``REJECTED``."""
        self._terminal()
        return await self._run()

    async def yield_(self) -> ActorCreateResult:
        """As ``submit()``, giving a SPOT_WIDE or Instance Spot gate back while waiting."""
        return await self._yielding(self._run)

    def submit_sync(self) -> ActorCreateResult:
        """``submit()`` for an application thread, blocking it (not allowed in a Trio task)."""
        return self._blocking(self._run)

    async def _run(self) -> ActorCreateResult:
        node = self._node
        node.check_admitting()
        node.check_mesh(self._mesh)
        if self._actor_type not in node.registry.actor_types:
            raise ZLinkError(
                ErrorKind.NOT_FOUND, f"no Actor type {self._actor_type} is served here"
            )
        with trio.move_on_at(trio.current_time() + self._timeout):
            return await _create(
                node, self._actor_id, self._actor_type, self._request, self._exclusive
            )
        raise ZLinkError(ErrorKind.DEADLINE_EXCEEDED, f"creating Actor {self._actor_id} timed out")


async def _create(
    node: LocalNode,
    actor_id: ActorId,
    type_name: StableTypeName,
    request: object | None,
    exclusive: bool,
) -> ActorCreateResult:
    while True:
        node.check_admitting()
        current = node.actors.get(actor_id)
        if current is not None:
            if current.actor_type.name != type_name:
                raise ZLinkError(
                    ErrorKind.TYPE_MISMATCH,
                    f"Actor {actor_id} is of type {current.actor_type.name}",
                )
            if exclusive:
                raise ZLinkError(ErrorKind.ALREADY_EXISTS, f"Actor {actor_id} exists already")
            if current.accepting:
                return ActorCreateResult(ActorCreateStatus.EXISTING, current.ref)
            await current.closed.wait()
            continue
        running = node.creating_actors.get(actor_id)
        if running is not None:
            await running.wait()
            continue
        done = trio.Event()
        node.creating_actors[actor_id] = done
        try:
            return await _create_new(node, actor_id, type_name, request, exclusive)
        finally:
            del node.creating_actors[actor_id]
            done.set()


async def _create_new(
    node: LocalNode,
    actor_id: ActorId,
    type_name: StableTypeName,
    request: object | None,
    exclusive: bool,
) -> ActorCreateResult:
    try:
        claimed = await node.authority.claim(actor_id, SpotKind.INVALID, type_name)
    except trio.Cancelled:
        # The claim's outcome is unknown (DEC-17): read it back and undo it if it was ours.
        with trio.CancelScope(shield=True), trio.move_on_after(node.config.store_release_timeout):
            await node.authority.forget_if_ours(actor_id)
        raise
    if isinstance(claimed, Held):
        record = claimed.record
        if record.type_name != type_name:
            raise ZLinkError(
                ErrorKind.TYPE_MISMATCH, f"Actor {actor_id} is of type {record.type_name}"
            )
        if exclusive:
            raise ZLinkError(ErrorKind.ALREADY_EXISTS, f"Actor {actor_id} exists already")
        ref = ActorRef(actor_id, record.generation, node.mesh, record.owner)
        return ActorCreateResult(ActorCreateStatus.EXISTING, ref)
    activation = ActorActivation(node, node.registry.actor_types[type_name], actor_id, claimed)
    ready = False
    try:
        try:
            instance = activation.make_instance()
        except Exception as error:
            raise ZLinkError(
                ErrorKind.INTERNAL_FAILURE,
                f"{activation.actor_type.cls.__qualname__}() raised {type(error).__name__}",
            ) from None
        try:
            response = await node.entry.control_turn(
                lambda entry: entry.on_create_actor(instance, request)
            )
        except ZLinkError:
            raise
        except Exception as error:
            raise ZLinkError(
                ErrorKind.INTERNAL_FAILURE, f"on_create_actor raised {type(error).__name__}"
            ) from None
        if not isinstance(response, ActorCreateResponse):
            raise ZLinkError(
                ErrorKind.INTERNAL_FAILURE, "on_create_actor must return an ActorCreateResponse"
            )
        if not response.accepted:
            return ActorCreateResult(ActorCreateStatus.REJECTED, None, response.reply)
        node.check_admitting()
        await activation.become_ready()
        ready = True
        return ActorCreateResult(ActorCreateStatus.CREATED, activation.ref, response.reply)
    finally:
        if not ready:
            await activation.abandon()
