"""Rules that code review used to keep, checked mechanically over the public surface and the
source: names are snake_case (specs/api.md API-6), failures are ``ZLinkError`` itself (API-14),
an Actor has no closing callback (specs/spots.md SPOT-49), nothing raises
``ErrorKind.REJECTED`` (specs/errors.md ERR-6.2), and the surface offers no completion-source or
time-limited-observation type (specs/completion.md CMP-2.11) and no address DTO, process-local
handle, resolver, directory or creatable-kind enum (SPOT-86).

The public surface is every name in ``zlink_trio.__all__`` (for API-6 also
``zlink_trio.testing.__all__``, the testing kit's public names) and every class of zlink_trio that
a public function, method or property is annotated to return, followed transitively (e.g.
``Host.observe()`` returns a ``StatusStream``). A class's own members are those defined in the
classes of its MRO that belong to zlink_trio; what a foreign base class (``Exception``,
``enum.Enum``, hypothesis's state machine) defines is not ours to name.

The checks are functions of their input, and each has a test that feeds it a small synthetic
case breaking the rule, so an emptied check cannot pass unnoticed (the enum check of SPOT-86 is
a few lines inside its test).
"""

from __future__ import annotations

import ast
import enum
import importlib
import inspect
import pkgutil
import re
import textwrap
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path

import pytest

import zlink_trio as zl
import zlink_trio.testing

PACKAGE = Path(__file__).resolve().parents[2] / "zlink_trio"
OURS = "zlink_trio"


# --- the public surface --------------------------------------------------------------------------


def is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def is_public(name: str) -> bool:
    """A name an application may use: no leading underscore, or a dunder (``__init__``)."""
    return not name.startswith("_") or is_dunder(name)


def exported(*modules: types.ModuleType) -> dict[str, object]:
    """``module.name`` -> value for every name in each module's ``__all__``."""
    return {
        f"{module.__name__}.{name}": getattr(module, name)
        for module in modules
        for name in module.__all__
    }


def own_classes(cls: type, owner: str = OURS) -> list[type]:
    """The classes of ``cls``'s MRO defined in ``owner``'s modules, most derived first."""
    return [klass for klass in cls.__mro__ if klass.__module__.split(".")[0] == owner]


def as_function(member: object) -> list[Callable[..., object]]:
    """The plain functions behind a class member: a method, a static or class method's
    function, a property's getter, setter and deleter; none for anything else."""
    if isinstance(member, staticmethod | classmethod):
        member = member.__func__
    if isinstance(member, property):
        return [f for f in (member.fget, member.fset, member.fdel) if inspect.isfunction(f)]
    return [member] if inspect.isfunction(member) else []


def own_callables(
    value: object, owner: str = OURS
) -> Iterator[tuple[str, str, Callable[..., object]]]:
    """``(member name, defining class, function)`` for each public function of ``value``: the
    function itself, or each public method and property of ``value``'s own classes."""
    if inspect.isfunction(value):
        yield value.__name__, "", value
    if not inspect.isclass(value):
        return
    for klass in own_classes(value, owner):
        for name, member in vars(klass).items():
            if is_public(name):
                for function in as_function(member):
                    yield name, klass.__qualname__, function


def annotated_classes(annotation: object) -> set[type]:
    """Every class an annotation names, through unions and generics."""
    found = {annotation} if inspect.isclass(annotation) else set()
    origin = typing.get_origin(annotation)
    if inspect.isclass(origin):
        found.add(origin)
    for argument in typing.get_args(annotation):
        found |= annotated_classes(argument)
    return found


RESULT_DUNDERS = {"__aenter__", "__enter__", "__aiter__", "__anext__", "__iter__", "__next__"}
"""Dunders whose results an application holds (``async with``, ``async for``); a constructor's
parameter types are what an application hands in, not what it gets."""


def reachable(surface: Mapping[str, object], owner: str = OURS) -> dict[str, object]:
    """``surface`` plus every ``owner`` class a public function, method or property of it is
    annotated to return, transitively, keyed ``module.qualname`` (a class already in
    ``surface`` keeps its key); an annotation that does not resolve fails, never skipped."""
    found = dict(surface)
    seen = {id(value) for value in found.values()}
    todo = list(surface.values())
    while todo:
        value = todo.pop()
        for name, _, function in own_callables(value, owner):
            if is_dunder(name) and name not in RESULT_DUNDERS:
                continue
            returns = typing.get_type_hints(function).get("return")
            for cls in annotated_classes(returns):
                if cls.__module__.split(".")[0] == owner and id(cls) not in seen:
                    seen.add(id(cls))
                    found[f"{cls.__module__}.{cls.__qualname__}"] = cls
                    todo.append(cls)
    return found


