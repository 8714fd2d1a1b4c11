"""Try a pipeline before it goes live: the real engine, run against a throwaway store.

    report = await dryrun.run(pipeline, client, now)
    for item_id, payload in report.cards[:5]:
        print(render.card(item_id, payload))

The engine fetches, dedups, records and drafts exactly as a scheduled run would, but
into a temporary store that is deleted afterwards: the pipeline's own store marks
nothing seen and records no run, and no card, mail or webhook leaves the machine (no
bot and no dispatcher run). Drafts come from the template drafter; an LLM pipeline is
drafted with its template fallback, so a dry run never spends money. The duplicate
gate sees no earlier approvals, so no card is marked as a possible duplicate.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx

from pipelines import config
from pipelines.drafting import base as drafters
from pipelines.engine import Engine
from store import db, outbox

LLM_NOTE = "dry run: drafted with the template; the LLM is not called"


@dataclass(frozen=True)
class Report:
    pipeline: str
    fetched: int
    errors: list[str]
    #: (item id in the throwaway store, the card's payload), in the order drafted.
    cards: list[tuple[int, dict[str, Any]]]


def _drafter(pipeline: config.Pipeline) -> drafters.Drafter:
    note = LLM_NOTE if pipeline.draft.drafter == "llm" else None
    return drafters.TemplateDrafter(pipeline, note=note)


async def run(pipeline: config.Pipeline, client: httpx.AsyncClient, now: datetime) -> Report:
    with tempfile.TemporaryDirectory(prefix="gatehouse-dry-run-") as scratch:
        # NORMAL: nothing here must survive a power cut, so skip the fsyncs.
        cfg = db.StoreConfig(data_dir=Path(scratch) / "data", synchronous="NORMAL")
        store = await db.Store.open(cfg)
        try:
            engine = Engine(store, {pipeline.name: pipeline}, client=client, drafter_for=_drafter)
            tick = await engine.tick(pipeline.name, "manual", now)
            cards = [
                (row.item_id, row.payload)
                for item_id in tick.created
                for row in await outbox.for_item(store, item_id, "card")
                if row.item_id is not None
            ]
        finally:
            await store.close()
    return Report(pipeline.name, tick.counts.fetched, tick.errors, cards)
