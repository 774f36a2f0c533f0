"""No interface kept only for a test fake or a hypothetical backend, and no wrapper class
(specs/boundaries.md BND-1.12, seed 004 §1).

Every ``typing.Protocol`` and abstract base class of the package is listed below with why it
exists; each reason is one the rule allows: applications implement it, or it has two real
implementations, or it points a dependency the way imports may go (architecture.md, "Inverted
dependencies"). A new interface fails the check until its reason is written here, and so does a
listed one that went away, so the list stays the truth. The Location Store had three such
interfaces (``LeaseStore``, ``MembershipStore``, ``WatchStore``) whose only other
implementations were test fakes; the ownership code now takes ``LocationStore`` itself.
"""

from __future__ import annotations

import ast

import pytest

from tests.contract.test_review_rules import sources

_R = "zlink_trio/_runtime"
INTERFACES = {
    (f"{_R}/declarations/relocation.py", "SpotRelocationAdapter"): "applications implement it",
    (f"{_R}/declarations/relocation.py", "ActorRelocationAdapter"): "applications implement it",
    (f"{_R}/engines/clock.py", "Clock"): "two real clocks: Trio's and the testing kit's",
    (f"{_R}/host/cutover.py", "Sealed"): "two real implementations: a sealed Spot or Actor",
    (f"{_R}/spots/timers.py", "Spawner"): "import direction: the activation starts timers",
    (f"{_R}/spots/boundary.py", "_Signalling"): "import direction: activation imports it",
    ("zlink_trio/_demo/update.py", "Hosts"): "import direction: the demo's parent imports it",
}
"""(module, class) -> why the interface may exist."""

_INTERFACE_BASES = {"Protocol", "typing.Protocol", "ABC", "abc.ABC"}
_ABSTRACT_METACLASSES = {"ABCMeta", "abc.ABCMeta"}


def interfaces(source: str) -> list[str]:
    """The classes of ``source`` that are interfaces: deriving from ``Protocol`` or ``ABC``
    (``Protocol[T]`` too), or made by ``ABCMeta``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.ClassDef):
            continue
        bases = {
            ast.unparse(base.value if isinstance(base, ast.Subscript) else base)
            for base in node.bases
        }
        metaclasses = {ast.unparse(k.value) for k in node.keywords if k.arg == "metaclass"}
        if bases & _INTERFACE_BASES or metaclasses & _ABSTRACT_METACLASSES:
            found.append(node.name)
    return found


def wrappers(source: str) -> list[str]:
    """The classes of ``source`` named like a forwarding wrapper."""
    return [
        node.name
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.ClassDef) and node.name.lower().endswith("wrapper")
    ]


@pytest.mark.spec("BND-1.12")
def test_every_interface_has_a_reason_the_rule_allows() -> None:
    """Fails when a module declares a Protocol or an abstract base class not listed with its
    reason (such as the store interfaces that existed for test fakes), or a listed one went."""
    found = {(module, name) for module, source in sources().items() for name in interfaces(source)}
    assert set(INTERFACES) == found


@pytest.mark.spec("BND-1.12")
def test_no_class_is_a_wrapper() -> None:
    """Fails when a class of the package is named ``...Wrapper``."""
    assert [] == [
        (module, name) for module, source in sources().items() for name in wrappers(source)
    ]


@pytest.mark.spec("BND-1.12")
def test_the_checks_find_interfaces_and_wrappers() -> None:
    """The checks themselves: each kind of interface and a wrapper are found, a plain class is
    not."""
    source = """
import abc
import typing
from typing import Protocol, Generic

class Store(Protocol):
    async def read(self, key: str) -> bytes: ...

class Typed(typing.Protocol[T]):
    pass

class Base(abc.ABC, Generic[T]):
    pass

class Meta(metaclass=abc.ABCMeta):
    pass

class SocketWrapper:
    pass

class Plain(Generic[T]):
    pass
"""
    assert ["Store", "Typed", "Base", "Meta"] == interfaces(source)
    assert ["SocketWrapper"] == wrappers(source)