def application_surface() -> dict[str, object]:
    """What an application gets from ``zlink_trio`` (CMP-2.11, SPOT-86)."""
    return reachable(exported(zl))


def public_surface() -> dict[str, object]:
    """The whole public surface, the testing kit included (API-6)."""
    return reachable(exported(zl, zlink_trio.testing))


def test_the_surface_follows_return_annotations() -> None:
    """A class a public method returns is part of the surface, even when not exported."""
    surface = application_surface()
    assert "zlink_trio._runtime.host.status.StatusStream" in surface  # Host.observe()
    assert "zlink_trio._runtime.spots.boundary.RelocationReady" in surface
    assert set(exported(zl)) <= set(surface)


# --- API-6: snake_case ---------------------------------------------------------------------------

SNAKE = re.compile(r"[a-z][a-z0-9]*(_[a-z0-9]+)*_?")
"""Lower-case words joined by ``_``; one trailing ``_`` is allowed (``yield_``, PEP 8's way
around a keyword)."""
UPPER = re.compile(r"[A-Z][A-Z0-9]*(_[A-Z0-9]+)*")


def self_attributes(cls: type) -> set[str]:
    """Every ``self.name`` assigned in the methods of ``cls``'s own source."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                for part in ast.walk(target):
                    if (
                        isinstance(part, ast.Attribute)
                        and isinstance(part.value, ast.Name)
                        and part.value.id == "self"
                    ):
                        names.add(part.attr)
    return names


def _is_constant(klass: type, name: str, member: object) -> bool:
    """An enum member (UPPER_CASE by API-3) or a plain class-level value named UPPER_CASE."""
    if isinstance(klass, enum.EnumMeta) and name in klass.__members__:
        return True
    plain = not callable(member) and not inspect.isdatadescriptor(member)
    return plain and UPPER.fullmatch(name) is not None


def _parameter_faults(where: str, function: Callable[..., object]) -> list[str]:
    return [
        f"{where}({parameter})"
        for parameter in inspect.signature(function).parameters
        if not SNAKE.fullmatch(parameter.lstrip("_"))
    ]


def naming_faults(surface: Mapping[str, object], owner: str = OURS) -> list[str]:
    """Each public function, method, attribute or parameter of ``surface`` not in snake_case.

    Not checked, by design: dunder names (Python's own), private names (a leading ``_``, not
    public; their parameters neither), class names (CapWords, API-3), enum members and plain
    class-level values named UPPER_CASE (constants, PEP 8), and members of foreign base classes.
    A parameter's leading underscores are ignored (a positional-only marker is still its name).
    """
    faults: list[str] = []
    for qualified, value in surface.items():
        name = qualified.rsplit(".", 1)[-1]
        if inspect.isfunction(value):
            if not SNAKE.fullmatch(name):
                faults.append(qualified)
            faults += _parameter_faults(qualified, value)
        elif inspect.isclass(value):
            faults += _class_faults(qualified, value, owner)
        elif not is_dunder(name) and not UPPER.fullmatch(name) and not SNAKE.fullmatch(name):
            faults.append(qualified)
    return sorted(set(faults))


def _class_faults(qualified: str, cls: type, owner: str) -> list[str]:
    faults: list[str] = []
    for klass in own_classes(cls, owner):
        where = f"{qualified}.{{}}" if klass is cls else f"{qualified}({klass.__qualname__}).{{}}"
        members = dict(vars(klass))
        for attribute in [*self_attributes(klass), *inspect.get_annotations(klass)]:
            members.setdefault(attribute, None)
        for name, member in members.items():
            if not is_public(name) or inspect.isclass(member) or _is_constant(klass, name, member):
                continue
            if not is_dunder(name) and not SNAKE.fullmatch(name):
                faults.append(where.format(name))
            for function in as_function(member):
                faults += _parameter_faults(where.format(name), function)
    return faults


@pytest.mark.spec("API-6")
def test_the_public_surface_is_snake_case() -> None:
    """Fails for a camelCase (or otherwise not snake_case) public function, method, property,
    attribute (a slot, a class annotation or a ``self.x = ...``) or parameter."""
    surface = public_surface()
    assert len(surface) > len(zl.__all__)
    assert [] == naming_faults(surface)


class _Mode(enum.Enum):
    FAST_PATH = 1


class _Named:
    LIMIT = 3
    kindOf: int

    def __init__(self, firstValue: int, _private: int = 0) -> None:
        self.lastValue = firstValue
        self.fine = _private
        self._hidden = 1

    def getValue(self) -> int:
        return self.lastValue

    def good(self, *, maxCount: int = 1) -> int:
        return maxCount

    @property
    def isReady(self) -> bool:
        return True

    def _notPublic(self, whatEver: int) -> None:
        del whatEver

    def yield_(self) -> None:
        pass


def _snake(someArg: int) -> int:
    return someArg


@pytest.mark.spec("API-6")
def test_the_naming_check_finds_each_kind_of_name() -> None:
    """The check reports methods, properties, attributes and parameters, and leaves constants,
    enum members, dunders and private names alone."""
    owner = __name__.split(".")[0]
    surface = {
        "m._Named": _Named,
        "m._Mode": _Mode,
        "m.camelCase": _snake,
        "m.__version__": "1",
        "m.SOME_CONSTANT": 1,
        "m.someValue": 1,
    }
    assert [
        "m._Named.__init__(firstValue)",
        "m._Named.getValue",
        "m._Named.good(maxCount)",
        "m._Named.isReady",
        "m._Named.kindOf",
        "m._Named.lastValue",
        "m.camelCase",
        "m.camelCase(someArg)",
        "m.someValue",
    ] == naming_faults(surface, owner)


# --- API-14: ZLinkError itself -------------------------------------------------------------------


def package_modules() -> list[str]:
    """Every module of zlink_trio, imported; ``__main__`` is left out (importing it runs the
    command line)."""
    names = [
        info.name
        for info in pkgutil.walk_packages(zl.__path__, f"{zl.__name__}.")
        if info.name.rsplit(".", 1)[-1] != "__main__"
    ]
    for name in names:
        importlib.import_module(name)
    return names


def all_subclasses(cls: type) -> list[type]:
    """Every class derived from ``cls``, however indirectly."""
    found: list[type] = []
    subclass: type
    for subclass in cls.__subclasses__():
        found += [subclass, *all_subclasses(subclass)]
    return found


def subclass_statements(source: str, base: str) -> list[str]:
    """Each ``class X(base)`` or ``class X(module.base)`` statement, as ``line: X``."""
    classes = [n for n in ast.walk(ast.parse(source)) if isinstance(n, ast.ClassDef)]
    return [
        f"{node.lineno}: {node.name}"
        for node in sorted(classes, key=lambda n: n.lineno)
        if any(
            (isinstance(b, ast.Name) and b.id == base)
            or (isinstance(b, ast.Attribute) and b.attr == base)
            for b in node.bases
        )
    ]


def sources() -> dict[str, str]:
    """Each module of the package by its path under the package's parent."""
    return {
        str(path.relative_to(PACKAGE.parent)): path.read_text(encoding="utf-8")
        for path in sorted(PACKAGE.rglob("*.py"))
    }


