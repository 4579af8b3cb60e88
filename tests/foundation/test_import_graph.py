"""No import circle inside ``bot/`` or ``channels/``.

A circle (``commands → manager → commands``) means two modules cannot be understood, tested or changed
apart, and it is usually a helper reaching for a whole object (the manager, the channel) where a narrow
collaborator would do. This reads every module's source with :mod:`ast` — nothing is imported — and
builds the graph of imports between the modules of one package. Every import statement counts, wherever
it stands: at the top, inside a function (a late import to save start-up time is still a dependency)
and under ``if TYPE_CHECKING:`` (a type-only import is still a dependency a reader must follow; it only
hides the circle from the interpreter). ``from pkg import name`` points at the submodule ``pkg.name``
when there is one, else at ``pkg`` itself; importing a submodule is not counted as importing its parent
package, whose ``__init__`` Python also runs (these packages' ``__init__`` files import nothing that
could close a circle through them).

``channels/`` had circles where a platform's helper named its channel class for typing; each was broken
by a narrow protocol the helper takes instead of the channel: ``TelegramHost`` (transport, presses),
``DiscordHost`` (transport, interactions) and Feishu's ``CardPoster`` (the CardKit stream).
:data:`CHANNEL_CIRCLES_LEFT` is the list of circles still allowed — empty — and the test checks it
exactly, so a new circle fails.
"""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

#: Strongly connected groups of ``channels`` modules still allowed (none).
CHANNEL_CIRCLES_LEFT: set[frozenset[str]] = set()


def modules_of(root: Path, package: str) -> dict[str, tuple[Path, bool]]:
    """Dotted module name → (file, is a package ``__init__``) for every module of ``package``."""
    found: dict[str, tuple[Path, bool]] = {}
    for path in sorted((root / package).rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        if is_package:
            parts.pop()
        found[".".join(parts)] = (path, is_package)
    return found


def _owner(name: str, modules: dict[str, tuple[Path, bool]]) -> str | None:
    """The module of the package that ``name`` (a module, or a name inside one) belongs to."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def _targets(
    node: ast.Import | ast.ImportFrom, module: str, is_package: bool, modules: dict[str, tuple[Path, bool]]
) -> Iterable[str | None]:
    if isinstance(node, ast.Import):
        return (_owner(alias.name, modules) for alias in node.names)
    base = node.module or ""
    if node.level:  # relative: from the module's own package, one level up per extra dot
        anchor = module if is_package else module.rpartition(".")[0]
        for _ in range(node.level - 1):
            anchor = anchor.rpartition(".")[0]
        base = f"{anchor}.{base}" if base else anchor
    return (
        f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else _owner(base, modules)
        for alias in node.names
    )


def import_graph(root: Path, package: str) -> dict[str, set[str]]:
    """Module → the modules of the same package it imports, anywhere in its source."""
    modules = modules_of(root, package)
    graph: dict[str, set[str]] = {}
    for module, (path, is_package) in modules.items():
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                edges.update(t for t in _targets(node, module, is_package, modules) if t and t != module)
        graph[module] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[frozenset[str]] = set()
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            child = next(edges, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                group = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    group.add(member)
                    if member == node:
                        break
                if len(group) > 1:
                    found.add(frozenset(group))
    return found


def _describe(found: set[frozenset[str]], graph: dict[str, set[str]]) -> str:
    return "\n".join(
        "circle: " + "; ".join(f"{m} → {', '.join(sorted(graph[m] & group))}" for m in sorted(group))
        for group in found
    )


def test_bot_has_no_import_circle() -> None:
    graph = import_graph(ROOT, "bot")
    assert {"bot.manager", "bot.commands.base", "bot.db"} <= graph.keys()
    found = circles(graph)
    assert not found, _describe(found, graph)


def test_channels_has_only_the_listed_circles() -> None:
    graph = import_graph(ROOT, "channels")
    found = circles(graph)
    assert found - CHANNEL_CIRCLES_LEFT == set(), "a new import circle:\n" + _describe(
        found - CHANNEL_CIRCLES_LEFT, graph
    )
    assert CHANNEL_CIRCLES_LEFT - found == set(), "no longer a circle: strike it off CHANNEL_CIRCLES_LEFT"


@pytest.mark.parametrize(
    ("where", "how"),
    [
        ("top", "from pkg.a import thing"),
        ("function", "def late():\n    from pkg import a"),
        ("type checking", "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .a import Thing"),
    ],
)
def test_a_circle_is_found_wherever_its_import_stands(tmp_path: Path, where: str, how: str) -> None:
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg import b\n")
    (package / "b.py").write_text(how + "\n")
    (package / "c.py").write_text("import pkg.a\n")  # imports into the circle, is not part of it
    assert circles(import_graph(tmp_path, "pkg")) == {frozenset({"pkg.a", "pkg.b"})}, where
