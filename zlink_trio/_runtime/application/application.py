"""Declaring an application: its messages, Spot types, Entry Spot and Actor types
(specs/registration.md REG-5.1, REG-5.2, REG-5.10, REG-5.11; specs/spots.md SPOT-66;
specs/relocation.md RELOC-1, RELOC-2).

Rule 1: decorators record, ``freeze()`` decides. A decorator refuses only what it can see alone
(a bad name, a class of the wrong base); everything that needs the whole application is found
by ``freeze()`` (declarations/registry.py), which lists every problem in one
``ConfigurationError`` (REG-5.11).
Rule 2: once frozen, always frozen. The first successful ``freeze()`` builds one immutable
``Registry``; every later host gets the same one, and declaring more raises
``ConfigurationError`` (REG-5.2).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

import attrs

from zlink_trio._runtime.application.bases import (
    Actor,
    DefaultEntrySpot,
    EntrySpot,
    InstanceSpot,
    Spot,
)
from zlink_trio._runtime.declarations.registry import (
    ActorDeclaration,
    Registry,
    SpotDeclaration,
    validate,
)
from zlink_trio._runtime.declarations.relocation import RelocationPolicy
from zlink_trio.errors import ConfigurationError
from zlink_trio.ids import SpotKind, StableTypeName
from zlink_trio.options import RelocationCoordinationMode, SpotFactoryMode

__all__ = ["Application"]

C = TypeVar("C", bound=type)


class Application:
    """The declarations of one application: message types and Spot types with their handlers.

    Declare with the decorators, then start hosts with ``open_host(app, config)``; the first
    host to start validates everything once and freezes the declarations (REG-5.1, REG-5.2).
    """

    def __init__(self) -> None:
        self._messages: list[tuple[StableTypeName, type]] = []
        self._spots: list[SpotDeclaration] = []
        self._actors: list[ActorDeclaration] = []
        self._registry: Registry | None = None

    def message(self, name: str) -> Callable[[C], C]:
        """Declare an ``attrs`` class as an application message under the stable ``name``."""
        type_name = StableTypeName(name)
        self._check_open()

        def declare(cls: C) -> C:
            self._check_open()
            is_attrs_class = isinstance(cls, type) and attrs.has(cls)  # kept apart: has() narrows
            if not is_attrs_class:
                raise TypeError(f"@message({name!r}) takes an attrs class, not {cls!r}")
            self._messages.append((type_name, cls))
            return cls

        return declare

    def user_spot(
        self,
        name: str,
        *,
        mode: SpotFactoryMode = SpotFactoryMode.SPOT_WIDE,
        coordination: RelocationCoordinationMode = RelocationCoordinationMode.FRAMEWORK_MANAGED,
        relocation: RelocationPolicy | None = None,
    ) -> Callable[[C], C]:
        """Declare a :class:`~zlink_trio.Spot` subclass as a User Spot type under ``name``.

        ``mode`` is how its turns run (SPOT-66), ``coordination`` who picks the moment of a
        relocation (SPOT-79), ``relocation`` what a relocation does to it: a policy from
        ``zl.disable_relocation()`` (the default), ``zl.recreate_on_relocation()`` (the default,
        and the only choice, of a PER_ACTOR Spot) or ``zl.preserve_state_with(Adapter)``
        (RELOC-1, RELOC-2, RELOC-24)."""
        return self._spot_decorator(name, SpotKind.USER, Spot, mode, coordination, relocation)

    def instance_spot(
        self, name: str, *, relocation: RelocationPolicy | None = None
    ) -> Callable[[C], C]:
        """Declare an :class:`~zlink_trio.InstanceSpot` subclass as an Instance Spot type;
        ``relocation`` as for :meth:`user_spot`, ``zl.disable_relocation()`` by default."""
        return self._spot_decorator(
            name,
            SpotKind.INSTANCE,
            InstanceSpot,
            SpotFactoryMode.SPOT_WIDE,
            RelocationCoordinationMode.FRAMEWORK_MANAGED,
            relocation,
        )

    def entry_spot(self, cls: C) -> C:
        """Declare an :class:`~zlink_trio.EntrySpot` subclass as this application's Entry Spot
        (at most one); without one, every host runs the framework's own Entry Spot, which
        accepts every new Actor."""
        self._check_open()
        if not (isinstance(cls, type) and issubclass(cls, EntrySpot)):
            raise TypeError(f"@entry_spot takes a subclass of zl.EntrySpot, not {cls!r}")
        name = StableTypeName(f"{cls.__module__}.{cls.__qualname__}"[-255:])
        self._spots.append(
            SpotDeclaration(
                name,
                SpotKind.ENTRY,
                cls,
                SpotFactoryMode.SPOT_WIDE,
                RelocationCoordinationMode.FRAMEWORK_MANAGED,
            )
        )
        return cls

    def actor(self, name: str, *, relocation: RelocationPolicy | None = None) -> Callable[[C], C]:
        """Declare a :class:`~zlink_trio.Actor` subclass as an Actor type under ``name``;
        ``relocation`` is ``zl.disable_relocation()`` (the default),
        ``zl.recreate_on_relocation()`` or ``zl.preserve_state_with(ActorAdapter)`` (RELOC-1)."""
        type_name = StableTypeName(name)
        _check_policy(relocation)
        self._check_open()

        def declare(cls: C) -> C:
            self._check_open()
            if not (isinstance(cls, type) and issubclass(cls, Actor)):
                raise TypeError(f"{type_name} must be a subclass of zl.Actor: {cls!r}")
            self._actors.append(ActorDeclaration(type_name, cls, relocation))
            return cls

        return declare

    def _spot_decorator(
        self,
        name: str,
        kind: SpotKind,
        base: type,
        mode: object,
        coordination: object,
        relocation: object,
    ) -> Callable[[C], C]:
        type_name = StableTypeName(name)
        if not isinstance(mode, SpotFactoryMode):
            raise TypeError(f"mode takes a SpotFactoryMode, not {mode!r}")
        if not isinstance(coordination, RelocationCoordinationMode):
            raise TypeError(
                f"coordination takes a RelocationCoordinationMode, not {coordination!r}"
            )
        policy = _check_policy(relocation)
        self._check_open()

        def declare(cls: C) -> C:
            self._check_open()
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"{type_name} must be a subclass of zl.{base.__name__}: {cls!r}")
            self._spots.append(SpotDeclaration(type_name, kind, cls, mode, coordination, policy))
            return cls

        return declare

    def _check_open(self) -> None:
        if self._registry is not None:
            raise ConfigurationError(
                "the application is frozen: a host has started from it, so it takes no more "
                "declarations"
            )

    def freeze(self) -> Registry:
        """Validate every declaration once and return the frozen registry (the same one on
        every later call); ``ConfigurationError`` lists every problem and freezes nothing."""
        if self._registry is None:
            self._registry = validate(self._messages, self._spots, self._actors, DefaultEntrySpot)
        return self._registry


def _check_policy(relocation: object) -> RelocationPolicy | None:
    if relocation is None or isinstance(relocation, RelocationPolicy):
        return relocation
    if isinstance(relocation, RelocationCoordinationMode):
        # relocation= took the coordination mode before it took a policy (DEC-24).
        raise TypeError(
            f"relocation takes a relocation policy (zl.disable_relocation(), ...), not "
            f"{relocation!r}; a RelocationCoordinationMode goes to coordination="
        )
    raise TypeError(
        "relocation takes zl.disable_relocation(), zl.recreate_on_relocation() or "
        f"zl.preserve_state_with(Adapter), not {relocation!r}"
    )