@pytest.mark.spec("API-14")
def test_no_module_derives_a_class_from_zlink_error() -> None:
    """Fails when any module of zlink_trio, once imported, has made a subclass of ZLinkError
    (a ``class`` statement or ``type(...)``), at any depth."""
    assert len(package_modules()) > 100
    assert [] == [f"{c.__module__}.{c.__qualname__}" for c in all_subclasses(zl.ZLinkError)]


@pytest.mark.spec("API-14")
def test_no_source_file_declares_a_zlink_error_subclass() -> None:
    """Fails for a ``class X(ZLinkError)`` or ``class X(errors.ZLinkError)`` anywhere in the
    package's source, imported or not (a module only imported under a condition)."""
    found = {path: subclass_statements(text, "ZLinkError") for path, text in sources().items()}
    assert {} == {path: classes for path, classes in found.items() if classes}


@pytest.mark.spec("API-14")
def test_the_subclass_checks_find_subclasses() -> None:
    """Both checks find a subclass, the import check at any depth."""

    class Base(Exception):
        pass

    class Kind(Base):
        pass

    class Deeper(Kind):
        pass

    assert [Kind, Deeper] == all_subclasses(Base)
    source = "class A(ZLinkError):\n    pass\nclass B(errors.ZLinkError, Mixin):\n    pass\n"
    assert ["1: A", "3: B"] == subclass_statements(source, "ZLinkError")


