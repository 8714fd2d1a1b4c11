"""The store is the only door to the database, and imports run one way: bot → pipelines → store.

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
STORE_INSIDES = {"store.sql", "store.sqlite_store", "store.pg", "store.lanes"}
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


def test_the_checks_see_an_import_inside_a_function() -> None:
    tree = ast.parse("def f():\n    import sqlite3\n    from bot import render\n")
    assert [name for _, name in imported(tree)] == ["sqlite3", "bot", "bot.render"]
