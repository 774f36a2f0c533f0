"""The shutdown path decides its order without looking at concrete types (specs/shutdown.md
SHUT-2.4): the code that encodes the order (``TaskTree`` in host/tree.py, whose ``run_*``
tasks close each part and whose ``shutdown`` runs the stages) and the host's two ways in
(``Host.shutdown``, ``Host.relocate_and_shutdown``) call no ``isinstance``, ``issubclass`` or
``type()`` and match no class pattern."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

HOST = Path(__file__).resolve().parents[2] / "zlink_trio" / "_runtime" / "host"
SHUTDOWN_PATH = {
    HOST / "tree.py": ("TaskTree", None),
    HOST / "host.py": ("Host", ("shutdown", "relocate_and_shutdown")),
}
"""Per module: the class, and which of its methods are on the path (``None``: all of them)."""
TYPE_CALLS = {"isinstance", "issubclass", "type"}


def type_inspections(source: str, class_name: str, methods: tuple[str, ...] | None) -> list[str]:
    """Each place in ``class_name``'s ``methods`` that inspects a concrete type, as ``line:
    what``; a class the source lacks is reported too, so a rename cannot empty the check."""
    tree = ast.parse(source)
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == class_name]
    if not classes:
        return [f"no class {class_name}"]
    found: list[str] = []
    functions = [
        node
        for node in classes[0].body
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and (methods is None or node.name in methods)
    ]
    if methods is not None and {f.name for f in functions} != set(methods):
        found.append(f"{class_name} lacks some of {methods}")
    for function in functions:
        for node in ast.walk(function):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id in TYPE_CALLS
            ):
                found.append(f"{node.lineno}: {node.func.id}() in {function.name}")
            if isinstance(node, ast.MatchClass):
                found.append(f"{node.lineno}: a class pattern in {function.name}")
    return found


@pytest.mark.spec("SHUT-2.4")
def test_the_shutdown_path_inspects_no_concrete_type() -> None:
    found = {
        path.name: type_inspections(path.read_text(encoding="utf-8"), name, methods)
        for path, (name, methods) in SHUTDOWN_PATH.items()
    }
    assert found == {path.name: [] for path in SHUTDOWN_PATH}


@pytest.mark.spec("SHUT-2.4")
def test_the_check_finds_each_kind_of_type_inspection() -> None:
    source = """
class Tree:
    async def shutdown(self, parts):
        for part in parts:
            if isinstance(part, Store):
                pass
            if type(part) is Mesh:
                pass
            match part:
                case Store():
                    pass
    def other(self, part):
        return isinstance(part, Store)
"""
    assert type_inspections(source, "Tree", ("shutdown",)) == [
        "5: isinstance() in shutdown",
        "7: type() in shutdown",
        "10: a class pattern in shutdown",
    ]
    assert type_inspections(source, "Tree", None)[-1] == "13: isinstance() in other"
    assert type_inspections(source, "Gone", None) == ["no class Gone"]
