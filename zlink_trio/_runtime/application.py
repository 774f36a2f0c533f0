"""Declaring an application and validating it once (specs/registration.md REG-5.1..REG-5.6,
REG-5.8, REG-5.10..REG-5.12, REG-7.1, REG-7.2; specs/spots.md SPOT-66, SPOT-79, SPOT-80).

Rule 1: decorators record, ``freeze()`` decides. A decorator refuses only what it can see alone
(a bad name, a class of the wrong base); everything that needs the whole application (duplicate
names, handlers for undeclared messages, exclusive options) is found by ``freeze()``, which
lists every problem in one ``ConfigurationError`` (REG-5.11).
Rule 2: once frozen, always frozen. The first successful ``freeze()`` builds one immutable
:class:`Registry`; every later host gets the same one, and declaring more raises
``ConfigurationError`` (REG-5.2). Lookups while serving read only the registry (REG-5.3).
"""

from __future__ import annotations

import inspect
import typing
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import attrs

from zlink_trio._runtime.actor import Actor
from zlink_trio._runtime.handlers import HandlerKind, mark_of, timer_name_of
from zlink_trio._runtime.spot import EntrySpot, InstanceSpot, Spot
from zlink_trio._wire.payload import MessageTypes
from zlink_trio.errors import ConfigurationError
from zlink_trio.ids import SpotKind, StableTypeName
from zlink_trio.options import RelocationCoordinationMode, SpotFactoryMode

__all__ = ["ActorType", "Application", "Handler", "Registry", "SpotType"]

C = TypeVar("C", bound=type)


@attrs.frozen
class Handler:
    """One validated handler of a Spot type."""

    kind: HandlerKind
    name: str
    """The method's name on the Spot class."""
    message_type: type
    reply_type: type | None
    takes_context: bool


@attrs.frozen
class SpotType:
    """One validated Spot declaration: its kind, class, options and handler table."""

    name: StableTypeName
    kind: SpotKind
    cls: type
    mode: SpotFactoryMode
    relocation: RelocationCoordinationMode
    handlers: Mapping[type, Handler]
    timers: Mapping[str, str] = attrs.field(factory=dict)
    """Timer name -> the method declared with ``@zl.timer_handler(name)`` (TIMER-12)."""


@attrs.frozen
class ActorType:
    """One validated Actor declaration: its stable type, class and handler table."""

    name: StableTypeName
    cls: type
    handlers: Mapping[type, Handler]


DEFAULT_ENTRY_TYPE = StableTypeName("zlink.EntrySpot")
"""The stable type of the Entry Spot when the application declares none of its own."""


@attrs.frozen
class Registry:
    """The frozen declarations a host serves; never changes after start (REG-5.3)."""

    messages: MessageTypes
    spot_types: Mapping[StableTypeName, SpotType]
    actor_types: Mapping[StableTypeName, ActorType] = attrs.field(factory=dict)
    entry_type: SpotType = attrs.field(
        factory=lambda: SpotType(
            DEFAULT_ENTRY_TYPE,
            SpotKind.ENTRY,
            EntrySpot,
            SpotFactoryMode.SPOT_WIDE,
            RelocationCoordinationMode.FRAMEWORK_MANAGED,
            {},
        )
    )
    """The Entry Spot type: the application's ``@app.entry_spot`` class or the base class."""

    def instance_types(self) -> list[SpotType]:
        """The declared Instance Spot types, in declaration order."""
        return [t for t in self.spot_types.values() if t.kind is SpotKind.INSTANCE]

    def is_message(self, cls: type) -> bool:
        """Whether ``cls`` is a declared message class."""
        try:
            self.messages.name_of(cls)
        except TypeError:
            return False
        return True


@attrs.define
class _SpotDeclaration:
    name: StableTypeName
    kind: SpotKind
    cls: type
    mode: SpotFactoryMode
    relocation: RelocationCoordinationMode


