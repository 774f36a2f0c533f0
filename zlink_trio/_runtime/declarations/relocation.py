"""Relocation as an application declares it: the policy of a Spot or Actor type, the adapter
bases, their start-up checks, and the payload rules of one capture or restore
(specs/relocation.md RELOC-1..RELOC-5, RELOC-9..RELOC-12, RELOC-24).

Nothing here moves anything: the move itself (sealing, chunks over the mesh, the authority
switch) is issue 14's later work and will call :func:`capture_payload` and
:func:`restore_payload`, so that the payload rules hold wherever an adapter is called.

Rule 1: a policy is a small frozen value. ``disable_relocation()``, ``recreate_on_relocation()``
and ``preserve_state_with(AdapterClass)`` make it; a decorator's ``relocation=`` takes it and
``freeze()`` checks it against the declared type (:func:`resolve_policy`), listing every
problem in the one ``ConfigurationError`` of start-up (REG-5.11), before any bind (RELOC-3).
Rule 2: the adapter API is bytes only (RELOC-5). ``capture`` gives bytes, ``restore`` takes
bytes; there is no state class, no state contract id and no message-typed surface.
Rule 3: an adapter's fault is one typed error. An exception from ``capture`` or ``restore``,
or a capture that is not bytes-like, is :class:`AdapterFailure` with the cause chained
(RELOC-11); cancellation is not a fault and passes through untouched.
"""

from __future__ import annotations

import abc
import inspect
import typing
from typing import Any, Generic, Literal, TypeVar

import attrs

__all__ = [
    "ActorRelocationAdapter",
    "AdapterFailure",
    "RelocationPolicy",
    "SpotRelocationAdapter",
    "capture_payload",
    "disable_relocation",
    "preserve_state_with",
    "recreate_on_relocation",
    "resolve_policy",
    "restore_payload",
]

T = TypeVar("T")

PolicyKind = Literal["disable", "recreate", "preserve_state"]
_KINDS: frozenset[str] = frozenset(typing.get_args(PolicyKind))


# --- the policy ---------------------------------------------------------------------------------


def _check_kind(_policy: object, _attribute: object, value: object) -> None:
    if value not in _KINDS:
        raise ValueError(f"a relocation policy's kind is one of {sorted(_KINDS)}, not {value!r}")


@attrs.frozen
class RelocationPolicy:
    """What happens to a Spot or Actor type when its host relocates it (RELOC-1).

    Made by :func:`disable_relocation`, :func:`recreate_on_relocation` or
    :func:`preserve_state_with` and given to a decorator's ``relocation=``. Two policies are
    equal when they say the same, so ``policy == zl.recreate_on_relocation()`` works.
    """

    kind: PolicyKind = attrs.field(validator=_check_kind)
    """``"disable"``: the type does not move; ``"recreate"``: a fresh instance is made on the
    target and no state moves; ``"preserve_state"``: the adapter captures and restores it."""
    adapter: type | None = None
    """The adapter class of a ``"preserve_state"`` policy; ``None`` for the other two."""

    def __attrs_post_init__(self) -> None:
        if (self.kind == "preserve_state") != (self.adapter is not None):
            raise ValueError("only a preserve_state policy names an adapter class, and it must")


def disable_relocation() -> RelocationPolicy:
    """The type never moves between hosts; the default of every type but a PER_ACTOR User Spot
    (RELOC-2)."""
    return RelocationPolicy("disable")


def recreate_on_relocation() -> RelocationPolicy:
    """The type is made anew on the target when its host relocates it: no adapter is called and
    no state moves; the only policy of a PER_ACTOR User Spot (RELOC-24)."""
    return RelocationPolicy("recreate")


def preserve_state_with(adapter: type) -> RelocationPolicy:
    """The type's state moves through ``adapter``: a :class:`SpotRelocationAdapter` subclass for
    a Spot, an :class:`ActorRelocationAdapter` subclass for an Actor, made by the runtime with
    no arguments. ``TypeError`` at once when ``adapter`` is not a class; whether it fits the
    declared type is checked when a host starts (RELOC-3)."""
    if not isinstance(adapter, type):
        raise TypeError(f"preserve_state_with takes an adapter class, not {adapter!r}")
    return RelocationPolicy("preserve_state", adapter)


# --- the adapter bases --------------------------------------------------------------------------


class SpotRelocationAdapter(abc.ABC, Generic[T]):
    """Captures a Spot's state as opaque bytes on the source host and restores it into a fresh
    instance on the target (RELOC-4, RELOC-5). Subclass it as ``SpotRelocationAdapter[MySpot]``
    and name the subclass in ``zl.preserve_state_with``; the runtime makes it with no arguments.

    Both methods may run more than once for one relocation, also beside a stale attempt, so they
    must be safe to repeat (RELOC-22).
    """

    @abc.abstractmethod
    async def capture(self, target: T) -> bytes:
        """The state of ``target`` (the Spot instance) as bytes; ``b""`` is a valid state and
        there is no size limit of the adapter's own (RELOC-9). A ``bytearray`` or
        ``memoryview`` is copied when this returns, so changing it later changes nothing
        (RELOC-10)."""

    @abc.abstractmethod
    async def restore(self, target: T, payload: bytes) -> None:
        """Put the state in ``payload`` into ``target``, a fresh instance on the target host.
        ``payload`` is an immutable copy of the captured bytes made for this call; do not keep
        it after returning (RELOC-12)."""


