"""The frozen registry of an application's declarations and their one-time validation
(specs/registration.md REG-5.1..REG-5.6,
REG-5.8, REG-5.10..REG-5.12, REG-7.1, REG-7.2; specs/spots.md SPOT-66, SPOT-79, SPOT-80;
specs/relocation.md RELOC-2, RELOC-3, RELOC-24: the relocation checks are ``relocation.py``).

The decorators that record declarations are ``application/application.py``; this module knows
only the declared classes, never the base classes they extend, so the registry sits below the
Spot and Actor machinery that reads it.

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
from typing import Any

import attrs

from zlink_trio._runtime.declarations.handlers import HandlerKind, mark_of, timer_name_of
from zlink_trio._runtime.declarations.relocation import (
    RelocationPolicy,
    disable_relocation,
    resolve_policy,
)
from zlink_trio._runtime.declarations.system import RESERVED_PREFIX, SYSTEM_MESSAGES
from zlink_trio._wire.payload import MessageTypes
from zlink_trio.errors import ConfigurationError
from zlink_trio.ids import SpotKind, StableTypeName
from zlink_trio.options import RelocationCoordinationMode, SpotFactoryMode

__all__ = [
    "DEFAULT_ENTRY_TYPE",
    "ActorDeclaration",
    "ActorType",
    "Handler",
    "Registry",
    "SpotDeclaration",
    "SpotType",
    "validate",
]


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
    coordination: RelocationCoordinationMode
    handlers: Mapping[type, Handler]
    timers: Mapping[str, str] = attrs.field(factory=dict)
    """Timer name -> the method declared with ``@zl.timer_handler(name)`` (TIMER-12)."""
    relocation: RelocationPolicy = attrs.field(factory=disable_relocation)
    """What a relocation does to it, its default resolved (RELOC-2); the Entry Spot's is
    ``disable_relocation()``: every host has its own."""


@attrs.frozen
class ActorType:
    """One validated Actor declaration: its stable type, class and handler table."""

    name: StableTypeName
    cls: type
    handlers: Mapping[type, Handler]
    relocation: RelocationPolicy = attrs.field(factory=disable_relocation)
    """What a relocation does to it, its default resolved (RELOC-2)."""


DEFAULT_ENTRY_TYPE = StableTypeName("zlink.EntrySpot")
"""The stable type of the Entry Spot when the application declares none of its own."""


@attrs.frozen
class Registry:
    """The frozen declarations a host serves; never changes after start (REG-5.3)."""

    messages: MessageTypes
    spot_types: Mapping[StableTypeName, SpotType]
    entry_type: SpotType
    """The Entry Spot type: the application's ``@app.entry_spot`` class or the base class."""
    actor_types: Mapping[StableTypeName, ActorType] = attrs.field(factory=dict)

    def instance_types(self) -> list[SpotType]:
        """The declared Instance Spot types, in declaration order."""
        return [t for t in self.spot_types.values() if t.kind is SpotKind.INSTANCE]

    def declared(self, name: StableTypeName) -> SpotType | ActorType | None:
        """The Spot type (the Entry Spot's included) or Actor type declared as ``name``."""
        if name == self.entry_type.name:
            return self.entry_type
        return self.spot_types.get(name) or self.actor_types.get(name)

    def is_message(self, cls: type) -> bool:
        """Whether ``cls`` is a declared message class."""
        try:
            self.messages.name_of(cls)
        except TypeError:
            return False
        return True


@attrs.define
class SpotDeclaration:
    """One ``@app.user_spot`` / ``instance_spot`` / ``entry_spot`` as declared."""

    name: StableTypeName
    kind: SpotKind
    cls: type
    mode: SpotFactoryMode
    coordination: RelocationCoordinationMode
    relocation: RelocationPolicy | None = None
    """``relocation=`` as given; ``None`` when the decorator had none."""


@attrs.define
class ActorDeclaration:
    """One ``@app.actor`` as declared."""

    name: StableTypeName
    cls: type
    relocation: RelocationPolicy | None = None
    """``relocation=`` as given; ``None`` when the decorator had none."""


