"""The import graph of zlink_trio has no cycle (specs/architecture.md ARCH-2, ARCH-3).

The graph is grimp's (import-linter's own graph library), built by parsing the files, never by
importing them: an import inside a function body or under ``if TYPE_CHECKING:`` is an edge too.
A cycle is a strongly connected component of more than one module, or a module that imports
itself; the check is shown on small synthetic packages written into ``tmp_path``.
"""

from __future__ import annotations

import itertools
import textwrap
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from pathlib import Path

import grimp
import pytest


def build_import_graph(package: str) -> grimp.ImportGraph:
    """The graph of the imports between the modules of ``package``, external imports left out.

    ``cache_dir=None``: grimp would otherwise write a ``.grimp_cache`` into the working directory.
    """
    return grimp.build_graph(package, include_external_packages=False, cache_dir=None)


def _successors(graph: grimp.ImportGraph) -> dict[str, list[str]]:
    return {
        module: sorted(graph.find_modules_directly_imported_by(module)) for module in graph.modules
    }


def cyclic_components(graph: grimp.ImportGraph) -> list[list[str]]:
    """Every strongly connected component of more than one module, and every module that imports
    itself, each sorted, the list sorted (Tarjan's algorithm, iterative: no recursion limit)."""
    successors = _successors(graph)
    index: dict[str, int] = {}
    lowlink: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []

    def visit(module: str) -> Iterator[str]:
        index[module] = lowlink[module] = len(index)
        stack.append(module)
        on_stack.add(module)
        return iter(successors.get(module, []))

    for root in sorted(successors):
        if root in index:
            continue
        work: list[tuple[str, Iterator[str]]] = [(root, visit(root))]
        while work:
            module, children = work[-1]
            for child in children:
                if child not in index:
                    work.append((child, visit(child)))
                    break
                if child in on_stack:
                    lowlink[module] = min(lowlink[module], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    lowlink[parent] = min(lowlink[parent], lowlink[module])
                if lowlink[module] == index[module]:
                    component: list[str] = []
                    while not component or component[-1] != module:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                    if len(component) > 1 or module in successors[module]:
                        components.append(sorted(component))
    return sorted(components)


def find_cycles(package: str) -> list[list[str]]:
    """The import cycles of ``package``: see ``cyclic_components``."""
    return cyclic_components(build_import_graph(package))


def shortest_cycle(graph: grimp.ImportGraph, component: list[str]) -> list[str]:
    """A shortest chain of imports from the component's first module back to itself, both ends
    included (breadth first, inside the component; grimp's ``find_shortest_chain(m, m)`` raises
    "Modules have shared descendants" instead of answering)."""
    members = set(component)
    start = component[0]
    previous: dict[str, str] = {}
    frontier = deque([start])
    while frontier:
        module = frontier.popleft()
        for child in sorted(graph.find_modules_directly_imported_by(module) & members):
            if child == start:
                back = [module]
                while back[-1] != start:
                    back.append(previous[back[-1]])
                return [*reversed(back), start]
            if child not in previous:
                previous[child] = module
                frontier.append(child)
    raise AssertionError(f"{start} does not reach itself: {component} is not a cycle")


def cycle_report(package: str) -> str:
    """The assertion message: for every cycle of ``package`` its modules, one concrete cycle
    path through them, and the import line behind each step of that path."""
    graph = build_import_graph(package)
    cycles = cyclic_components(graph)
    lines = [f"{package} has {len(cycles)} import cycle(s):"]
    for number, component in enumerate(cycles, 1):
        path = shortest_cycle(graph, component)
        lines.append(f"cycle {number}, {len(component)} module(s):")
        lines.extend(f"  {module}" for module in component)
        lines.append(f"  path: {' -> '.join(path)}")
        for importer, imported in itertools.pairwise(path):
            details = graph.get_import_details(importer=importer, imported=imported)
            first = min(details, key=lambda detail: detail["line_number"])
            lines.append(
                f"    {importer}:{first['line_number']}: {first['line_contents']}"
                + (f"  (+{len(details) - 1} more)" if len(details) > 1 else "")
            )
    return "\n".join(lines)


@pytest.mark.spec("ARCH-2")
def test_zlink_trio_has_no_import_cycle() -> None:
    """No chain of imports between the modules of zlink_trio leads back to where it started."""
    assert [] == find_cycles("zlink_trio"), cycle_report("zlink_trio")


MakePackage = Callable[[dict[str, str]], str]


@pytest.fixture
def make_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> MakePackage:
    """Writes a package with a unique name and the given modules (name -> source, ``PKG`` standing
    for the package's name) under ``tmp_path``, puts it on ``sys.path`` and returns its name;
    grimp parses the files, nothing imports them."""
    monkeypatch.syspath_prepend(str(tmp_path))

    def make(modules: dict[str, str]) -> str:
        name = f"synthetic_{uuid.uuid4().hex}"
        root = tmp_path / name
        root.mkdir()
        (root / "__init__.py").write_text('"""A synthetic package."""\n', encoding="utf-8")
        for module, source in modules.items():
            (root / f"{module}.py").write_text(
                textwrap.dedent(source).replace("PKG", name), encoding="utf-8"
            )
        return name

    return make


@pytest.mark.spec("ARCH-3")
def test_acyclic_package_has_no_cycle(make_package: MakePackage) -> None:
    """A chain a -> b -> c is no cycle."""
    package = make_package(
        {"a": "from . import b\n", "b": "from .c import VALUE\n", "c": "VALUE = 1\n"}
    )

    assert [] == find_cycles(package)


@pytest.mark.spec("ARCH-3")
def test_direct_cycle_is_found_and_named(make_package: MakePackage) -> None:
    """a -> b -> a is one cycle of the two modules, named by their full names."""
    package = make_package({"a": "from . import b\n", "b": "from . import a\n"})

    assert [[f"{package}.a", f"{package}.b"]] == find_cycles(package)


@pytest.mark.spec("ARCH-3")
def test_cycle_closed_inside_a_function_is_found(make_package: MakePackage) -> None:
    """An import inside a function body is an edge: it closes a cycle like any other."""
    package = make_package(
        {
            "a": "from . import b\n",
            "b": """\
                def late() -> object:
                    from . import a

                    return a
            """,
        }
    )

    assert [[f"{package}.a", f"{package}.b"]] == find_cycles(package)


@pytest.mark.spec("ARCH-3")
def test_cycle_closed_under_type_checking_is_found(make_package: MakePackage) -> None:
    """An import under ``if TYPE_CHECKING:`` is an edge: it closes a cycle like any other."""
    package = make_package(
        {
            "a": "from .b import B\n\nA = 1\n",
            "b": """\
                from __future__ import annotations

                from typing import TYPE_CHECKING

                if TYPE_CHECKING:
                    from .a import A


                class B:
                    def a(self) -> A: ...
            """,
        }
    )

    assert [[f"{package}.a", f"{package}.b"]] == find_cycles(package)


@pytest.mark.spec("ARCH-3")
def test_three_module_cycle_is_one_component_with_a_path_through_all(
    make_package: MakePackage,
) -> None:
    """a -> b -> c -> a is one component of three modules, and its path passes all three."""
    package = make_package(
        {"a": "from . import b\n", "b": "from . import c\n", "c": "from . import a\n"}
    )
    a, b, c = (f"{package}.{module}" for module in "abc")
    graph = build_import_graph(package)

    assert [[a, b, c]] == cyclic_components(graph)
    assert [a, b, c, a] == shortest_cycle(graph, [a, b, c])


@pytest.mark.spec("ARCH-3")
def test_module_importing_itself_is_a_cycle(make_package: MakePackage) -> None:
    """A module that imports itself is a cycle of one module; importing it is no cycle."""
    package = make_package({"a": "import PKG.a\n", "b": "from . import a\n"})

    assert [[f"{package}.a"]] == find_cycles(package)


@pytest.mark.spec("ARCH-3")
def test_separate_cycles_are_separate_components(make_package: MakePackage) -> None:
    """Two cycles that share no module are reported apart, in sorted order."""
    package = make_package(
        {
            "a": "from . import b\n",
            "b": "from . import a\nfrom . import c\n",
            "c": "from . import d\n",
            "d": "from . import c\n",
        }
    )

    assert [
        [f"{package}.a", f"{package}.b"],
        [f"{package}.c", f"{package}.d"],
    ] == find_cycles(package)


@pytest.mark.spec("ARCH-3")
def test_failure_message_names_the_cycle_and_its_imports(make_package: MakePackage) -> None:
    """The assertion message names the cycle's modules, its path and the import lines."""
    package = make_package(
        {"a": "from . import b\n", "b": '"""Doc."""\n\nfrom .a import A\n', "c": ""}
    )
    a, b = f"{package}.a", f"{package}.b"

    assert (
        f"{package} has 1 import cycle(s):\n"
        f"cycle 1, 2 module(s):\n"
        f"  {a}\n"
        f"  {b}\n"
        f"  path: {a} -> {b} -> {a}\n"
        f"    {a}:1: from . import b\n"
        f"    {b}:3: from .a import A"
    ) == cycle_report(package)
