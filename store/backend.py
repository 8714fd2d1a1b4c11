"""The seam between the store's units and the database they run on.

Every unit is `fn(conn)`: it runs statements from `store/sql/<noun>.sql` with the
store's `:name` parameters and reads rows by index or by column name. Two backends
hand units a connection of this shape: SQLite (`store.backends.sqlite_store`, a sqlite3
connection) and PostgreSQL (`store.backends.pg`, a psycopg connection behind
`pg_conn.Conn`). Which one runs is `StoreConfig.database_url`; nothing outside `store/` can tell.

    def unit(conn: backend.Conn) -> int:
        return conn.execute(Q["count_in_state"], {"pipeline": p, "state": s}).fetchone()[0]
"""

from __future__ import annotations

import dataclasses
import enum
import json
import types
from collections.abc import Callable, Iterable, Iterator
from datetime import datetime
from typing import Any, Literal, Protocol, Self, TypeVar, get_args, get_origin, get_type_hints

from store import clock

Dialect = Literal["sqlite", "postgres"]
T = TypeVar("T")

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


def chains_writes(conn: Conn) -> bool:
    """Whether one statement may chain writes on `conn` (PostgreSQL's data-modifying CTEs,
    `WITH x AS (UPDATE ... RETURNING ...) INSERT ...`): a unit's writes then cost one round
    trip to the server instead of one each. SQLite has no such statements, and its own cost
    no round trip (the database is in the process), so its units write one by one. The one
    place a unit asks which database it runs on: a unit tries its chained statement where
    this is true, and takes its statement-by-statement path otherwise."""
    return getattr(conn, "dialect", None) == "postgres"


def shares_transaction(conn: Conn) -> bool:
    """Whether the unit running on `conn` shares its transaction with other units (a
    batch of PostgreSQL's lanes): a lock it takes is then held until every unit of the
    batch has run. On SQLite's one writer nobody else waits for it, so never."""
    return getattr(conn, "batch_size", 1) > 1


def fetch_chained(conn: Conn, query: str, params: Any, into: Callable[[Row], T]) -> T | None:
    """The first row of `query`, a statement chaining a unit's writes, as `into` makes it;
    None when it wrote nothing, and on SQLite, where it is not sent (`chains_writes`): the
    caller then takes its statement-by-statement path."""
    return fetch_one(conn, query, params, into) if chains_writes(conn) else None


def fetch_one(conn: Conn, query: str, params: Any, into: Callable[[Row], T]) -> T | None:
    """The first row `query` finds, as `into` makes it (`into=Event.from_row`); None: no row."""
    row = conn.execute(query, params).fetchone()
    return None if row is None else into(row)


def fetch_all(conn: Conn, query: str, params: Any, into: Callable[[Row], T]) -> list[T]:
    """Every row `query` finds, each as `into` makes it."""
    return [into(row) for row in conn.execute(query, params).fetchall()]


#: A field's name and how its column's value becomes the field's (None: as it is).
_Plan = tuple[tuple[str, Callable[[Any], Any] | None], ...]
_PLANS: dict[type, _Plan] = {}


class Record:
    """A dataclass read from one row by column name: `Checkpoint.from_row(row)`.

    Each field takes the column of its own name, decoded by the field's type as the
    store encodes it: a datetime from epoch milliseconds (a `datetime | None` keeps
    NULL as None), a bool from 0/1 (SQLite has no booleans), an enum from its value,
    a dict from its JSON text; a str, int, float, bytes or Literal as the row holds it.
    A field whose column is named otherwise, or of any other type, is passed in by name
    (`given`) from the subclass's own from_row; one that is not is a TypeError naming it.
    """

    @classmethod
    def from_row(cls, row: Row, /, **given: Any) -> Self:
        plan = _PLANS.get(cls) or _plan(cls)
        make: Callable[..., Self] = cls
        if given:
            return make(*[given[n] if n in given else _read(row, n, d) for n, d in plan])
        return make(*[row[n] if d is None else d(row[n]) for n, d in plan])


def _read(row: Row, name: str, decode: Callable[[Any], Any] | None) -> Any:
    return row[name] if decode is None else decode(row[name])


def _plan(cls: type) -> _Plan:
    # Read once per class, on first use: by then every name its annotations use exists.
    hints = get_type_hints(cls)
    plan = tuple(
        (f.name, _decoder(hints[f.name], f"{cls.__name__}.{f.name}"))
        for f in dataclasses.fields(cls)
        if f.init
    )
    _PLANS[cls] = plan
    return plan


_AS_STORED = (str, int, float, bytes, type(None))


def _as_stored(hint: Any) -> bool:
    if hint in _AS_STORED or get_origin(hint) is Literal:
        return True
    return isinstance(hint, types.UnionType) and all(_as_stored(a) for a in get_args(hint))


def _json_or_none(args: tuple[Any, ...]) -> bool:
    return len(args) == 2 and type(None) in args and any(get_origin(a) is dict for a in args)


def _maybe_json(value: Any) -> Any:
    return None if value is None else json.loads(value)


def _decoder(hint: Any, field: str) -> Callable[[Any], Any] | None:
    if _as_stored(hint):
        return None
    if hint is datetime:
        return clock.from_ms
    if isinstance(hint, types.UnionType) and set(get_args(hint)) == {datetime, type(None)}:
        return clock.maybe_from_ms
    if hint is bool:
        return bool
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return hint
    if get_origin(hint) is dict:
        return json.loads
    if isinstance(hint, types.UnionType) and _json_or_none(get_args(hint)):
        return _maybe_json

    def unread(value: Any) -> Any:
        raise TypeError(
            f"{field} ({hint}) is not read from a column: pass it to from_row by name;"
            " read from columns: datetime, bool, enums, dicts (JSON, or None), str, int, float,"
            " bytes"
        )

    return unread
