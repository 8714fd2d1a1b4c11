"""gatehouse's exceptions: one root, and driver errors translated at the edge.

Callers outside `store/` never see a driver's exceptions; they catch `StoreError`
or one of its subclasses. Two branches matter to an operator:

- `Refused`: cannot be done as asked, and nothing is broken (no such item, a state
  that moved on, a person not allowed, a bad argument, too soon). Handlers and the CLI
  catch it in one place and show its message as the answer.
- everything else: the store failed (busy, full, corrupt, closed); logged and reported.

Each class's docstring is its default message.
"""

from __future__ import annotations

import sqlite3


class StoreError(Exception):
    """The store failed."""

    #: PostgreSQL's error class when the server raised it (a retry reads it).
    sqlstate: str | None = None

    def __init__(self, message: str | None = None) -> None:
        super().__init__(message or (self.__doc__ or "").strip())


class DataDirError(StoreError):
    """The data directory is unsafe or unusable."""


class LockHeld(StoreError):
    """Another gatehouse process holds the store."""

    def __init__(self, lock_path: str, pid: int | None) -> None:
        holder = f"process {pid}" if pid else "another process"
        super().__init__(
            f"the store is already open in {holder} (lock {lock_path}); "
            "stop it first, or use a read command, which works alongside it"
        )
        self.pid = pid


class PragmaMismatch(StoreError):
    """The database's settings are not the ones gatehouse requires."""


class MigrationError(StoreError):
    """A schema migration failed; the database is unchanged by it."""


#: Errors that mean "fix the setup" (the data directory, another process, the database's
#: settings or schema): the bot and the CLI stop with exit code 2 and the message.
STARTUP_ERRORS = (DataDirError, LockHeld, PragmaMismatch, MigrationError)


class TimestampOutOfRange(StoreError, ValueError):
    """A timestamp lies outside 1970-01-01..9999-12-31 UTC or has no timezone."""


class Refused(StoreError):
    """That cannot be done as asked; nothing is broken."""


class NotFound(Refused):
    """No such row."""


class Conflict(Refused):
    """The write conflicts with the current state of the row."""


class IllegalTransition(Refused):
    """The state machine does not allow that transition."""


class Busy(StoreError):
    """The database stayed locked past busy_timeout."""


class StorageFull(StoreError):
    """The disk or the database's page limit is full; the transaction was rolled back."""


class StorageIOError(StoreError):
    """The disk failed to read or write the database; the transaction was rolled back."""


#: Failures of the disk under the store rather than of the work: operators must hear of
#: them even though the store cannot record an alert (see bot/ground/storage_alarm.py).
STORAGE_FAULTS = (StorageFull, StorageIOError)


class Closed(StoreError):
    """The store is closed."""


class RunAlone(StoreError):
    """A unit sharing its transaction with others (PostgreSQL's batches) must take a lock
    that other processes queue on: nothing of it was written, and the lanes run it again
    in a transaction of its own, so the lock is held for its few statements rather than
    until a whole batch commits. Never reaches the unit's caller."""


class ConnectionLost(StoreError):
    """The database could not be reached or dropped the connection."""


#: Faults of the store that pass by themselves (a busy or full database, a failing
#: disk, a lost connection, a store closing for a stop): the work waits where it is and
#: goes on once the store answers, and is never failed for them.
PASSING = (Busy, StorageFull, StorageIOError, ConnectionLost, Closed)


class Corrupt(StoreError):
    """The database file is damaged."""


class ConstraintViolation(StoreError):
    """A write broke a database constraint; nothing was written."""


def translate(exc: sqlite3.Error) -> StoreError:
    """Map a driver error to the most specific StoreError; keep the driver's text."""
    # The extended error code's low byte is the primary result code.
    code = (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF
    text = str(exc)
    if code == sqlite3.SQLITE_FULL:
        return StorageFull(f"{StorageFull.__doc__} ({text})")
    if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
        return Busy(f"{Busy.__doc__} ({text})")
    if code == sqlite3.SQLITE_IOERR:
        return StorageIOError(f"{StorageIOError.__doc__} ({text})")
    if code in (sqlite3.SQLITE_CORRUPT, sqlite3.SQLITE_NOTADB):
        return Corrupt(f"{Corrupt.__doc__} ({text})")
    if isinstance(exc, sqlite3.IntegrityError):
        return ConstraintViolation(f"{ConstraintViolation.__doc__} ({text})")
    return StoreError(f"database error: {text}")


#: PostgreSQL's error classes (SQLSTATE) as the store's; the first match wins.
_POSTGRES_STATES: tuple[tuple[str, type[StoreError]], ...] = (
    ("53100", StorageFull),  # disk_full
    ("58030", StorageIOError),  # io_error
    ("40", Busy),  # serialization_failure, deadlock_detected: the unit may run again
    ("55P03", Busy),  # lock_not_available
    ("57014", Busy),  # query_canceled (statement_timeout)
    ("08", ConnectionLost),  # connection_exception and its kinds
    ("57P", ConnectionLost),  # admin_shutdown (pg_terminate_backend), crash_shutdown, ...
    ("XX001", Corrupt),  # data_corrupted
    ("XX002", Corrupt),  # index_corrupted
    ("23", ConstraintViolation),  # integrity_constraint_violation and its kinds
)


def translate_postgres(exc: Exception) -> StoreError | None:
    """Map a psycopg error to the most specific StoreError (None: not a driver error).

    Reads only the SQLSTATE and the server's text, so psycopg need not be imported.
    """
    if not type(exc).__module__.startswith("psycopg"):
        return None
    state = getattr(exc, "sqlstate", None) or ""
    text = str(exc).strip()
    if not state and type(exc).__name__ == "OperationalError":
        # A connection that died under the query ("server closed the connection
        # unexpectedly", "consuming input failed") comes with no SQLSTATE.
        return ConnectionLost(f"{ConnectionLost.__doc__} ({text})")
    for prefix, kind in _POSTGRES_STATES:
        if state.startswith(prefix):
            error = kind(f"{kind.__doc__} ({text})")
            error.sqlstate = state
            return error
    return StoreError(f"database error: {text}")


class BudgetExceeded(StoreError):
    """Not enough budget is left for this call's worst case; nothing was held."""

    def __init__(self, message: str, scope: str, period: str) -> None:
        super().__init__(message)
        self.scope = scope
        self.period = period


class LeaseExpired(StoreError):
    """The claim's lease has expired; the provider call is not authorized."""
