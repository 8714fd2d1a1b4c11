"""Named SQL, loaded once from `store/sql/<noun>.sql`.

Each file holds queries under a header line `-- name: <name>` followed by a
one-line `-- ` description; `load("runs")["start_run"]` returns the statement.
One file per repository module keeps each module's SQL next to its name, and
SQL in .sql files can be read, linted and diffed as SQL.

The files are SQLite's and PostgreSQL's alike. A statement that must differ on
PostgreSQL is written again under the same name in `store/sql/postgres/<noun>.sql`;
`postgres(query)` picks it (or the shared text) and turns the `:name` parameters
into psycopg's `%(name)s`.
"""

from __future__ import annotations

import functools
import re
import sqlite3
from collections.abc import Iterator
from pathlib import Path

SQL_DIR = Path(__file__).parent
POSTGRES_DIR = SQL_DIR / "postgres"
_HEADER = re.compile(r"^--\s*name:\s*([a-z_][a-z0-9_]*)\s*$", re.MULTILINE)


class Query(str):
    """A statement that knows its file and name, so a dialect can override it by name."""

    noun: str
    name: str

    def __new__(cls, text: str, noun: str, name: str) -> Query:
        query = super().__new__(cls, text)
        query.noun, query.name = noun, name
        return query


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
    queries = parse(path.read_text(encoding="utf-8"), str(path))
    return Queries(queries.source, {k: Query(v, noun, k) for k, v in queries.items()})


@functools.cache
def _postgres_overrides(noun: str) -> Queries:
    path = POSTGRES_DIR / f"{noun}.sql"
    if not path.exists():
        return Queries(str(path), {})
    return parse(path.read_text(encoding="utf-8"), str(path))


#: A comment, a quoted string or identifier, a `::` cast, a `:name` or `?` parameter, or a `%`
#: (psycopg's own placeholder sign, doubled to stay a literal, in strings too: psycopg
#: reads the whole text for placeholders).
_TOKEN = re.compile(
    r"--[^\n]*|'(?:[^']|'')*'|\"(?:[^\"]|\"\")*\"|::|:([A-Za-z_][A-Za-z0-9_]*)|\?|%"
)


def _placeholder(match: re.Match[str]) -> str:
    token = match.group(0)
    if match.group(1):
        return f"%({match.group(1)})s"
    return {"?": "%s", "%": "%%"}.get(token, token.replace("%", "%%"))


@functools.lru_cache(maxsize=1024)
def _to_psycopg(text: str) -> str:
    return _TOKEN.sub(_placeholder, text)


def postgres(query: str) -> str:
    """The statement PostgreSQL runs for `query`: its override if any, in psycopg style."""
    if isinstance(query, Query):
        overrides = _postgres_overrides(query.noun)
        if query.name in overrides:
            return _to_psycopg(overrides[query.name])
    return _to_psycopg(str(query))


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
