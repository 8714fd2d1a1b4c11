"""The store is the only door to the database, and imports run one way: bot → pipelines → store.
Inside each layer too: its rooms stand on floors, and a module imports from its own floor
or the floors below.

Read from the source (every import, module-level or inside a function), so an import
that slipped through fails here before it is ever run.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Each package and the packages it may import; nothing runs back up.
LAYERS = {"store": set(), "pipelines": {"store"}, "bot": {"pipelines", "store"}}
#: Database drivers, and the store's own insides (its SQL files, its backends).
DRIVERS = {"sqlite3", "psycopg", "psycopg_pool", "aiosqlite"}
STORE_INSIDES = {
    "store.sql",
    "store.backends.sqlite_store",
    "store.backends.pg",
    "store.backends.lanes",
}
#: Each layer's floors, ground floor first, each with its rooms: a folder of the layer, or
#: a module at the layer's top (store/errors.py is the room `errors`).
FLOORS: dict[str, list[tuple[str, set[str]]]] = {
    "store": [
        ("ground", {"errors", "clock", "backend", "episodes", "units"}),
        ("sql", {"sql"}),
        ("backends", {"backends"}),
        ("audit", {"audit"}),
        ("nouns", {"db", "payloads", "outbox", "items", "drafts"}),
        ("cluster", {"cluster"}),
        ("queue", {"queue"}),
        ("intake", {"intake"}),
        ("ledger", {"ledger"}),
        ("reports", {"reports"}),
        ("review", {"review"}),
        ("upkeep", {"upkeep"}),
    ],
    "pipelines": [
        ("ground", {"ground"}),
        ("text", {"text", "voice"}),
        ("sources", {"sources"}),
        ("dispatch", {"dispatch"}),
        ("providers", {"providers"}),
        ("config", {"config"}),
        ("publishing", {"publishing"}),
        ("approval", {"approval"}),
        ("drafting", {"drafting"}),
        ("runs", {"runs"}),
        ("audit", {"audit"}),
        ("service", {"service"}),
        ("operations", {"operations"}),
    ],
    "bot": [
        ("ground", {"ground", "settings"}),
        ("web", {"web"}),
        ("chat", {"chat"}),
        ("cards", {"cards"}),
        ("commands", {"commands"}),
        ("process", {"process"}),
        ("app", {"app", "early", "__main__"}),
        ("demo", {"demo"}),
        ("cli", {"cli"}),
    ],
}
#: The imports that still run back up a floor, each to go (issue 55); a new one fails.
BACK_UP: dict[str, set[str]] = {
    "store": set(),
    "pipelines": {
        # A pipeline's template is checked when its file loads.
        "pipelines.config.draft -> pipelines.drafting.prompt",
        # The digest lists what awaits approval as the /pending list does.
        "pipelines.service.nudges -> pipelines.operations.review",
    },
    "bot": set(),
}
# A string that opens like a statement is SQL written outside the store.
_SQL = re.compile(r"^\s*(SELECT|INSERT|UPDATE|DELETE|PRAGMA|BEGIN|CREATE|ALTER|DROP)\s")


def modules(package: str) -> Iterator[tuple[Path, ast.Module]]:
    for path in sorted((ROOT / package).rglob("*.py")):
        yield path.relative_to(ROOT), ast.parse(path.read_text(), str(path))


def imported(tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every module an import statement names, `from x import y` as both x and x.y."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module
            yield from ((node.lineno, f"{node.module}.{alias.name}") for alias in node.names)


@pytest.mark.parametrize("package", ["bot", "pipelines"])
def test_nothing_outside_the_store_imports_a_driver_or_the_stores_insides(package: str) -> None:
    found = [
        f"{path}:{line} imports {name}"
        for path, tree in modules(package)
        for line, name in imported(tree)
        if name.split(".")[0] in DRIVERS or name in STORE_INSIDES
    ]
    assert not found, "only store/ may touch the database:\n" + "\n".join(found)


@pytest.mark.parametrize("package", ["bot", "pipelines"])
def test_nothing_outside_the_store_writes_sql(package: str) -> None:
    found = [
        f"{path}:{node.lineno} {node.value[:40]!r}"
        for path, tree in modules(package)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and _SQL.match(node.value)
    ]
    assert not found, "SQL belongs in store/sql/<noun>.sql:\n" + "\n".join(found)


@pytest.mark.parametrize("package", sorted(LAYERS))
def test_no_import_runs_back_up(package: str) -> None:
    above = set(LAYERS) - LAYERS[package] - {package}
    found = [
        f"{path}:{line} imports {name}"
        for path, tree in modules(package)
        for line, name in imported(tree)
        if name.split(".")[0] in above
    ]
    assert not found, f"{package} may import only {sorted(LAYERS[package])}:\n" + "\n".join(found)


def import_graph() -> dict[str, set[str]]:
    """module -> the project modules it imports; `from pkg import sub` counts as pkg.sub."""
    trees = {
        ".".join(path.with_suffix("").parts).removesuffix(".__init__"): tree
        for package in LAYERS
        for path, tree in modules(package)
    }
    graph: dict[str, set[str]] = {name: set() for name in trees}
    for name, tree in trees.items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{alias.name}" for alias in node.names]
                targets = [sub if sub in trees else node.module for sub in subs]
            else:
                continue
            graph[name] |= {target for target in targets if target in trees and target != name}
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[frozenset[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph[node]:
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = set()
            while (member := stack.pop()) != node:
                group.add(member)
            if group:
                found.append(frozenset(group | {node}))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_module_imports_its_way_back_to_itself() -> None:
    found = [sorted(group) for group in circles(import_graph())]
    assert not found, "import circles (TYPE_CHECKING and function-level imports count):\n" + (
        "\n".join(" -> ".join(group) for group in found)
    )


def test_the_circle_check_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_the_checks_see_an_import_inside_a_function() -> None:
    tree = ast.parse("def f():\n    import sqlite3\n    from bot import render\n")
    assert [name for _, name in imported(tree)] == ["sqlite3", "bot", "bot.render"]


def dotted(path: Path) -> str:
    """The module a source file is: store/ledger/__init__.py is `store.ledger`."""
    parts = path.with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def referred(tree: ast.Module, module: str) -> Iterator[str]:
    """Every `module.name` a file names: through its imports, or its own names bare."""
    aliases = {
        alias.asname or alias.name: f"{node.module}.{alias.name}"
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
        for alias in node.names
    }
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            if node.value.id in aliases:
                yield f"{aliases[node.value.id]}.{node.attr}"
        elif isinstance(node, ast.Name):
            yield aliases.get(node.id, f"{module}.{node.id}")


def test_every_async_function_of_the_store_has_a_caller_outside_the_tests() -> None:
    """A store function is what the product calls; a test calls it too, or runs the unit
    itself (`await store.write(items.transition_sync, ...)`), never a twin of its own."""
    used = {
        name
        for package in LAYERS
        for path, tree in modules(package)
        for name in referred(tree, dotted(path))
    }
    unused = [
        f"{path}:{node.lineno} {node.name}"
        for path, tree in modules("store")
        for node in tree.body
        if isinstance(node, ast.AsyncFunctionDef)
        and not node.name.startswith("_")
        and f"{dotted(path)}.{node.name}" not in used
    ]
    listed = "\n".join(unused)
    assert not unused, f"async functions nothing in bot/, pipelines/ or store/ calls:\n{listed}"


def floor_index(layer: str) -> dict[str, int]:
    """Each room of `layer` and the number of its floor, the ground floor 0."""
    return {room: n for n, (_, rooms) in enumerate(FLOORS[layer]) for room in rooms}


def back_up(graph: dict[str, set[str]], floors: dict[str, int]) -> set[str]:
    """Every import `a -> b` between two rooms (`layer.room...`) where b's floor is higher."""

    def floor(module: str) -> int:
        parts = module.split(".")
        return floors[parts[1]] if len(parts) > 1 else -1

    return {
        f"{a} -> {b}"
        for a, targets in graph.items()
        for b in targets
        if b.split(".")[0] == a.split(".")[0] and -1 < floor(a) < floor(b)
    }


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_every_room_stands_on_one_floor(layer: str) -> None:
    rooms = {name.split(".")[1] for name in import_graph() if name.startswith(f"{layer}.")}
    listed = [room for _, members in FLOORS[layer] for room in members]
    assert len(listed) == len(set(listed)), f"a room of {layer} is on two floors"
    assert not rooms - set(listed), f"name the floor of {sorted(rooms - set(listed))} in FLOORS"


@pytest.mark.parametrize("layer", sorted(LAYERS))
def test_no_import_runs_back_up_a_floor(layer: str) -> None:
    graph = {a: b for a, b in import_graph().items() if a.startswith(f"{layer}.")}
    found = back_up(graph, floor_index(layer))
    order = " < ".join(name for name, _ in FLOORS[layer])
    new, gone = sorted(found - BACK_UP[layer]), sorted(BACK_UP[layer] - found)
    assert not new, (
        f"{layer}'s floors are {order}; these imports run back up:\n"
        + "\n".join(new)
        + f"\n(all {len(found)} found: "
        + "; ".join(sorted(found))
        + ")"
    )
    assert not gone, "these no longer run back up; take them off BACK_UP:\n" + "\n".join(gone)


def test_the_floor_check_finds_an_import_back_up() -> None:
    graph = {"x.a.m": {"x.b.n", "y.c"}, "x.b.n": {"x.a.m"}, "x.top": {"x.b.n"}, "x": {"x.b.n"}}
    assert back_up(graph, {"a": 0, "b": 1, "top": 1}) == {"x.a.m -> x.b.n"}
