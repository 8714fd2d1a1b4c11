"""PostgreSQL connections as the store's units see them (`backend.Conn`): named SQL with
`:name` parameters, rows by index or by column name, and a count of the statements and
round trips sent, which `bench scale` reads.

    conn = pg_conn.connect(url)                  # a lane's connection (autocommit)
    conn.execute("BEGIN"); conn.execute(Q["move"], params); conn.execute("COMMIT")
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg import pq

from store import backend, sql
from store.backends import notify

if TYPE_CHECKING:
    from psycopg.rows import RowMaker

log = logging.getLogger(__name__)

#: A statement run more often than this on a connection is prepared (psycopg's default).
PREPARE_THRESHOLD = 5
#: Read lanes see each statement's own snapshot, as SQLite's readers do; a read unit
#: that wants one snapshot for several statements opens BEGIN itself.
_READER_SETUP = (
    "SET default_transaction_read_only = on",
    "SET default_transaction_isolation = 'repeatable read'",
)


class Row:
    """A result row: by index, by column name, `dict(row)` and unpacking."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: tuple[Any, ...], index: Mapping[str, int]) -> None:
        self._values = values
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        if isinstance(key, str):
            return self._values[self._index[key]]
        return self._values[key]

    def __len__(self) -> int:
        return len(self._values)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __eq__(self, other: object) -> bool:
        return tuple(self) == (tuple(other) if isinstance(other, Row) else other)

    def __hash__(self) -> int:
        return hash(self._values)

    def __repr__(self) -> str:
        return f"Row{self._values!r}"

    def keys(self) -> list[str]:
        return list(self._index)


def _row_factory(cursor: Any) -> RowMaker[Row]:
    names = [column.name for column in cursor.description or ()]
    index = {name: i for i, name in enumerate(names)}
    return lambda values: Row(tuple(values), index)


class Cursor:
    """One statement's results, shaped as sqlite3's cursor for the units."""

    def __init__(self, cursor: psycopg.Cursor[Row]) -> None:
        self._cursor = cursor

    @property
    def rowcount(self) -> int:
        return self._cursor.rowcount

    def fetchone(self) -> Any:
        return self._cursor.fetchone() if self._cursor.description else None

    def fetchall(self) -> list[Any]:
        return self._cursor.fetchall() if self._cursor.description else []

    def __iter__(self) -> Iterator[Any]:
        return iter(self.fetchall())


#: Statements sent by this process's store connections, by label (`_label`), and the
#: round trips that carried them (a BEGIN rides with the statement after it, and a
#: COMMIT with the NOTIFYs before it: their results are not read).
_sent: Counter[str] = Counter()
_trips = 0
_sent_lock = threading.Lock()


def statements_sent() -> int:
    """Statements this process's store connections sent to the server (savepoints,
    COMMITs and NOTIFYs included; `round_trips` counts the trips that carried them)."""
    with _sent_lock:
        return sum(_sent.values())


def round_trips() -> int:
    """Round trips this process's store connections made to the server."""
    with _sent_lock:
        return _trips


def statements_by_label() -> dict[str, int]:
    """`statements_sent` by statement: a named query as `noun.name`, any other by its
    first words; a read lane's prefixed `read `. What `bench scale --by-statement` lists."""
    with _sent_lock:
        return dict(_sent)


def _label(query: str, reader: bool) -> str:
    if isinstance(query, sql.Query):
        label = f"{query.noun}.{query.name}"
    else:
        label = " ".join(query.split()[:3])
    return f"read {label}" if reader else label


def _count(queries: Iterable[str], reader: bool, n: int = 1) -> None:
    """Statements sent in one round trip (`n` times each: executemany)."""
    global _trips
    with _sent_lock:
        for query in queries:
            _sent[_label(query, reader)] += n
        _trips += 1


