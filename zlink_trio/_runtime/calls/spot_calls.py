"""Single-use calls to Spots: send, request and create (specs/api.md API-8..API-13;
specs/completion.md CMP-2.1, CMP-4.8, CMP-5.15; specs/spots.md SPOT-6, SPOT-17, SPOT-77).

Every call here follows single_use.py Rules 1-4: options are checked before anything is
submitted, ``submit()`` submits, ``submit_sync()`` blocks an application thread, ``yield_()``
gives the gate back where seed 000 allows it.
"""

from __future__ import annotations

from typing import Generic, TypeVar

from zlink_trio._runtime.calls.single_use import Carrying, SingleUse, declared_reply
from zlink_trio._runtime.declarations.config import check_timeout
from zlink_trio._runtime.declarations.values import SpotCreateResult
from zlink_trio._runtime.routing.local import InstanceChoice
from zlink_trio._runtime.routing.messaging import Messaging
from zlink_trio._runtime.spots import creation
from zlink_trio._runtime.spots.activation import Activation
from zlink_trio._runtime.spots.catalog import SpotCatalog
from zlink_trio.ids import MeshName, SpotId, StableTypeName

__all__ = ["SpotCreateCall", "SpotRequestCall", "SpotSendCall"]

R = TypeVar("R")


class _Addressed(Carrying):
    """What Spot sends and requests add: instance_spot and in_mesh."""

    def __init__(self, messaging: Messaging, spot_id: SpotId, message: object) -> None:
        super().__init__(messaging, message)
        self._spot_id = spot_id
        self._instance: InstanceChoice | None = None
        self._mesh: MeshName | None = None

    def _choose_instance(self, stable_type: str | None) -> None:
        type_name = None if stable_type is None else StableTypeName(stable_type)
        self._option("instance_spot")
        self._instance = InstanceChoice(type_name)

    def _choose_mesh(self, name: str) -> None:
        mesh = name if isinstance(name, MeshName) else MeshName(name)
        self._option("in_mesh")
        self._mesh = mesh


class SpotSendCall(_Addressed):
    """A one-way message to a Spot; completes at local admission (single-use)."""

    def metadata(self, key: str, value: str) -> SpotSendCall:
        """Attach ``key: value`` to the message (each key once)."""
        self._add_metadata(key, value)
        return self

    def instance_spot(self, stable_type: str | None = None) -> SpotSendCall:
        """Activate an Instance Spot of ``stable_type`` (or the only declared one) if the id has
        no Spot yet."""
        self._choose_instance(stable_type)
        return self

    def in_mesh(self, name: str) -> SpotSendCall:
        """The mesh a missing Instance Spot is activated in."""
        self._choose_mesh(name)
        return self

    async def submit(self) -> None:
        """Return once the target's mailbox has admitted the message; raise ``ZLinkError`` if it
        cannot (``NOT_FOUND``, ``TYPE_MISMATCH``, ``SHUTTING_DOWN``, ...)."""
        self._terminal()
        await self._run()

    def submit_sync(self) -> None:
        """``submit()`` for an application thread, blocking it (not allowed in a Trio task)."""
        self._blocking(self._run)

    async def _run(self) -> None:
        await self._messaging.send(
            self._spot_id,
            self._message,
            self._metadata,
            self._instance,
            self._mesh,
        )


class SpotRequestCall(_Addressed, Generic[R]):
    """A request to a Spot whose reply is a ``reply_type`` instance (single-use)."""

    def __init__(
        self, messaging: Messaging, spot_id: SpotId, message: object, reply_type: type[R]
    ) -> None:
        super().__init__(messaging, spot_id, message)
        self._reply_type = declared_reply(self._node, reply_type)
        self._timeout = self._node.config.request_timeout

    def metadata(self, key: str, value: str) -> SpotRequestCall[R]:
        """Attach ``key: value`` to the request (each key once)."""
        self._add_metadata(key, value)
        return self

    def instance_spot(self, stable_type: str | None = None) -> SpotRequestCall[R]:
        """Activate an Instance Spot if the id has no Spot yet (see ``SpotSendCall``)."""
        self._choose_instance(stable_type)
        return self

    def in_mesh(self, name: str) -> SpotRequestCall[R]:
        """The mesh a missing Instance Spot is activated in."""
        self._choose_mesh(name)
        return self

    def timeout(self, seconds: float) -> SpotRequestCall[R]:
        """End the request with ``DEADLINE_EXCEEDED`` if no result settles within ``seconds``;
        the default is ``HostConfig.request_timeout``."""
        checked = check_timeout(seconds, "timeout")
        self._option("timeout")
        self._timeout = checked
        return self

    async def submit(self) -> R:
        """The reply; or ``ZLinkError`` (remote failure, timeout, shutdown); or ``trio.Cancelled``
        when the caller's scope is cancelled. The calling turn keeps its gate."""
        self._terminal()
        return await self._run()

    async def yield_(self) -> R:
        """As ``submit()``, but the Spot's gate is given back while waiting (SPOT_WIDE and
        Instance Spot turns only)."""
        return await self._yielding(self._run)

    def submit_sync(self) -> R:
        """``submit()`` for an application thread, blocking it (not allowed in a Trio task)."""
        return self._blocking(self._run)

    async def _run(self) -> R:
        return await self._messaging.request(  # type: ignore[return-value]  # checked isinstance(reply, R)
            self._spot_id,
            self._message,
            self._reply_type,
            self._metadata,
            self._instance,
            self._mesh,
            self._timeout,
        )


class SpotCreateCall(SingleUse):
    """``spots.create`` / ``spots.get_or_create``; its result is a ``SpotCreateResult``."""

    def __init__(
        self,
        spots: SpotCatalog[Activation],
        spot_id: SpotId | None,
        spot_type: StableTypeName,
    ) -> None:
        node = spots.node
        super().__init__(node)
        self._spots = spots
        self._spot_id = spot_id
        self._spot_type = spot_type
        self._request: object | None = None
        self._mesh: MeshName | None = None
        self._timeout = node.config.request_timeout

    def request(self, message: object) -> SpotCreateCall:
        """The message ``on_create`` receives."""
        self._option("request")
        self._request = message
        return self

    def in_mesh(self, name: str) -> SpotCreateCall:
        """The mesh to create the Spot in (this host's own mesh only, for now)."""
        mesh = name if isinstance(name, MeshName) else MeshName(name)
        self._option("in_mesh")
        self._mesh = mesh
        return self

    def timeout(self, seconds: float) -> SpotCreateCall:
        """One deadline for the whole creation; the default is ``HostConfig.request_timeout``."""
        checked = check_timeout(seconds, "timeout")
        self._option("timeout")
        self._timeout = checked
        return self

    async def submit(self) -> SpotCreateResult:
        """The typed result: ``CREATED``, ``EXISTING`` or ``REJECTED`` with the ``SpotRef``."""
        self._terminal()
        return await self._run()

    async def yield_(self) -> SpotCreateResult:
        """As ``submit()``, giving the Spot's gate back while waiting."""
        return await self._yielding(self._run)

    def submit_sync(self) -> SpotCreateResult:
        """``submit()`` for an application thread, blocking it (not allowed in a Trio task)."""
        return self._blocking(self._run)

    async def _run(self) -> SpotCreateResult:
        return await creation.create(
            self._spots,
            self._spot_id,
            self._spot_type,
            self._request,
            self._mesh,
            self._timeout,
        )
