"""Single-use calls to Actors: send, request and create (specs/actors.md ACT-1..ACT-9, ACT-14,
ACT-17; specs/api.md API-8..API-13).

Every call here follows single_use.py Rules 1-4. An Actor is addressed by its id alone: no mesh,
ref, node or Spot (ACT-14).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from zlink_trio._runtime.actors import creation
from zlink_trio._runtime.actors.activation import ActorActivation
from zlink_trio._runtime.actors.catalog import ActorCatalog
from zlink_trio._runtime.calls.single_use import Carrying, SingleUse, declared_reply
from zlink_trio._runtime.declarations.config import check_timeout
from zlink_trio._runtime.declarations.values import ActorCreateResult
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio.ids import ActorId, MeshName, StableTypeName

__all__ = ["ActorCreateCall", "ActorRequestCall", "ActorSendCall"]

R = TypeVar("R")


class _ToActor(Carrying):
    """What Actor sends and requests add: the target id alone. An Actor is addressed by its id:
    no mesh, ref, node or Spot (ACT-14)."""

    def __init__(self, messaging: Messaging, actor_id: ActorId, message: object) -> None:
        super().__init__(messaging, message)
        self._actor_id = actor_id


class ActorSendCall(_ToActor):
    """A one-way message to an Actor; completes when the Actor's queue admits it."""

    def metadata(self, key: str, value: str) -> ActorSendCall:
        """Attach ``key: value`` to the message (each key once)."""
        self._add_metadata(key, value)
        return self

    async def submit(self) -> None:
        """Return once the Actor's queue has admitted the message; ``NOT_FOUND`` when no Actor
        has the id, ``SHUTTING_DOWN`` once the host stops admitting."""
        self._terminal()
        await self._run()

    def submit_sync(self) -> None:
        """``submit()`` for an application thread, blocking it (not allowed in a Trio task)."""
        self._blocking(self._run)

    async def _run(self) -> None:
        await self._messaging.send_actor(self._actor_id, self._message, self._metadata)


class ActorRequestCall(_ToActor, Generic[R]):
    """A request to an Actor whose reply is a ``reply_type`` instance (single-use)."""

    def __init__(
        self, messaging: Messaging, actor_id: ActorId, message: object, reply_type: type[R]
    ) -> None:
        super().__init__(messaging, actor_id, message)
        self._reply_type = declared_reply(self._node, reply_type)
        self._timeout = self._node.config.request_timeout

    def metadata(self, key: str, value: str) -> ActorRequestCall[R]:
        """Attach ``key: value`` to the request (each key once)."""
        self._add_metadata(key, value)
        return self

    def timeout(self, seconds: float) -> ActorRequestCall[R]:
        """End the request with ``DEADLINE_EXCEEDED`` if no result settles within ``seconds``."""
        checked = check_timeout(seconds, "timeout")
        self._option("timeout")
        self._timeout = checked
        return self

    async def submit(self) -> R:
        """The reply; or ``ZLinkError``; or ``trio.Cancelled`` when the caller is cancelled."""
        self._terminal()
        return await self._run()

    async def yield_(self) -> R:
        """As ``submit()``, giving a SPOT_WIDE or Instance Spot gate back while waiting."""
        return await self._yielding(self._run)

    def submit_sync(self) -> R:
        """``submit()`` for an application thread, blocking it (not allowed in a Trio task)."""
        return self._blocking(self._run)

    async def _run(self) -> R:
        return await self._messaging.request_actor(  # type: ignore[return-value]  # checked isinstance
            self._actor_id,
            self._message,
            self._reply_type,
            self._metadata,
            self._timeout,
        )


class ActorCreateCall(SingleUse):
    """``actors.create`` / ``actors.get_or_create``; its result is an ``ActorCreateResult``."""

    def __init__(
        self,
        actors: ActorCatalog[ActorActivation],
        actor_id: ActorId,
        actor_type: StableTypeName,
        *,
        exclusive: bool,
    ) -> None:
        node = actors.node
        super().__init__(node)
        self._actors = actors
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
        return await creation.create(
            self._actors,
            self._actor_id,
            self._actor_type,
            self._request,
            self._mesh,
            self._timeout,
            exclusive=self._exclusive,
        )