class Conn:
    """A psycopg connection that runs the store's named SQL (`backend.Conn`).

    A connection the server dropped (a restart, a failover) is opened again before
    the next unit; the unit it failed under is not run again, since its commit may
    have happened.

    Inside a transaction a unit's `notify.send_sync` only notes its channel: each
    channel is notified once, just before COMMIT (the server merges a transaction's
    equal notifications anyway, so one statement per channel wakes the same
    listeners); a savepoint rolled back forgets what its unit noted.

    Statements whose results nobody reads share a round trip (psycopg's pipeline mode):
    BEGIN is sent with the transaction's first statement, and the NOTIFYs with COMMIT. A
    transaction that sent nothing sends neither its BEGIN nor its COMMIT.
    """

    #: What `backend.chains_writes` asks: PostgreSQL runs data-modifying CTEs.
    dialect: backend.Dialect = "postgres"
    #: The units sharing the transaction now (`backend.shares_transaction`).
    batch_size = 1

    def __init__(self, url: str, *, reader: bool = False, prepared: bool = True) -> None:
        self._url = url
        self._reader = reader
        self._prepare_threshold = PREPARE_THRESHOLD if prepared else None
        self.raw = self._open()
        #: BEGIN was asked for and is not sent yet: it goes with the next statement.
        self._begun = False
        self._channels: set[str] = set()
        self._savepoints: list[tuple[str, frozenset[str]]] = []

    def _open(self) -> psycopg.Connection[Row]:
        raw = psycopg.connect(
            self._url,
            autocommit=True,
            prepare_threshold=self._prepare_threshold,
            row_factory=_row_factory,
        )
        for setting in _READER_SETUP if self._reader else ():
            raw.execute(setting)
        return raw

    def reopen_if_dropped(self) -> None:
        if self.raw.closed:
            log.warning("the database connection was lost; connecting again")
            self.raw = self._open()
            self._begun = False

    def execute(self, query: str, parameters: Any = None, /) -> Cursor:
        word, _, rest = query.partition(" ")
        ending = word in ("COMMIT", "ROLLBACK") and not rest.startswith("TO ")
        channels = sorted(self._channels) if word == "COMMIT" else []
        self._track(query)
        if word == "BEGIN" and not rest:
            self._begun = True  # sent with the transaction's first statement
            return Cursor(self.raw.cursor())
        if ending and self._begun and not channels:
            self._begun = False  # the transaction sent nothing: nothing to end
            return Cursor(self.raw.cursor())
        begin, self._begun = self._begun, False
        notifies = [notify.Q["notify"]] * len(channels)
        _count([*(["BEGIN"] if begin else []), *notifies, query], self._reader)
        if not begin and not channels:
            return Cursor(self._send(query, parameters))
        with self.raw.pipeline():
            if begin:
                self.raw.execute("BEGIN")
            for channel in channels:
                self._send(notify.Q["notify"], {"channel": channel})
            return Cursor(self._send(query, parameters))

    def _send(self, query: str, parameters: Any) -> psycopg.Cursor[Row]:
        # Always with parameters, so psycopg reads `%%` as `%` whether or not any are used.
        return self.raw.execute(sql.postgres(query), parameters or {})

    def executemany(self, query: str, parameters: Iterable[Any], /) -> Cursor:
        rows = list(parameters)
        self._flush_begin()
        _count([query], self._reader, len(rows))
        cursor = self.raw.cursor()
        cursor.executemany(sql.postgres(query), rows)
        return Cursor(cursor)

    def _flush_begin(self) -> None:
        """Send a BEGIN not sent yet, alone (before statements that cannot carry it)."""
        if self._begun:
            self._begun = False
            _count(["BEGIN"], self._reader)
            self.raw.execute("BEGIN")

    def notify_at_commit(self, channel: str) -> bool:
        """Note `channel` to notify at this transaction's COMMIT; False outside one
        (the caller then notifies at once)."""
        if not self.in_transaction:
            return False
        self._channels.add(channel)
        return True

    def _track(self, query: str) -> None:
        """Keep the noted channels in step with the transaction and its savepoints."""
        word, _, name = query.partition(" ")
        if word in ("BEGIN", "COMMIT", "ROLLBACK") and not name.startswith("TO "):
            self._channels.clear()
            self._savepoints.clear()
        elif word == "SAVEPOINT":
            self._savepoints.append((name, frozenset(self._channels)))
        elif word == "ROLLBACK":  # ROLLBACK TO name: what the savepoint's units noted goes
            self._channels = set(dict(self._savepoints).get(name[3:], self._channels))
        elif word == "RELEASE" and self._savepoints:
            self._savepoints.pop()

    def script(self, text: str) -> None:
        """Run several statements at once, as written (a migration)."""
        self._flush_begin()
        self.raw.execute(text.encode())

    @property
    def in_transaction(self) -> bool:
        return self._begun or self.raw.info.transaction_status != pq.TransactionStatus.IDLE

    def close(self) -> None:
        self.raw.close()


def connect(url: str, *, reader: bool = False, prepared: bool = True) -> Conn:
    return Conn(url, reader=reader, prepared=prepared)
