"""Telegram updates already acted on, so that none is acted on twice.

    if await updates.first_time(store, update.update_id, now): ...handle it...

Telegram hands an update out again until a later getUpdates confirms it. A leader
that dies between acting on an update and that confirmation leaves it to be read
again by the next leader, which must skip it; in webhook mode Telegram may deliver
one update to two workers. The id is recorded before the update is acted on: a crash
in between loses that one tap (the operator taps again) rather than acting twice.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from store import backend, clock, sql
from store.backends.core import Store

Q = sql.load("updates")

#: Telegram keeps an unconfirmed update for at most a day; ids are kept a while longer.
KEEP = timedelta(days=2)


def first_time_sync(conn: backend.Conn, update_id: int, now: datetime) -> bool:
    params = {"update_id": update_id, "now": clock.to_ms(now)}
    return conn.execute(Q["first_time"], params).fetchone() is not None


async def first_time(store: Store, update_id: int, now: datetime) -> bool:
    """Record the update as handled; False if it had been already."""
    return await store.write(lambda conn: first_time_sync(conn, update_id, now))


def prune_sync(conn: backend.Conn, now: datetime, batch: int) -> int:
    params = {"before": clock.to_ms(now - KEEP), "batch": batch}
    return int(conn.execute(Q["prune"], params).rowcount)