class Application:
    """The declarations of one application: message types and Spot types with their handlers.

    Declare with the decorators, then start hosts with ``open_host(app, config)``; the first
    host to start validates everything once and freezes the declarations (REG-5.1, REG-5.2).
    """

    def __init__(self) -> None:
        self._messages: list[tuple[StableTypeName, type]] = []
        self._spots: list[_SpotDeclaration] = []
        self._actors: list[tuple[StableTypeName, type]] = []
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
        relocation: RelocationCoordinationMode = RelocationCoordinationMode.FRAMEWORK_MANAGED,
    ) -> Callable[[C], C]:
        """Declare a :class:`~zlink_trio.Spot` subclass as a User Spot type under ``name``."""
        return self._spot_decorator(name, SpotKind.USER, Spot, mode, relocation)

    def instance_spot(self, name: str) -> Callable[[C], C]:
        """Declare an :class:`~zlink_trio.InstanceSpot` subclass as an Instance Spot type."""
        return self._spot_decorator(
            name,
            SpotKind.INSTANCE,
            InstanceSpot,
            SpotFactoryMode.SPOT_WIDE,
            RelocationCoordinationMode.FRAMEWORK_MANAGED,
        )

    def entry_spot(self, cls: C) -> C:
        """Declare an :class:`~zlink_trio.EntrySpot` subclass as this application's Entry Spot
        (at most one); without one, every host runs the base ``EntrySpot``, which accepts every
        new Actor."""
        self._check_open()
        if not (isinstance(cls, type) and issubclass(cls, EntrySpot)):
            raise TypeError(f"@entry_spot takes a subclass of zl.EntrySpot, not {cls!r}")
        name = StableTypeName(f"{cls.__module__}.{cls.__qualname__}"[-255:])
        self._spots.append(
            _SpotDeclaration(
                name,
                SpotKind.ENTRY,
                cls,
                SpotFactoryMode.SPOT_WIDE,
                RelocationCoordinationMode.FRAMEWORK_MANAGED,
            )
        )
        return cls

    def actor(self, name: str) -> Callable[[C], C]:
        """Declare a :class:`~zlink_trio.Actor` subclass as an Actor type under ``name``."""
        type_name = StableTypeName(name)
        self._check_open()

        def declare(cls: C) -> C:
            self._check_open()
            if not (isinstance(cls, type) and issubclass(cls, Actor)):
                raise TypeError(f"{type_name} must be a subclass of zl.Actor: {cls!r}")
            self._actors.append((type_name, cls))
            return cls

        return declare

    def _spot_decorator(
        self,
        name: str,
        kind: SpotKind,
        base: type,
        mode: object,
        relocation: object,
    ) -> Callable[[C], C]:
        type_name = StableTypeName(name)
        if not isinstance(mode, SpotFactoryMode):
            raise TypeError(f"mode takes a SpotFactoryMode, not {mode!r}")
        if not isinstance(relocation, RelocationCoordinationMode):
            raise TypeError(f"relocation takes a RelocationCoordinationMode, not {relocation!r}")
        self._check_open()

        def declare(cls: C) -> C:
            self._check_open()
            if not (isinstance(cls, type) and issubclass(cls, base)):
                raise TypeError(f"{type_name} must be a subclass of zl.{base.__name__}: {cls!r}")
            self._spots.append(_SpotDeclaration(type_name, kind, cls, mode, relocation))
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
            self._registry = _validate(self._messages, self._spots, self._actors)
        return self._registry


