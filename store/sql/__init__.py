"""Named SQL, loaded once from `store/sql/<noun>.sql`.

Each file holds queries under a header line `-- name: <name>` followed by a
one-line `-- ` description; `load("runs")["start_run"]` returns the statement.
One file per repository module keeps each module's SQL next to its name, and
SQL in .sql files can be read, linted and diffed as SQL.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

SQL_DIR = Path(__file__).parent
_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Queries(dict[str, str]):
    """Statements by name; a missing name says which file was searched."""

    def __init__(self, source: str, items: dict[str, str]) -> None:
        super().__init__(items)
        self.source = source

    def __missing__(self, key: str) -> str:
        raise KeyError(f"no query named {key!r} in {self.source}; known: {', '.join(sorted(self))}")


def parse(text: str, source: str = "<text>") -> Queries:
    """Split a file's text into named statements; a duplicate name is an error."""
    found: dict[str, str] = {}
    headers = list(_HEADER.finditer(text))
    for header, following in zip(headers, [*headers[1:], None], strict=True):
        end = following.start() if following else len(text)
        body = text[header.end() : end].strip()
        name = header.group(1)
        if name in found:
            raise ValueError(f"{source}: query {name!r} is defined twice")
        if not body:
            raise ValueError(f"{source}: query {name!r} is empty")
        found[name] = body
    return Queries(source, found)


@functools.cache
def load(noun: str) -> Queries:
    path = SQL_DIR / f"{noun}.sql"
    return parse(path.read_text(encoding="utf-8"), str(path))


def statements(script: str) -> Iterator[str]:
    """Split a script into complete statements (triggers' inner semicolons included).

    `executescript` would commit first, so migrations run statement by statement
    inside their own transaction instead.
    """
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            if not _only_comments(buffer):
                yield buffer.strip()
            buffer = ""
    if not _only_comments(buffer):
        raise ValueError(
            f"incomplete SQL statement at the end of the script: {buffer.strip()[:80]}"
        )


def _only_comments(text: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in text.splitlines())
