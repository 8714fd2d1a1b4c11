"""Wake-ups across processes that share one store: notify inside a unit, listen outside.

    def unit(conn):
        outbox.enqueue_sync(conn, ...)
        notify.send_sync(conn, "outbox")      # delivered at commit, never on rollback
    woken = store.listen("outbox")           # an asyncio.Event; clear it, then look

On PostgreSQL a unit's notification is `pg_notify`, which the server delivers when the
transaction commits, and `listen` keeps one connection per store LISTENing on a thread
of its own. SQLite has one process, whose own commits wake it (`db.on_commit`): there
`send_sync` sends nothing and `listen` hands back an event no other process can set.
"""

from __future__ import annotations

import asyncio
import logging
import re
import threading
from collections.abc import Callable

from store import backend, sql

log = logging.getLogger(__name__)
Q = sql.load("notify")

_CHANNEL = re.compile(r"^[a-z][a-z0-9_]{0,62}$")
#: How long the listening thread waits for a notification before it looks for new
#: channels to LISTEN on, or for the store closing (seconds).
POLL_S = 0.25
#: Pause before connecting again after the server dropped the listening connection.
RECONNECT_S = 1.0


def check_channel(channel: str) -> str:
    if not _CHANNEL.match(channel):
        raise ValueError(
            f"invalid channel {channel!r}: 1 to 63 lowercase letters, digits and _, "
            "starting with a letter"
        )
    return channel


def send_sync(conn: backend.Conn, channel: str) -> None:
    """Inside a unit: tell every process listening on `channel`, once the unit commits
    (on PostgreSQL once per transaction, however many units of it send)."""
    at_commit = getattr(conn, "notify_at_commit", None)
    if at_commit is not None and at_commit(check_channel(channel)):
        return
    conn.execute(Q["notify"], {"channel": check_channel(channel)})


class Listener:
    """One PostgreSQL connection LISTENing on a thread; `wake(channel)` runs on the loop.

    After the connection drops, every channel is woken once it is back: notifications
    sent meanwhile were lost, and a spurious wake-up only costs the listener a look.
    """

    def __init__(self, url: str, wake: Callable[[str], None]) -> None:
        self._url = url
        self._wake = wake
        self._loop = asyncio.get_running_loop()
        self._channels: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, name="store-listener", daemon=True)
        self._thread.start()

    def add(self, channel: str) -> None:
        with self._lock:
            self._channels.add(check_channel(channel))

    def _serve(self) -> None:
        import psycopg
        from psycopg import sql as pgsql

        conn: psycopg.Connection[tuple[object, ...]] | None = None
        listening: set[str] = set()
        while not self._stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn, reconnected = psycopg.connect(self._url, autocommit=True), bool(listening)
                    listening = set()
                    if reconnected:
                        self._deliver(*self._wanted())
                for channel in self._wanted() - listening:
                    conn.execute(pgsql.SQL("LISTEN {}").format(pgsql.Identifier(channel)))
                    listening.add(channel)
                for note in conn.notifies(timeout=POLL_S):
                    self._deliver(note.channel)
            except psycopg.Error as exc:
                log.warning("the store's listener lost its connection (%s); connecting again", exc)
                self._stop.wait(RECONNECT_S)
        if conn is not None:
            conn.close()

    def _wanted(self) -> set[str]:
        with self._lock:
            return set(self._channels)

    def _deliver(self, *channels: str) -> None:
        for channel in channels:
            try:
                self._loop.call_soon_threadsafe(self._wake, channel)
            except RuntimeError:  # the event loop is closed: nobody is left to wake
                return

    async def close(self) -> None:
        self._stop.set()
        await asyncio.to_thread(self._thread.join)