# --- SPOT-49: no per-Actor closing callback ------------------------------------------------------

CLOSING_WORDS = re.compile(r"clos|destroy|dispos|shut|teardown|finali[sz]|evict|termina")
"""What a closing callback would be named after: close, closing, closed, destroy(ed), dispose,
shutdown, teardown, finalise/finalize, evicted, terminate(d)."""
ACTOR_RUNTIME = PACKAGE / "_runtime" / "actors"


def closing_members(cls: type, prefix: str = "") -> list[str]:
    """Public non-dunder names of ``cls`` (inherited ones included) that start with ``prefix``
    and name a closing step."""
    return sorted(
        name
        for name in dir(cls)
        if not name.startswith("_") and name.startswith(prefix) and CLOSING_WORDS.search(name)
    )


def closing_hooks_named(source: str) -> list[str]:
    """Each attribute access or string that names an ``on_...`` hook for a closing step (how the
    runtime would call one on an Actor), as ``line: name``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute):
            name = node.attr
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            name = node.value
        else:
            continue
        if re.fullmatch(r"on_\w+", name) and CLOSING_WORDS.search(name):
            found.append((node.lineno, name))
    return [f"{line}: {name}" for line, name in sorted(found)]


@pytest.mark.spec("SPOT-49")
def test_an_actor_has_no_closing_callback() -> None:
    """Fails when ``zl.Actor`` (with what it inherits) has a public attribute named after a
    closing step (``on_closing``, ``on_close``, ``on_destroyed``, ``close``...), or
    ``zl.ActorContext`` an ``on_...`` one that would register such a callback."""
    assert "on_join_completed" in dir(zl.Actor)  # the one Actor callback: the check looks there
    assert [] == closing_members(zl.Actor)
    assert [] == closing_members(zl.ActorContext, "on_")


@pytest.mark.spec("SPOT-49")
def test_the_actor_runtime_calls_no_closing_hook() -> None:
    """Fails when the Actor runtime (``_runtime/actors/``) names an ``on_...`` hook for a closing
    step, as it would to call one on an Actor that defines it without the base class."""
    paths = sorted(ACTOR_RUNTIME.glob("*.py"))
    assert ACTOR_RUNTIME / "activation.py" in paths
    found = {p.name: closing_hooks_named(p.read_text(encoding="utf-8")) for p in paths}
    assert {} == {name: hooks for name, hooks in found.items() if hooks}


@pytest.mark.spec("SPOT-49")
def test_the_closing_checks_find_closing_callbacks() -> None:
    """A closing hook is found on a class, through a context and in source."""

    class Closing(zl.Actor):
        async def on_closing(self) -> None:
            pass

        def destroyed(self) -> None:
            pass

    assert ["destroyed", "on_closing"] == closing_members(Closing)
    assert ["on_closing"] == closing_members(Closing, "on_")
    source = 'await self.instance.on_closing(x)\ngetattr(i, "on_destroyed")\nself.on_join_completed'
    assert ["1: on_closing", "2: on_destroyed"] == closing_hooks_named(source)


# --- ERR-6.2: nothing raises REJECTED ------------------------------------------------------------

TYPED_RESULTS = {"ActorCreateStatus", "SpotCreateStatus", "ActorJoinOutcome"}
"""The typed results of ERR-6.1 whose ``REJECTED`` is a value, not ``ErrorKind.REJECTED``."""


def rejected_kinds(source: str) -> list[str]:
    """Each place that could name ``ErrorKind.REJECTED``, as ``line: what``: an attribute
    ``REJECTED`` of anything but a typed result (an alias of ``ErrorKind`` included), the string
    ``"REJECTED"`` (``ErrorKind["REJECTED"]``, ``getattr``), and ``ErrorKind(4)``."""
    found: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr == "REJECTED":
            owner = node.value
            owner_name = (
                owner.id
                if isinstance(owner, ast.Name)
                else owner.attr
                if isinstance(owner, ast.Attribute)
                else ""
            )
            if owner_name not in TYPED_RESULTS:
                found.append((node.lineno, f"{owner_name or '?'}.REJECTED"))
        elif isinstance(node, ast.Constant) and node.value == "REJECTED":
            found.append((node.lineno, "'REJECTED'"))
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name | ast.Attribute)
            and (node.func.id if isinstance(node.func, ast.Name) else node.func.attr) == "ErrorKind"
            and any(
                isinstance(a, ast.Constant) and a.value == zl.ErrorKind.REJECTED.value
                for a in node.args
            )
        ):
            found.append((node.lineno, f"ErrorKind({zl.ErrorKind.REJECTED.value})"))
    return [f"{line}: {what}" for line, what in sorted(found)]


@pytest.mark.spec("ERR-6.2")
def test_nothing_in_the_runtime_names_error_kind_rejected() -> None:
    """Fails when any module of zlink_trio names ``ErrorKind.REJECTED`` (to raise it, map to it
    or compare with it); the enum's own definition is an assignment, not a use."""
    for name in TYPED_RESULTS:
        assert "REJECTED" in getattr(zl, name).__members__, name
    found = {path: rejected_kinds(text) for path, text in sources().items()}
    assert {} == {path: uses for path, uses in found.items() if uses}