class ActorRelocationAdapter(abc.ABC, Generic[T]):
    """Captures an Actor's state as opaque bytes and restores it into a fresh instance, as
    :class:`SpotRelocationAdapter` does for a Spot (RELOC-4, RELOC-5). Subclass it as
    ``ActorRelocationAdapter[MyActor]``; the runtime makes it with no arguments."""

    @abc.abstractmethod
    async def capture(self, target: T) -> bytes:
        """The state of ``target`` (the Actor instance) as bytes; see
        :meth:`SpotRelocationAdapter.capture`."""

    @abc.abstractmethod
    async def restore(self, target: T, payload: bytes) -> None:
        """Put the state in ``payload`` into ``target``; see
        :meth:`SpotRelocationAdapter.restore`."""


Adapter = SpotRelocationAdapter[Any] | ActorRelocationAdapter[Any]


# --- the start-up checks ------------------------------------------------------------------------


def resolve_policy(
    where: str,
    declared: type,
    policy: RelocationPolicy | None,
    *,
    actor: bool,
    per_actor: bool,
    problems: list[str],
) -> RelocationPolicy:
    """The policy of the type ``declared`` (named ``where``), its default when ``policy`` is
    ``None``: ``recreate_on_relocation()`` for a PER_ACTOR User Spot, ``disable_relocation()``
    for everything else (RELOC-2). What does not fit is appended to ``problems`` (RELOC-3,
    RELOC-24)."""
    if policy is None:
        return recreate_on_relocation() if per_actor else disable_relocation()
    if per_actor and policy != recreate_on_relocation():
        problems.append(
            f"{where}: a PER_ACTOR User Spot allows only recreate_on_relocation(), "
            f"not {_describe(policy)}"
        )
    if policy.adapter is not None:
        base: type = ActorRelocationAdapter if actor else SpotRelocationAdapter
        problems.extend(
            f"{where}: {problem}" for problem in _adapter_problems(policy.adapter, declared, base)
        )
    return policy


def _describe(policy: RelocationPolicy) -> str:
    if policy.adapter is not None:
        return f"preserve_state_with({policy.adapter.__qualname__})"
    return "disable_relocation()" if policy.kind == "disable" else "recreate_on_relocation()"


def _adapter_problems(adapter: type, declared: type, base: type) -> list[str]:
    name = adapter.__qualname__
    if not issubclass(adapter, base):
        return [f"the adapter {name} is not a subclass of zl.{base.__name__}"]
    problems: list[str] = []
    target = _adapted_type(adapter, base)
    if target is not None and not issubclass(declared, target):
        problems.append(
            f"the adapter {name} adapts {target.__qualname__}, which {declared.__qualname__} "
            "does not extend"
        )
    for method in ("capture", "restore"):
        function = getattr(adapter, method)
        if getattr(function, "__isabstractmethod__", False):
            problems.append(f"the adapter {name} does not define {method}")
        elif not inspect.iscoroutinefunction(function):
            problems.append(f"the adapter {name}'s {method} must be an async def")
    try:
        inspect.signature(adapter).bind()
    except TypeError:
        problems.append(f"the adapter {name} cannot be made without arguments")
    except ValueError:  # no signature to read (a class made in C): nothing to check
        pass
    return problems


def _adapted_type(adapter: type, base: type) -> type | None:
    """The class in ``base[...]`` among the bases ``adapter`` was declared with, when it is one
    (a type variable or a string says nothing to check)."""
    for klass in adapter.__mro__:
        for declared_base in klass.__dict__.get("__orig_bases__", ()):
            if typing.get_origin(declared_base) is base:
                (argument,) = typing.get_args(declared_base)
                return argument if isinstance(argument, type) else None
    return None


# --- one capture, one restore -------------------------------------------------------------------


class AdapterFailure(Exception):
    """A relocation adapter raised or broke its contract; the cause, when there is one, is
    ``__cause__`` (RELOC-11). Internal: the move turns it into its outcome (RELOC-18..RELOC-20)."""

    def __init__(self, stage: Literal["capture", "restore"], adapter: object, problem: str) -> None:
        super().__init__(f"{stage} of {type(adapter).__qualname__}: {problem}")
        self.stage = stage


async def capture_payload(adapter: Adapter, target: object) -> bytes:
    """What ``adapter.capture(target)`` returned, as immutable ``bytes`` of the runtime's own
    (RELOC-10): a ``bytearray`` or ``memoryview`` is copied now. ``b""`` is a payload and no
    size is refused (RELOC-9). :class:`AdapterFailure` when capture raises or returns anything
    but ``bytes``, ``bytearray`` or ``memoryview`` (RELOC-11)."""
    try:
        captured: object = await adapter.capture(target)
    except Exception as error:
        raise AdapterFailure("capture", adapter, f"raised {error!r}") from error
    if type(captured) is bytes:
        return captured  # immutable already: nothing the application holds can change it
    if not isinstance(captured, bytes | bytearray | memoryview):
        raise AdapterFailure(
            "capture",
            adapter,
            f"returned {type(captured).__name__}, not bytes (a contract violation)",
        )
    try:
        # Through the buffer, never bytes(x): a bytes subclass's __bytes__ could return anything.
        return memoryview(captured).tobytes()
    except ValueError as error:  # a released memoryview
        raise AdapterFailure("capture", adapter, f"returned a memoryview: {error}") from error


async def restore_payload(
    adapter: Adapter, target: object, payload: bytes | bytearray | memoryview
) -> None:
    """Call ``adapter.restore(target, copy)`` with ``copy`` a new immutable ``bytes`` object
    equal to ``payload``, made for this call, so the original the source keeps is never the
    object an adapter holds (RELOC-12, RELOC-15). :class:`AdapterFailure` when restore raises."""
    fresh = memoryview(payload).tobytes()
    try:
        await adapter.restore(target, fresh)
    except Exception as error:
        raise AdapterFailure("restore", adapter, f"raised {error!r}") from error
