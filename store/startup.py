"""What the writer does once at startup, before any new work: recover from a crash."""

from __future__ import annotations

import logging
from datetime import datetime

from store import backend, clock, runs, sql
from store.db import Store

log = logging.getLogger(__name__)

Q = sql.load("items")
SCHEDULES = sql.load("schedules")


async def recover(store: Store, now: datetime) -> None:
    """Close the books a crash left open, and ask for the runs that resume its work.

    Items a crash left in new or drafting are taken up by their pipeline's next tick; a
    run is requested for each such pipeline now, so that tick starts at the scheduler's
    first pass instead of waiting for the schedule (or for the SLA to call them stuck).
    """
    interrupted = await runs.close_interrupted(store, now)
    if interrupted:
        log.warning(
            "%d run(s) were interrupted by a crash and are now recorded as errors", interrupted
        )
    resumed = await store.write(_request_resume_runs, now)
    for pipeline, count in resumed.items():
        log.warning("pipeline %s: %d item(s) left undrafted will be resumed", pipeline, count)


def _request_resume_runs(conn: backend.Conn, now: datetime) -> dict[str, int]:
    left = dict(conn.execute(Q["undrafted_by_pipeline"]).fetchall())
    for pipeline in left:
        conn.execute(SCHEDULES["request_run"], {"pipeline": pipeline, "now": clock.to_ms(now)})
    return left
