"""The scheduler's memory per pipeline (paused, last start, next due, manual request)
and each source's saved state, so both survive a restart.

Pausing and resuming are operator actions: each writes an event with its actor.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime

from store import backend, clock, errors, sql
from store.audit import events
from store.backends import core
from store.backends.core import Store
from store.intake import runs

Q = sql.load("schedules")


@dataclass(frozen=True)
class PipelineState(backend.Record):
    pipeline: str
    paused: bool
    last_started_at: datetime | None
    next_due_at: datetime | None
    run_requested_at: datetime | None


def _ms(value: datetime | None) -> int | None:
    return None if value is None else clock.to_ms(value)


def all_sync(conn: backend.Conn) -> dict[str, PipelineState]:
    found = backend.fetch_all(conn, Q["all"], {}, PipelineState.from_row)
    return {state.pipeline: state for state in found}


async def all_states(store: Store) -> dict[str, PipelineState]:
    return await store.read(all_sync)


async def ensure(store: Store, pipeline: str, next_due_at: datetime | None) -> None:
    params = {"pipeline": pipeline, "next_due_at": _ms(next_due_at)}
    await store.write(lambda conn: conn.execute(Q["ensure"], params))


async def set_due(
    store: Store, pipeline: str, next_due_at: datetime | None, started_at: datetime | None = None
) -> None:
    """Record the next due time; with started_at, also the start (which clears a manual request)."""
    params = {"pipeline": pipeline, "next_due_at": _ms(next_due_at), "started_at": _ms(started_at)}
    await store.write(lambda conn: conn.execute(Q["set_due"], params))


def claim_run_sync(
    conn: backend.Conn,
    seen: PipelineState,
    next_due_at: datetime | None,
    trigger: runs.Trigger,
    now: datetime,
    *,
    hold: runs.Hold,
) -> int | None:
    """Start the run the scheduler found due in `seen`, held as `hold` says; its id, or None
    when the pipeline is running already or another worker started this run first."""
    pipeline = seen.pipeline
    if runs.running_sync(conn, pipeline):
        return None
    params = {
        "pipeline": pipeline,
        "next_due_at": _ms(next_due_at),
        "now": clock.to_ms(now),
        "seen_due": _ms(seen.next_due_at),
        "seen_requested": _ms(seen.run_requested_at),
    }
    if conn.execute(Q["claim"], params).rowcount != 1:
        return None
    return runs.start_run_sync(conn, pipeline, trigger, now, hold=hold)


claim_run = core.writes(claim_run_sync)


async def set_paused(store: Store, pipeline: str, paused: bool, actor: str, now: datetime) -> bool:
    """Pause or resume with an event; False if it already was."""

    def unit(conn: backend.Conn) -> bool:
        conn.execute(Q["ensure"], {"pipeline": pipeline, "next_due_at": None})
        changed = conn.execute(
            Q["set_paused"], {"pipeline": pipeline, "paused": int(paused)}
        ).fetchone()
        if changed:
            before, after = ("active", "paused") if paused else ("paused", "active")
            events.append(
                conn, "pipeline", pipeline, before, after, actor, now, reason=f"{after} by {actor}"
            )
        return changed is not None

    return await store.write(unit)


def request_run_sync(conn: backend.Conn, pipeline: str, now: datetime) -> None:
    conn.execute(Q["ensure"], {"pipeline": pipeline, "next_due_at": None})
    if (
        conn.execute(Q["request_run"], {"pipeline": pipeline, "now": clock.to_ms(now)}).rowcount
        != 1
    ):
        raise errors.NotFound(f"no pipeline {pipeline!r}")


async def request_run(store: Store, pipeline: str, now: datetime) -> None:
    await store.write(request_run_sync, pipeline, now)


async def source_state(store: Store, pipeline: str, scope: str) -> dict[str, str]:
    row = await store.read(
        lambda conn: conn.execute(
            Q["source_state"], {"pipeline": pipeline, "scope": scope}
        ).fetchone()
    )
    return dict(json.loads(row[0])) if row else {}


def save_source_state_sync(
    conn: backend.Conn, pipeline: str, scope: str, state: dict[str, str], now: datetime
) -> None:
    params = {
        "pipeline": pipeline,
        "scope": scope,
        "state": json.dumps(state),
        "now": clock.to_ms(now),
    }
    conn.execute(Q["save_source_state"], params)
