"""Workers' heartbeats: which gatehouse processes share this store, and which are alive.

    await heartbeats.beat(store, me, now, run_lease)       # every few seconds
    found = await heartbeats.recent(store, now)            # for /status and `status`
    await heartbeats.stopped(store, me.id, now)            # at a clean stop

A beat also renews the lease of each run its worker is running, so a run stays its
worker's while the worker lives and runs it, and lapses (runs.close_lapsed) once the
worker dies, or once a run that crashed could not even be closed.
"""

from __future__ import annotations

import os
import secrets
import socket
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime, timedelta

from store import backend, clock, sql
from store.backends.core import Store

Q = sql.load("heartbeats")

#: Workers not heard from for this long are no longer listed, then forgotten.
FORGET_AFTER = timedelta(days=1)


@dataclass(frozen=True)
class Me:
    """This process as a worker: an id unique across hosts and restarts."""

    id: str
    host: str
    pid: int

    @classmethod
    def here(cls) -> Me:
        host, pid = socket.gethostname()[:64], os.getpid()
        return cls(f"{host}:{pid}:{secrets.token_hex(3)}", host, pid)


@dataclass(frozen=True)
class Worker(backend.Record):
    id: str
    host: str
    pid: int
    started_at: datetime
    heartbeat_at: datetime
    stopped_at: datetime | None

    def alive(self, now: datetime, ttl: timedelta) -> bool:
        return self.stopped_at is None and now - self.heartbeat_at <= ttl


def beat_sync(
    conn: backend.Conn, me: Me, now: datetime, run_lease: timedelta, run_ids: Iterable[int]
) -> None:
    at = clock.to_ms(now)
    conn.execute(Q["beat"], {"id": me.id, "host": me.host, "pid": me.pid, "now": at})
    until = clock.to_ms(now + run_lease)
    for run_id in run_ids:
        conn.execute(Q["renew_run"], {"id": me.id, "run": run_id, "until": until})


async def beat(
    store: Store, me: Me, now: datetime, run_lease: timedelta, run_ids: Iterable[int] = ()
) -> None:
    """Say `me` is alive, and keep the runs it is running (`run_ids`) its own."""
    ids = list(run_ids)
    await store.write_now(lambda conn: beat_sync(conn, me, now, run_lease, ids))


async def stopped(store: Store, worker_id: str, now: datetime) -> None:
    await store.write(mark_stopped_sync, worker_id, now)


def recent_sync(conn: backend.Conn, now: datetime) -> list[Worker]:
    params = {"since": clock.to_ms(now - FORGET_AFTER)}
    return backend.fetch_all(conn, Q["all"], params, Worker.from_row)


async def recent(store: Store, now: datetime) -> list[Worker]:
    """Workers heard from in the last FORGET_AFTER, the most recently started first."""
    return await store.read(lambda conn: recent_sync(conn, now))


def gone_here(worker: Worker, here: Me) -> bool:
    """Whether `worker` ran on this host in a process that no longer runs: a start after
    a kill knows then, without waiting for its leases to lapse. Its pid being this
    process's own means an earlier process of that pid (a container's pid 1, say)."""
    if worker.host != here.host or worker.stopped_at is not None:
        return False
    if worker.pid == here.pid:
        return True
    try:
        os.kill(worker.pid, 0)  # signal 0: only asks whether the process exists
    except ProcessLookupError:
        return True
    except PermissionError:  # alive, another user's
        return False
    return False


def mark_stopped_sync(conn: backend.Conn, worker_id: str, now: datetime) -> None:
    conn.execute(Q["stopped"], {"id": worker_id, "now": clock.to_ms(now)})


def prune_sync(conn: backend.Conn, now: datetime) -> int:
    return int(conn.execute(Q["prune"], {"before": clock.to_ms(now - FORGET_AFTER)}).rowcount)
