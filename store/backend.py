"""The seam between the store's units and the database they run on.

Every unit is `fn(conn)`: it runs statements from `store/sql/<noun>.sql` with the
store's `:name` parameters and reads rows by index or by column name. Two backends
hand units a connection of this shape: SQLite (`store.backends.sqlite_store`, a sqlite3
connection) and PostgreSQL (`store.backends.pg`, a psycopg connection behind `pg.Conn`).
Which one runs is `StoreConfig.database_url`; nothing outside `store/` can tell.

    def unit(conn: backend.Conn) -> int:
        return conn.execute(Q["count_in_state"], {"pipeline": p, "state": s}).fetchone()[0]
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any, Literal, Protocol

Dialect = Literal["sqlite", "postgres"]

#: A row: `row[0]`, `row["name"]`, `dict(row)` and unpacking work on both backends.
Row = Any


class Cursor(Protocol):
    """What a unit reads back from one statement."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class Conn(Protocol):
    """The connection a unit runs on: one transaction, owned by one thread."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Cursor: ...

    def executemany(self, sql: str, parameters: Iterable[Any], /) -> Cursor: ...

    @property
    def in_transaction(self) -> bool: ...