@pytest.mark.spec("ERR-6.2")
def test_the_rejected_check_finds_each_way_to_name_it() -> None:
    """Direct, aliased, by name and by number are found; typed results are not."""
    source = """
raise ZLinkError(ErrorKind.REJECTED, "no")
kind = errors.ErrorKind.REJECTED
K = ErrorKind
K.REJECTED
ErrorKind["REJECTED"]
ErrorKind(4)
ActorCreateStatus.REJECTED
values.SpotCreateStatus.REJECTED
ErrorKind(5)
class ErrorKind(enum.IntEnum):
    REJECTED = 4
"""
    assert [
        "2: ErrorKind.REJECTED",
        "3: ErrorKind.REJECTED",
        "5: K.REJECTED",
        "6: 'REJECTED'",
        "7: ErrorKind(4)",
    ] == rejected_kinds(source)


# --- CMP-2.11 and SPOT-86: types the surface does not offer --------------------------------------

COMPLETION_TYPE = re.compile(
    r"CompletionSource|Future|Promise|Deferred|Waiter|Latch|Settable|Observ|TimeLimit|Timeout"
)
COMPLETION_METHOD = re.compile(
    r"set_result|set_exception|set_error|try_set\w*|try_complete|complete|settle|resolve"
    r"|wait_for|\w*with_timeout|observe_for",
)
NOT_OFFERED = re.compile(
    r"Address|Endpoint|Location|Handle(?!r)|Proxy|Stub|Activation|Instance(?!Spot)|Resolv"
    r"|Locator|Lookup|Directory|Catalog|Listing|Creatable"
)
NOT_OFFERED_METHOD = re.compile(
    r"resolve\w*|locate\w*|lookup\w*|\w*address\w*|where\w*|owner\w*|list_\w*|all_\w*"
    r"|scan\w*|iter_\w*|directory|get_local\w*|local_\w*"
)


def class_names(surface: Mapping[str, object]) -> dict[str, type]:
    """Each class of the surface by its key."""
    return {key: value for key, value in surface.items() if inspect.isclass(value)}


def offered_faults(
    surface: Mapping[str, object],
    type_names: re.Pattern[str],
    method_names: re.Pattern[str],
    owner: str = OURS,
) -> list[str]:
    """Each class of ``surface`` whose name matches ``type_names`` and each public method or
    property of one whose name fully matches ``method_names``."""
    faults: list[str] = []
    for key, cls in class_names(surface).items():
        if type_names.search(cls.__name__):
            faults.append(key)
        faults += [
            f"{key}.{name}"
            for name, _, _ in own_callables(cls, owner)
            if not is_dunder(name) and method_names.fullmatch(name)
        ]
    return sorted(set(faults))


def awaitable_types(surface: Mapping[str, object], owner: str = OURS) -> list[str]:
    """Each class of ``surface`` whose instances are awaited themselves (``__await__`` of its
    own) or that derives from a future or event of asyncio, concurrent.futures or Trio."""
    import asyncio
    import concurrent.futures

    import trio

    foreign = (asyncio.Future, concurrent.futures.Future, trio.Event)
    return sorted(
        key
        for key, cls in class_names(surface).items()
        if any("__await__" in vars(k) for k in own_classes(cls, owner)) or issubclass(cls, foreign)
    )


