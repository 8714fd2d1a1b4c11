"""Count the statements a unit sends, by name, on either backend: a unit's round trips
to a database server are what PostgreSQL pays per item.

    counted = Counting(conn)
    unit(counted, ...)
    assert counted.sent["events.seal"] == 1
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from store import backend, sql


def label(query: str) -> str:
    """A named query as `noun.name`; any other statement by its first word."""
    if isinstance(query, sql.Query):
        return f"{query.noun}.{query.name}"
    return query.split()[0]


class Counting:
    """A unit's connection that counts what goes through it (`executemany`: each row)."""

    def __init__(self, conn: backend.Conn) -> None:
        self._conn = conn
        self.sent: Counter[str] = Counter()

    def execute(self, query: str, parameters: Any = None, /) -> backend.Cursor:
        self.sent[label(query)] += 1
        if parameters is None:
            return self._conn.execute(query)
        return self._conn.execute(query, parameters)

    def executemany(self, query: str, parameters: Iterable[Any], /) -> backend.Cursor:
        rows = list(parameters)
        self.sent[label(query)] += len(rows)
        return self._conn.executemany(query, rows)

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    @property
    def total(self) -> int:
        return sum(self.sent.values())