def validate(
    messages: list[tuple[StableTypeName, type]],
    spots: list[SpotDeclaration],
    actors: list[ActorDeclaration],
    default_entry: type,
) -> Registry:
    """Check every declaration at once and build the frozen registry (Rule 1); one
    ``ConfigurationError`` lists every problem. ``default_entry`` is the Entry Spot class when
    none is declared."""
    problems: list[str] = []
    message_types = MessageTypes()
    taken: dict[StableTypeName, str] = {}
    for name, cls in SYSTEM_MESSAGES:
        message_types.register(name, cls)
        taken[name] = f"the framework's message {cls.__qualname__}"
    for name, cls in messages:
        if name.value.startswith(RESERVED_PREFIX):
            problems.append(
                f"{name} (message {cls.__qualname__}) is in the framework's reserved "
                f"namespace {RESERVED_PREFIX!r}"
            )
            continue
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
        _required_defined(declaration, problems)
        if declaration.kind is SpotKind.ENTRY:
            entry_types.append(
                SpotType(
                    declaration.name,
                    declaration.kind,
                    declaration.cls,
                    declaration.mode,
                    declaration.coordination,
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
        per_actor = declaration.mode is SpotFactoryMode.PER_ACTOR
        if (
            per_actor
            and declaration.coordination is RelocationCoordinationMode.APPLICATION_SIGNALED
        ):
            problems.append(
                f"{declaration.name}: APPLICATION_SIGNALED is allowed only with SPOT_WIDE, "
                "not PER_ACTOR"
            )
        handlers = _handlers_of(declaration.name, declaration.cls, declared, problems)
        relocation = resolve_policy(
            str(declaration.name),
            declaration.cls,
            declaration.relocation,
            actor=False,
            per_actor=per_actor,
            problems=problems,
        )
        spot_types[declaration.name] = SpotType(
            declaration.name,
            declaration.kind,
            declaration.cls,
            declaration.mode,
            declaration.coordination,
            handlers,
            _timers_of(declaration, problems),
            relocation,
        )
    if len(entry_types) > 1:
        names = ", ".join(t.cls.__qualname__ for t in entry_types)
        problems.append(f"an application has one Entry Spot; @entry_spot marks {names}")
    actor_types: dict[StableTypeName, ActorType] = {}
    for actor in actors:
        name, cls = actor.name, actor.cls
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
        handlers = _handlers_of(name, cls, declared, problems)
        relocation = resolve_policy(
            str(name), cls, actor.relocation, actor=True, per_actor=False, problems=problems
        )
        actor_types[name] = ActorType(name, cls, handlers, relocation)
    if problems:
        raise ConfigurationError(problems)
    entry_type = (
        entry_types[0]
        if entry_types
        else SpotType(
            DEFAULT_ENTRY_TYPE,
            SpotKind.ENTRY,
            default_entry,
            SpotFactoryMode.SPOT_WIDE,
            RelocationCoordinationMode.FRAMEWORK_MANAGED,
            {},
        )
    )
    return Registry(message_types, spot_types, entry_type, actor_types)


_REQUIRED = {
    SpotKind.USER: ("on_actor_join", "on_joined_actor", "on_leave_actor"),
    SpotKind.ENTRY: ("on_joined_actor", "on_leave_actor"),
}
"""The membership callbacks a Spot class of each kind defines itself (REG-5.9)."""


def _required_defined(declaration: SpotDeclaration, problems: list[str]) -> None:
    """REG-5.9: a User Spot decides its Actors' joins and sees them join and leave, and an
    Entry Spot sees them come back and leave; the bases leave those callbacks abstract."""
    cls = declaration.cls
    missing = [
        name
        for name in _REQUIRED.get(declaration.kind, ())
        if getattr(getattr(cls, name, None), "__isabstractmethod__", False)
    ]
    if missing:
        kind = "User" if declaration.kind is SpotKind.USER else "Entry"
        advice = " (a Spot that takes no Actors rejects every join)" if kind == "User" else ""
        problems.append(
            f"{declaration.name} ({kind} Spot {cls.__qualname__}) does not define "
            f"{', '.join(missing)}: every {kind} Spot class defines them itself{advice}"
        )


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


def _timers_of(declaration: SpotDeclaration, problems: list[str]) -> dict[str, str]:
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
