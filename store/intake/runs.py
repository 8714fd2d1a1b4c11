"""The run log: one row per pipeline execution.

run_id = await runs.start_run(store, "news", "schedule", now)
await runs.finish_run(store, run_id, "ok", runs.Counts(fetched=3, new=1), None, now)
window = await runs.investigation_window(store, "news")
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, Literal, Self

from store import backend, clock, errors, sql
from store.backends import core
from store.backends.core import Store

Q = sql.load("runs")

Trigger = Literal["schedule", "manual", "replay"]
Status = Literal["running", "ok", "error"]
TRIGGERS: tuple[Trigger, ...] = ("schedule", "manual", "replay")


@dataclass(frozen=True)
class Counts(backend.Record):
    fetched: int = 0
    new: int = 0
    drafted: int = 0
    failed: int = 0
    #: New entries the pipeline's filter dropped (counted in `new` too).
    filtered: int = 0
    #: Entries the pipeline's triage scored below its threshold (counted in `new` too).
    skipped: int = 0


@dataclass(frozen=True)
class Run(backend.Record):
    id: int
    pipeline: str
    trigger: Trigger
    started_at: datetime
    ended_at: datetime | None
    status: Status
    counts: Counts
    error_text: str | None

    @classmethod
    def from_row(cls, row: backend.Row, /, **given: Any) -> Self:
        return super().from_row(row, counts=Counts.from_row(row), **given)


@dataclass(frozen=True)
class Window:
    """The last green run and the first red one after it: where to start looking."""

    last_ok: Run | None
    first_error_after: Run | None


#: Who holds a run started without a worker (a script, a test): until the next start.
NOBODY = "local"
#: A run's lease when no worker renews it; long enough for any tick to finish.
DEFAULT_LEASE = timedelta(hours=1)


@dataclass(frozen=True)
class Hold:
    """Who holds a run, and for how long unless the holder's heartbeat renews it."""

    worker: str = NOBODY
    lease: timedelta = DEFAULT_LEASE


#: A run started without a worker.
LOCAL = Hold()


def start_run_sync(
    conn: backend.Conn,
    pipeline: str,
    trigger: Trigger,
    now: datetime,
    *,
    hold: Hold = LOCAL,
) -> int:
    """Open a run held as `hold` says; Conflict if the pipeline is running."""
    if trigger not in TRIGGERS:
        raise ValueError(f"unknown run trigger {trigger!r}; valid: {', '.join(TRIGGERS)}")
    params = {
        "pipeline": pipeline,
        "trigger": trigger,
        "now": clock.to_ms(now),
        "worker": hold.worker,
        "until": clock.to_ms(now + hold.lease),
    }
    row = conn.execute(Q["start_run"], params).fetchone()
    if row is None:
        raise errors.Conflict(f"pipeline {pipeline!r} is running already")
    return int(row[0])


def running_sync(conn: backend.Conn, pipeline: str) -> bool:
    return conn.execute(Q["running"], {"pipeline": pipeline}).fetchone() is not None


def finish_run_sync(
    conn: backend.Conn,
    run_id: int,
    status: Literal["ok", "error"],
    counts: Counts,
    error_text: str | None,
    now: datetime,
) -> None:
    params = {
        "id": run_id,
        "status": status,
        "now": clock.to_ms(now),
        **dataclasses.asdict(counts),
        "error_text": error_text,
    }
    if conn.execute(Q["finish_run"], params).rowcount != 1:
        raise errors.Conflict(f"run {run_id} is not running (already finished, or unknown)")


start_run = core.writes(start_run_sync)
finish_run = core.writes(finish_run_sync)


async def close_interrupted(store: Store, now: datetime) -> int:
    """At startup: runs a crash left 'running' become errors with the reason 'interrupted'."""
    at = clock.to_ms(now)
    return await store.write(
        lambda conn: conn.execute(Q["close_interrupted"], {"now": at}).rowcount
    )


def close_lapsed_sync(conn: backend.Conn, now: datetime) -> list[str]:
    """Runs whose worker died (their lease lapsed) become errors; their pipelines."""
    rows = conn.execute(Q["close_lapsed"], {"now": clock.to_ms(now)}).fetchall()
    return sorted({str(row[0]) for row in rows})


def close_of_worker_sync(conn: backend.Conn, worker: str, now: datetime) -> list[str]:
    """Runs of a worker known dead end as errors now; their pipelines."""
    params = {"worker": worker, "now": clock.to_ms(now)}
    return sorted({str(row[0]) for row in conn.execute(Q["close_of_worker"], params)})


def get_sync(conn: backend.Conn, run_id: int) -> Run:
    found = backend.fetch_one(conn, Q["get"], {"id": run_id}, Run.from_row)
    if found is None:
        raise errors.NotFound(f"no run {run_id}")
    return found


async def recent_runs(store: Store, pipeline: str, n: int = 10) -> list[Run]:
    """A pipeline's last n runs, newest first."""
    params = {"pipeline": pipeline, "n": n}
    return await store.read(backend.fetch_all, Q["recent"], params, Run.from_row)


async def investigation_window(store: Store, pipeline: str) -> Window:
    """The last ok run and the first error after it (or the first error ever)."""

    def query(conn: backend.Conn) -> Window:
        last_ok = backend.fetch_one(conn, Q["last_ok"], {"pipeline": pipeline}, Run.from_row)
        after = (clock.to_ms(last_ok.started_at), last_ok.id) if last_ok else (-1, -1)
        params = {"pipeline": pipeline, "after": after[0], "after_id": after[1]}
        first_error = backend.fetch_one(conn, Q["first_error_after"], params, Run.from_row)
        return Window(last_ok, first_error)

    return await store.read(query)
