"""Rows other workers queue: PostgreSQL's NOTIFY wakes this process's waiters.

    runtime.spawn("outbox-listener", lambda: listen.run(store, stop))   # PostgreSQL only

`outbox.enqueue_sync` sends `NOTIFY gatehouse_outbox, '<kind>'` inside the enqueuing
unit, so it arrives when that unit commits and never when it rolls back. A thread
holds one connection in LISTEN and hands each kind to `outbox.woken` on the event
loop: a worker sleeping in `outbox.wakeup` starts on the row at once instead of at
its next poll. A dropped connection ends the thread with an error; the supervisor
starts it again, and meanwhile the waiters' short poll (outbox.SHARED_POLL_S) still
finds every row.
"""

from __future__ import annotations

import asyncio
import threading

from store import errors, outbox
from store.db import Store

CHANNEL = "gatehouse_outbox"
#: How often the listening thread looks whether it should stop (seconds).
CHECK_STOP_S = 0.5


def _listen(url: str, loop: asyncio.AbstractEventLoop, store: Store, halt: threading.Event) -> None:
    import psycopg  # only the PostgreSQL store loads the driver

    try:
        with psycopg.connect(url, autocommit=True, prepare_threshold=None) as conn:
            conn.execute(f"LISTEN {CHANNEL}")
            while not halt.is_set():
                for note in conn.notifies(timeout=CHECK_STOP_S):
                    loop.call_soon_threadsafe(outbox.woken, store, note.payload)
    except psycopg.Error as exc:
        # The driver's text may name the server; the URL's password is not in it.
        raise errors.StoreError(f"listening for queued rows failed: {type(exc).__name__}") from None


async def run(store: Store, stop: asyncio.Event) -> None:
    """Wake this store's waiters on other workers' commits until `stop` is set."""
    url = store.config.database_url
    if store.dialect != "postgres" or url is None:
        await stop.wait()  # nobody else writes to this store
        return
    halt = threading.Event()
    loop = asyncio.get_running_loop()
    listening = asyncio.ensure_future(asyncio.to_thread(_listen, url, loop, store, halt))
    stopping = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait((listening, stopping), return_when=asyncio.FIRST_COMPLETED)
    finally:
        halt.set()
        stopping.cancel()
    await listening  # raises what ended the thread early, for the supervisor to report
