"""Single-use call objects and their terminals (specs/api.md API-8..API-13; specs/completion.md
CMP-2.1, CMP-2.3, CMP-2.6, CMP-2.7, CMP-4.8, CMP-5.15; specs/spots.md SPOT-6, SPOT-17, SPOT-77,
SPOT-78).

Rule 1: options and terminals are checked before anything is submitted. Options chain and submit
nothing (API-10); a repeated option, an option after a terminal, or a second terminal raises
``ZLinkError(INVALID_OPERATION)`` and submits nothing (API-8, API-9).
Rule 2: ``submit()`` is a coroutine function, so an un-awaited call submits nothing (CMP-2.3).
Rule 3: ``submit_sync()`` is for application threads: from any thread running a Trio loop it
raises ``INVALID_OPERATION`` at once (CMP-2.6); elsewhere it runs the call on the host's loop
through the host's Trio token and blocks only its own thread (CMP-4.8).
Rule 4: ``yield_()`` exists only where seed 000 allows it (requests and creates, SPOT-77) and
only inside a Spot turn that has a gate; elsewhere it raises ``INVALID_OPERATION`` before
submitting or touching a gate (SPOT-78). It gives the gate back while it waits (CMP-2.7).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

import trio

from zlink_trio._runtime import creation, messaging
from zlink_trio._runtime.config import check_timeout
from zlink_trio._runtime.gate import current_turn
from zlink_trio._runtime.mailbox import InstanceChoice
from zlink_trio._runtime.node import LocalNode
from zlink_trio._runtime.spot import SpotCreateResult
from zlink_trio.errors import ErrorKind, ZLinkError
from zlink_trio.ids import ActorId, MeshName, SpotId, StableTypeName

__all__ = [
    "ActorRequestCall",
    "ActorSendCall",
    "SpotCreateCall",
    "SpotRequestCall",
    "SpotSendCall",
]

R = TypeVar("R")
T = TypeVar("T")


def _invalid(message: str) -> ZLinkError:
    return ZLinkError(ErrorKind.INVALID_OPERATION, message)


class _SingleUse:
    """Options set at most once each, and one terminal (Rule 1)."""

    def __init__(self, node: LocalNode) -> None:
        self._node = node
        self._options: set[str] = set()
        self._submitted = False

    def _option(self, name: str) -> None:
        if self._submitted:
            raise _invalid(f"{name}() after a terminal: a call object is single-use")
        if name in self._options:
            raise _invalid(f"{name}() was already set on this call")
        self._options.add(name)

    def _terminal(self) -> None:
        if self._submitted:
            raise _invalid("this call was already submitted: a call object takes one terminal")
        self._submitted = True

    def _blocking(self, run: Callable[[], Awaitable[T]]) -> T:
        try:
            trio.lowlevel.current_task()
        except RuntimeError:
            pass  # not inside a Trio loop: an application thread, as submit_sync() requires
        else:
            raise _invalid("submit_sync() cannot run inside a Trio task; use await submit()")
        self._terminal()
        try:
            return trio.from_thread.run(run, trio_token=self._node.token)
        except trio.RunFinishedError:
            raise ZLinkError(ErrorKind.SHUTTING_DOWN, "the host has shut down") from None

    async def _yielding(self, run: Callable[[], Awaitable[T]]) -> T:
        turn = current_turn()
        if turn is None or turn.gate is None:
            raise _invalid(
                "yield_() is allowed only inside a turn of a SPOT_WIDE User Spot (its member "
                "Actors included) or of an Instance Spot"
            )
        self._terminal()
        return await turn.wait_outside(run)


def _declared_reply(node: LocalNode, reply_type: type[R]) -> type[R]:
    """``reply_type`` if it is a declared message class; ``TypeError`` otherwise."""
    if not isinstance(reply_type, type):
        raise TypeError(f"reply_type takes a class, not {reply_type!r}")
    if not node.registry.is_message(reply_type):
        raise TypeError(f"reply_type {reply_type.__qualname__} is not declared with @app.message")
    return reply_type


class _Carrying(_SingleUse):
    """What every send and request shares: a declared message and its metadata."""

    def __init__(self, node: LocalNode, message: object) -> None:
        super().__init__(node)
        if not node.registry.is_message(type(message)):
            raise TypeError(
                f"{type(message).__qualname__} is not declared with @app.message, so it cannot "
                "be sent"
            )
        self._message = message
        self._metadata: dict[str, str] = {}

    def _add_metadata(self, key: str, value: str) -> None:
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError("metadata takes a str key and a str value")
        self._option(f"metadata[{key!r}]")
        self._metadata[key] = value


class _Addressed(_Carrying):
    """What Spot sends and requests add: instance_spot and in_mesh."""

    def __init__(self, node: LocalNode, spot_id: SpotId, message: object) -> None:
        super().__init__(node, message)
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
        await messaging.send(
            self._node,
            self._spot_id,
            self._message,
            self._metadata,
            self._instance,
            self._mesh,
        )


class SpotRequestCall(_Addressed, Generic[R]):
    """A request to a Spot whose reply is a ``reply_type`` instance (single-use)."""

    def __init__(
        self, node: LocalNode, spot_id: SpotId, message: object, reply_type: type[R]
    ) -> None:
        super().__init__(node, spot_id, message)
        self._reply_type = _declared_reply(node, reply_type)
        self._timeout = node.config.request_timeout

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
        return await messaging.request(  # type: ignore[return-value]  # checked isinstance(reply, R)
            self._node,
            self._spot_id,
            self._message,
            self._reply_type,
            self._metadata,
            self._instance,
            self._mesh,
            self._timeout,
        )


class SpotCreateCall(_SingleUse):
    """``spots.create`` / ``spots.get_or_create``; its result is a ``SpotCreateResult``."""

    def __init__(
        self,
        node: LocalNode,
        spot_id: SpotId | None,
        spot_type: StableTypeName,
    ) -> None:
        super().__init__(node)
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
            self._node,
            self._spot_id,
            self._spot_type,
            self._request,
            self._mesh,
            self._timeout,
        )


class _ToActor(_Carrying):
    """What Actor sends and requests add: the target id alone. An Actor is addressed by its id:
    no mesh, ref, node or Spot (ACT-14)."""

    def __init__(self, node: LocalNode, actor_id: ActorId, message: object) -> None:
        super().__init__(node, message)
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
        await messaging.send_actor(self._node, self._actor_id, self._message, self._metadata)


class ActorRequestCall(_ToActor, Generic[R]):
    """A request to an Actor whose reply is a ``reply_type`` instance (single-use)."""

    def __init__(
        self, node: LocalNode, actor_id: ActorId, message: object, reply_type: type[R]
    ) -> None:
        super().__init__(node, actor_id, message)
        self._reply_type = _declared_reply(node, reply_type)
        self._timeout = node.config.request_timeout

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
        return await messaging.request_actor(  # type: ignore[return-value]  # checked isinstance
            self._node,
            self._actor_id,
            self._message,
            self._reply_type,
            self._metadata,
            self._timeout,
        )
