"""Skipped entries are not silent: once a day, for each pipeline with a `triage:`, one
message to the operators lists the entries its triage skipped the day before (UTC), each
title with the model's score and reason. The alert's key makes it one message per
pipeline and day, whichever process posts it and however often it restarts.
`/skipped <pipeline>` is the same list on demand, with a button per entry.

    RuntimeConfig(duties=(..., triage_digest.worker))      # the leader posts it
    await triage_digest.post(store, pipelines, now)        # what each pass does
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from datetime import datetime, time, timedelta

from pipelines.config import spec
from pipelines.ground import waiting
from pipelines.service import seams
from store import outbox, payloads, units
from store.db import Store
from store.intake import dropped
from store.items import Item
from store.items.machine import State

#: How often the leader looks whether a new day's list is due.
CHECK_EVERY_S = 60.0
#: Entries listed at most in one message; /skipped and gatehouse skipped list more.
LISTED = 20
#: Skipped entries read at most per pipeline and pass (the newest first).
READ_AT_MOST = 1_000


def text(name: str, day: datetime, found: list[Item]) -> str:
    """The day's list as the operators read it (plain text: the alert sender escapes it)."""
    lines = [f"🔎 {name}: triage skipped {len(found)} on {units.day(day)}"]
    for item in found[:LISTED]:
        title = str(item.payload.get("title") or item.source_id)[:80]
        lines.append(f"• #{item.id} {title}: {item.reason or 'no reason recorded'}")
    if len(found) > LISTED:
        lines.append(f"… and {len(found) - LISTED} more (gatehouse skipped {name})")
    lines.append(f"/skipped {name} brings one to a card")
    return "\n".join(lines)


async def post(store: Store, pipelines: Mapping[str, spec.Pipeline], now: datetime) -> int:
    """Queue yesterday's list for each pipeline with a triage that skipped something;
    returns how many lists were queued now (a list already queued is not queued again)."""
    today = datetime.combine(now.date(), time(), tzinfo=now.tzinfo)
    yesterday = today - timedelta(days=1)
    queued = 0
    for name in sorted(n for n, p in pipelines.items() if p.triage is not None):
        recent = await dropped.recent(store, name, State.SKIPPED, READ_AT_MOST)
        found = [i for i in recent if yesterday <= i.last_transition_at < today]
        if not found:
            continue
        key = f"skipped-digest:{name}:{yesterday:%Y-%m-%d}"
        said = payloads.Alert(text=text(name, yesterday, found), level="info")
        if await store.write(outbox.alert_sync, said, now, key=key) is not None:
            queued += 1
    return queued


async def worker(runtime: seams.Piped, stop: asyncio.Event) -> None:
    """A leader duty: post each day's lists once the day is over."""
    while not stop.is_set():
        await post(runtime.store, runtime.pipelines, runtime.now())
        await waiting.wait_any((stop,), CHECK_EVERY_S)