@pytest.mark.spec("CMP-2.11")
def test_the_surface_offers_no_completion_source_or_observation_type() -> None:
    """Fails when the application surface offers a class named like a completion source or a
    time-limited observation (``CompletionSource``, ``Future``, ``Promise``, ``Deferred``,
    ``Waiter``, ``Latch``, ``Settable``, ``Observ...``, ``TimeLimit``, ``Timeout``), a method
    that settles or observes with a limit (``set_result``, ``complete``, ``resolve``,
    ``wait_for``, ``..._with_timeout``...), or an awaitable object or future of its own."""
    surface = application_surface()
    assert [] == offered_faults(surface, COMPLETION_TYPE, COMPLETION_METHOD)
    assert [] == awaitable_types(surface)


@pytest.mark.spec("SPOT-86")
def test_the_surface_offers_no_address_handle_resolver_or_directory() -> None:
    """Fails when the application surface offers a class named like an address DTO, a local
    handle, a resolver or a directory (``Address``, ``Endpoint``, ``Location``, ``Handle``,
    ``Proxy``, ``Stub``, ``Activation``, ``Instance`` but ``InstanceSpot``, ``Resolv``,
    ``Locator``, ``Lookup``, ``Directory``, ``Catalog``, ``Listing``, ``Creatable``), a method
    that resolves, locates or lists (``resolve...``, ``locate...``, ``lookup...``,
    ``...address...``, ``where...``, ``owner...``, ``list_...``, ``all_...``, ``scan...``,
    ``iter_...``, ``get_local...``, ``local_...``), or a method that returns an application's
    Spot or Actor object."""
    surface = application_surface()
    assert [] == offered_faults(surface, NOT_OFFERED, NOT_OFFERED_METHOD)
    assert [] == instance_returns(surface)


def instance_returns(surface: Mapping[str, object], owner: str = OURS) -> list[str]:
    """Each public function or method of ``surface`` annotated to return a Spot or an Actor
    object (a subclass of one of the bases an application derives from)."""
    bases = (zl.Spot, zl.EntrySpot, zl.InstanceSpot, zl.Actor)
    faults: list[str] = []
    for key, value in surface.items():
        for name, _, function in own_callables(value, owner):
            returns = typing.get_type_hints(function).get("return")
            if any(issubclass(c, bases) for c in annotated_classes(returns)):
                faults.append(key if inspect.isfunction(value) else f"{key}.{name}")
    return sorted(faults)


@pytest.mark.spec("SPOT-86")
def test_no_enum_but_spot_kind_lists_spot_kinds() -> None:
    """Fails when an enum of the application surface other than ``SpotKind`` has a member named
    after a Spot kind (a "creatable kind" enum, whatever its name)."""
    kinds = {kind.name for kind in zl.SpotKind} - {"INVALID"}
    assert {"ENTRY", "USER", "INSTANCE"} == kinds
    found = {
        key: sorted(kinds & set(cls.__members__))
        for key, cls in class_names(application_surface()).items()
        if issubclass(cls, enum.Enum) and cls is not zl.SpotKind
    }
    assert {} == {key: members for key, members in found.items() if members}


class _Promise:
    def set_result(self, value: object) -> None:
        del value

    def __await__(self) -> Iterator[None]:
        yield None


class _Spots:
    def resolve(self) -> _Promise:
        return _Promise()

    def local_spot(self) -> zl.Spot:
        raise NotImplementedError

    def all_spots(self) -> list[zl.Actor]:
        return []


@pytest.mark.spec("CMP-2.11", "SPOT-86")
def test_the_offer_checks_find_what_is_not_offered() -> None:
    """Names, methods, awaitables and instance returns are found, in classes reached through a
    return annotation too."""
    owner = __name__.split(".")[0]
    surface = reachable({"m._Spots": _Spots}, owner)
    assert {"m._Spots", f"{__name__}._Promise"} == set(surface)
    assert ["m._Spots.resolve", f"{__name__}._Promise", f"{__name__}._Promise.set_result"] == (
        offered_faults(surface, COMPLETION_TYPE, COMPLETION_METHOD, owner)
    )
    assert [f"{__name__}._Promise"] == awaitable_types(surface, owner)
    assert ["m._Spots.all_spots", "m._Spots.local_spot", "m._Spots.resolve"] == (
        offered_faults(surface, NOT_OFFERED, NOT_OFFERED_METHOD, owner)
    )
    assert ["m._Spots.all_spots", "m._Spots.local_spot"] == instance_returns(surface, owner)