def _validate(
    messages: list[tuple[StableTypeName, type]],
    spots: list[_SpotDeclaration],
    actors: list[tuple[StableTypeName, type]],
) -> Registry:
    problems: list[str] = []
    message_types = MessageTypes()
    taken: dict[StableTypeName, str] = {}
    for name, cls in messages:
        if name in taken:
            problems.append(
                f"{name} is declared twice (as {taken[name]} and as message {cls.__qualname__})"
            )
            continue
        try:
            message_types.register(name, cls)
        except ValueError as error:
            problems.append(str(error))
            continue
        taken[name] = f"message {cls.__qualname__}"
    try:
        message_types.check()
    except ValueError as error:
        problems.append(str(error))

    def declared(cls: type) -> bool:
        try:
            message_types.name_of(cls)
        except TypeError:
            return False
        return True

    spot_types: dict[StableTypeName, SpotType] = {}
    entry_types: list[SpotType] = []
    for declaration in spots:
        label = f"{declaration.kind.name.lower()} spot {declaration.cls.__qualname__}"
        if declaration.kind is SpotKind.ENTRY:
            entry_types.append(
                SpotType(
                    declaration.name,
                    declaration.kind,
                    declaration.cls,
                    declaration.mode,
                    declaration.relocation,
                    _handlers_of(declaration.name, declaration.cls, declared, problems),
                    _timers_of(declaration, problems),
                )
            )
            continue
        if declaration.name in taken:
            problems.append(
                f"{declaration.name} is declared twice (as {taken[declaration.name]} "
                f"and as {label})"
            )
            continue
        taken[declaration.name] = label
        if (
            declaration.mode is SpotFactoryMode.PER_ACTOR
            and declaration.relocation is RelocationCoordinationMode.APPLICATION_SIGNALED
        ):
            problems.append(
                f"{declaration.name}: APPLICATION_SIGNALED is allowed only with SPOT_WIDE, "
                "not PER_ACTOR"
            )
        handlers = _handlers_of(declaration.name, declaration.cls, declared, problems)
        spot_types[declaration.name] = SpotType(
            declaration.name,
            declaration.kind,
            declaration.cls,
            declaration.mode,
            declaration.relocation,
            handlers,
            _timers_of(declaration, problems),
        )
    if len(entry_types) > 1:
        names = ", ".join(t.cls.__qualname__ for t in entry_types)
        problems.append(f"an application has one Entry Spot; @entry_spot marks {names}")
    actor_types: dict[StableTypeName, ActorType] = {}
    for name, cls in actors:
        label = f"actor {cls.__qualname__}"
        if name in taken:
            problems.append(f"{name} is declared twice (as {taken[name]} and as {label})")
            continue
        taken[name] = label
        for attribute in dir(cls):
            if timer_name_of(getattr(cls, attribute, None)) is not None:
                problems.append(
                    f"{name}.{attribute}: Actor timers are not supported by this runtime; "
                    "put the timer on the Actor's Spot"
                )
        actor_types[name] = ActorType(name, cls, _handlers_of(name, cls, declared, problems))
    if problems:
        raise ConfigurationError(problems)
    if entry_types:
        return Registry(message_types, spot_types, actor_types, entry_types[0])
    return Registry(message_types, spot_types, actor_types)


def _handlers_of(
    type_name: StableTypeName,
    cls: type,
    declared: Callable[[type], bool],
    problems: list[str],
) -> dict[type, Handler]:
    handlers: dict[type, Handler] = {}
    for attribute in dir(cls):
        function = getattr(cls, attribute, None)
        mark = mark_of(function)
        if mark is None:
            continue
        where = f"{type_name}.{attribute}"
        message = mark.message_type
        if not declared(message):
            problems.append(
                f"{where} handles {message.__qualname__}, which is not declared with @app.message"
            )
        reply = mark.reply_type
        if mark.kind is HandlerKind.REQUEST:
            if reply is None:
                reply = _return_annotation(function)
            if reply is None:
                problems.append(
                    f"{where} is a request handler without a reply type: pass reply= or "
                    "annotate the return type with a declared message class"
                )
            elif not declared(reply):
                problems.append(
                    f"{where} replies with {reply.__qualname__}, which is not declared with "
                    "@app.message"
                )
        if message in handlers:
            problems.append(
                f"{type_name} has two handlers for {message.__qualname__}: "
                f"{handlers[message].name} and {attribute}"
            )
            continue
        handlers[message] = Handler(mark.kind, attribute, message, reply, mark.takes_context)
    return handlers


def _timers_of(declaration: _SpotDeclaration, problems: list[str]) -> dict[str, str]:
    timers: dict[str, str] = {}
    for attribute in dir(declaration.cls):
        function = getattr(declaration.cls, attribute, None)
        name = timer_name_of(function)
        if name is None:
            continue
        where = f"{declaration.name}.{attribute}"
        if mark_of(function) is not None:
            problems.append(f"{where} is declared both as a timer handler and a message handler")
            continue
        if name in timers:
            problems.append(
                f"{declaration.name} has two handlers for timer {name!r}: "
                f"{timers[name]} and {attribute}"
            )
            continue
        timers[name] = attribute
    return timers


def _return_annotation(function: Any) -> type | None:
    try:
        hints = typing.get_type_hints(function)
    except Exception:  # an unresolvable annotation is reported as "no reply type"
        return None
    reply = hints.get("return")
    return reply if inspect.isclass(reply) and reply is not type(None) else None
