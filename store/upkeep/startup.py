"""What the writer does once at startup, before any new work: recover from a crash."""

from __future__ import annotations

import logging
from datetime import datetime

from store import backend, clock, outbox, sql
from store.backends.core import Store
from store.cluster import heartbeats
from store.intake import runs

log = logging.getLogger(__name__)

Q = sql.load("items")
SCHEDULES = sql.load("schedules")


async def recover(store: Store, now: datetime, *, exclusive: bool = True) -> None:
    """Close the books a crash left open, and ask for the runs that resume its work.

    Items a crash left in new or drafting are taken up by their pipeline's next tick; a
    run is requested for each such pipeline now, so that tick starts at the scheduler's
    first pass instead of waiting for the schedule (or for the SLA to call them stuck).
    On a store only this process opens (`exclusive`), every open run is closed and every
    dispatch claim freed: their holders died. On a store other workers share, the runs
    of workers known dead (an earlier process on this host that is gone) and those whose
    worker stopped renewing them are closed; claims lapse with their leases.
    """
    if exclusive:
        interrupted = await runs.close_interrupted(store, now)
        await store.write(outbox.release_claims_sync)
    else:
        interrupted = len(await store.write(_close_dead_runs, now))
    if interrupted:
        log.warning(
            "%d run(s) were interrupted by a crash and are now recorded as errors", interrupted
        )
    resumed = await store.write(_request_resume_runs, now)
    for pipeline, count in resumed.items():
        log.warning("pipeline %s: %d item(s) left undrafted will be resumed", pipeline, count)


def _close_dead_runs(conn: backend.Conn, now: datetime) -> list[str]:
    here = heartbeats.Me.here()
    closed = runs.close_lapsed_sync(conn, now)
    for worker in heartbeats.recent_sync(conn, now):
        if heartbeats.gone_here(worker, here):
            closed += runs.close_of_worker_sync(conn, worker.id, now)
            heartbeats.mark_stopped_sync(conn, worker.id, now)
    return closed


async def recover_lapsed(store: Store, now: datetime) -> list[str]:
    """The leader's sweep: runs whose worker died end as errors, and their pipelines
    are asked to run again so the items those runs held are drafted; workers not heard
    from for a day are forgotten. Returns the pipelines whose runs were closed."""

    def unit(conn: backend.Conn) -> list[str]:
        closed = runs.close_lapsed_sync(conn, now)
        if closed:
            _request_resume_runs(conn, now, closed)
        heartbeats.prune_sync(conn, now)
        return closed

    closed = await store.write(unit)
    for pipeline in closed:
        log.warning("pipeline %s: a run was left by a worker that stopped; resuming", pipeline)
    return closed


def _request_resume_runs(
    conn: backend.Conn, now: datetime, only: list[str] | None = None
) -> dict[str, int]:
    left = dict(conn.execute(Q["undrafted_by_pipeline"]).fetchall())
    if only is not None:
        left = {pipeline: count for pipeline, count in left.items() if pipeline in only}
    for pipeline in left:
        conn.execute(SCHEDULES["request_run"], {"pipeline": pipeline, "now": clock.to_ms(now)})
    return left
