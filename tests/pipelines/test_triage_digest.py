"""The daily list of skipped entries, against a real SQLite store: once a day per
pipeline with a triage, yesterday's skipped entries with their reasons, queued once."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

from pipelines.config import spec
from pipelines.service import triage_digest
from store import backend, db, items
from store.items.machine import State

PIPELINE = """
name: {name}
schedule: manual
sources:
  - type: rss
    url: http://127.0.0.1:9/feed.xml
{triage}
dispatch:
  type: none
"""
TRIAGE = 'triage:\n  question: "About trams?"'


def _skip(conn: backend.Conn, pipeline: str, title: str, at: datetime) -> None:
    item = items.create_sync(conn, pipeline, "s", title, {"title": title}, at)
    assert item is not None
    items.transition_sync(conn, item.id, State.DRAFTING, "system", at)
    items.transition_sync(conn, item.id, State.SKIPPED, "system", at, reason="triage 0.10: no")


async def _alerts(store: db.Store) -> list[str]:
    rows = await store.read(
        lambda conn: conn.execute("SELECT payload FROM outbox WHERE kind = 'alert'").fetchall()
    )
    return [str(row[0]) for row in rows]


async def test_yesterdays_skipped_entries_are_listed_once(
    store: db.Store, tmp_path: Path, now: datetime
) -> None:
    (tmp_path / "city.yaml").write_text(PIPELINE.format(name="city", triage=TRIAGE))
    (tmp_path / "plain.yaml").write_text(PIPELINE.format(name="plain", triage=""))
    pipelines = spec.load_dir(tmp_path).pipelines
    midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
    await store.write(_skip, "city", "Weather today", midnight - timedelta(hours=3))
    await store.write(_skip, "city", "Football", midnight - timedelta(hours=30))  # the day before
    await store.write(_skip, "city", "Later", midnight + timedelta(minutes=5))  # today
    await store.write(_skip, "plain", "Not triaged here", midnight - timedelta(hours=3))

    assert await triage_digest.post(store, pipelines, now) == 1
    [said] = await _alerts(store)
    assert "city: triage skipped 1 on" in said and "Weather today: triage 0.10: no" in said
    assert "Football" not in said and "Later" not in said and "/skipped city" in said
    # Another pass the same day (or another process) queues nothing more.
    assert await triage_digest.post(store, pipelines, now + timedelta(hours=1)) == 0
    assert len(await _alerts(store)) == 1
