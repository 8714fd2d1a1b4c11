"""One tick of a pipeline: fetch, dedup, record, draft, and queue each draft for approval.

    engine = Engine(store, pipelines, client=httpx.AsyncClient(), drafter_for=...)
    report = await engine.tick("news", "schedule", now)

A source that fails fails alone: its reason goes into the run record and the other
sources still deliver. Each item's path is new -> drafting -> awaiting_approval, with
its approval card queued in the outbox in the same transaction as the last step.
"""

from __future__ import annotations

import asyncio
import logging
import sqlite3
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

import httpx

from pipelines import approval, config, drafters, similarity, sources
from pipelines.sources import base
from store import clock, drafts, errors, items, outbox, runs, schedules, seen, sql
from store.db import Store
from store.items import Item
from store.machine import State

log = logging.getLogger(__name__)

#: Items drafted at once; their transactions share commits (group commit).
CONCURRENCY = 32
#: Earlier approved drafts the duplicate gate compares against, at most.
DUPLICATE_LOOKBACK = 500

DrafterFactory = Callable[[config.Pipeline], drafters.Drafter]


@dataclass
class TickReport:
    run_id: int
    pipeline: str
    counts: runs.Counts = field(default_factory=runs.Counts)
    errors: list[str] = field(default_factory=list)
    created: list[int] = field(default_factory=list)

    @property
    def status(self) -> str:
        return "error" if self.errors else "ok"


class Engine:
    def __init__(
        self,
        store: Store,
        pipelines: dict[str, config.Pipeline],
        *,
        client: httpx.AsyncClient,
        drafter_for: DrafterFactory | None = None,
    ) -> None:
        self.store = store
        self.pipelines = pipelines
        self.client = client
        self._drafter_for = drafter_for or drafters.TemplateDrafter

    async def tick(self, name: str, trigger: runs.Trigger, now: datetime) -> TickReport:
        """Run one pipeline once and record the run with its counts and errors."""
        pipeline = self.pipelines[name]
        report = TickReport(await runs.start_run(self.store, name, trigger, now), name)
        fetched = 0
        new_items: list[Item] = []
        for source in pipeline.sources:
            batch, error = await self._fetch(pipeline, source, now)
            if error:
                report.errors.append(error)
                continue
            fetched += len(batch)
            new_items += await self._record(pipeline, source.scope, batch, report, now)
        waiting = await items.in_state(self.store, State.NEW, name, limit=10_000)
        drafted, failed = await self._draft_all(pipeline, waiting, now)
        report.created = [item.id for item in new_items]
        report.counts = runs.Counts(
            fetched=fetched, new=len(new_items), drafted=drafted, failed=failed
        )
        await self._finish(report, now)
        return report

    async def _fetch(
        self, pipeline: config.Pipeline, source: sources.SourceConfig, now: datetime
    ) -> tuple[list[base.FetchedItem], str | None]:
        state = await schedules.source_state(self.store, pipeline.name, source.scope)
        try:
            result = await sources.fetch(source, state, self.client)
        except base.SourceError as exc:
            log.warning("pipeline %s: source %s failed: %s", pipeline.name, source.scope, exc)
            return [], f"source {source.scope}: {exc}"
        if result.state != state:
            await self.store.write(
                lambda conn: schedules.save_source_state_sync(
                    conn, pipeline.name, source.scope, result.state, now
                )
            )
        return result.items, None

    async def _record(
        self,
        pipeline: config.Pipeline,
        scope: str,
        batch: list[base.FetchedItem],
        report: TickReport,
        now: datetime,
    ) -> list[Item]:
        """Dedup the batch, then create an item row for each id not seen before."""
        fresh = await self._dedup(pipeline, scope, batch, report, now)
        if not fresh:
            return []

        def unit(conn: sqlite3.Connection) -> list[Item]:
            created = []
            for fetched in fresh:
                item = items.create_sync(
                    conn, pipeline.name, scope, fetched.source_id, _payload(fetched), now
                )
                if item is not None:
                    created.append(item)
            if pipeline.dedup.mark_at == "success":
                seen.mark_seen_sync(conn, pipeline.name, scope, [f.source_id for f in fresh], now)
            return created

        return await self.store.write(unit)

    async def _dedup(
        self,
        pipeline: config.Pipeline,
        scope: str,
        batch: list[base.FetchedItem],
        report: TickReport,
        now: datetime,
    ) -> list[base.FetchedItem]:
        ids = [item.source_id for item in batch]
        try:
            if pipeline.dedup.mark_at == "fetch":
                # Marked the moment fetch returns (seed 000): a duplicate card costs
                # more than a dropped item, and a dropped item can be replayed.
                keep = set(await seen.mark_seen(self.store, pipeline.name, scope, ids, now))
            else:
                keep = set(await seen.filter_unseen(self.store, pipeline.name, scope, ids))
        except errors.StoreError as exc:
            if pipeline.dedup.fail_closed:
                report.errors.append(
                    f"source {scope}: dedup unavailable ({exc}); batch skipped (fail_closed)"
                )
                return []
            # Degrade open: items already recorded are still unique in `items`.
            log.warning(
                "pipeline %s: dedup unavailable, processing the whole batch: %s", pipeline.name, exc
            )
            report.errors.append(
                f"source {scope}: dedup unavailable ({exc}); processed the batch unfiltered"
            )
            return batch
        first: dict[str, base.FetchedItem] = {}
        for item in batch:
            if item.source_id in keep:
                first.setdefault(item.source_id, item)
        return list(first.values())

    async def _draft_all(
        self, pipeline: config.Pipeline, waiting: list[Item], now: datetime
    ) -> tuple[int, int]:
        drafting = await self.store.write(lambda conn: _start_drafting(conn, waiting, now))
        earlier = await self._approved_recently(pipeline, now)
        drafter = self._drafter_for(pipeline)
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(item: Item) -> bool:
            async with gate:
                return await self._draft_one(pipeline, drafter, item, earlier, now)

        outcomes = await asyncio.gather(*(one(item) for item in drafting))
        return sum(outcomes), len(outcomes) - sum(outcomes)

    async def _draft_one(
        self,
        pipeline: config.Pipeline,
        drafter: drafters.Drafter,
        item: Item,
        earlier: list[similarity.Earlier],
        now: datetime,
    ) -> bool:
        """Draft one item already in drafting; True when it reached approval."""
        try:
            result = await drafter.draft(item, now)
        except drafters.DraftFailed as exc:
            await self._fail(item, exc, now)
            return False
        duplicate = (
            similarity.find_duplicate(result.text, _sources(item), earlier) if earlier else None
        )
        await self.store.write(
            lambda conn: _to_approval(conn, pipeline, item, result, duplicate, now)
        )
        return True

    async def _fail(self, item: Item, exc: drafters.DraftFailed, now: datetime) -> None:
        reason = f"{exc.reason}: {exc}"

        def unit(conn: sqlite3.Connection) -> None:
            items.transition_sync(
                conn,
                item.id,
                State.FAILED,
                "system",
                now,
                reason=reason,
                expect_attempt=item.attempt,
            )
            text = f"❌ item {item.id} ({item.pipeline}) failed while drafting: {reason}"
            if exc.raw is not None:
                text += f"\nraw output: {exc.raw[:1000]}"
            payload = {"text": text, "level": "error", "item_id": item.id}
            key = f"draft-failed:{item.id}:{item.attempt}"
            outbox.enqueue_sync(
                conn, "alert", outbox.ALERTS, payload, now, item_id=item.id, dedupe_key=key
            )

        await self.store.write(unit)

    async def _approved_recently(
        self, pipeline: config.Pipeline, now: datetime
    ) -> list[similarity.Earlier]:
        since = clock.to_ms(now - timedelta(days=pipeline.dedup.duplicate_window_days))
        params = {
            "pipeline": pipeline.name,
            "since": since,
            "exclude": -1,
            "limit": DUPLICATE_LOOKBACK,
        }
        query = sql.load("items")["approved_since"]
        rows = await self.store.read(lambda conn: conn.execute(query, params).fetchall())
        return [similarity.Earlier(row[0], row[2], frozenset({row[1]})) for row in rows]

    async def _finish(self, report: TickReport, now: datetime) -> None:
        status: Literal["ok", "error"] = "error" if report.errors else "ok"
        error_text = "; ".join(report.errors) or None

        def unit(conn: sqlite3.Connection) -> None:
            runs.finish_run_sync(conn, report.run_id, status, report.counts, error_text, now)
            if error_text:
                payload = {
                    "text": f"⚠️ run {report.run_id} of {report.pipeline} failed: {error_text}",
                    "level": "error",
                }
                outbox.enqueue_sync(
                    conn,
                    "alert",
                    outbox.ALERTS,
                    payload,
                    now,
                    dedupe_key=f"run-failed:{report.run_id}",
                )

        await self.store.write(unit)


def _payload(fetched: base.FetchedItem) -> dict[str, object]:
    return {
        "title": fetched.title,
        "text": fetched.text,
        "link": fetched.link,
        "published": fetched.published.isoformat() if fetched.published else None,
        "extra": fetched.extra,
    }


def _sources(item: Item) -> frozenset[str]:
    return frozenset({item.source_id})


def _start_drafting(conn: sqlite3.Connection, waiting: list[Item], now: datetime) -> list[Item]:
    """Move every waiting item to drafting in one transaction; skip those that must wait."""
    moved = []
    for item in waiting:
        try:
            moved.append(
                items.transition_sync(
                    conn, item.id, State.DRAFTING, "system", now, expect_attempt=item.attempt
                )
            )
        except (items.Throttled, errors.Conflict, errors.IllegalTransition) as exc:
            # Checked before anything is written, so skipping leaves the unit clean.
            log.info("item %s not drafted now: %s", item.id, exc)
    return moved


def _to_approval(
    conn: sqlite3.Connection,
    pipeline: config.Pipeline,
    item: Item,
    result: drafters.DraftResult,
    duplicate: similarity.Earlier | None,
    now: datetime,
) -> None:
    """Store the draft, move to awaiting_approval and queue the card: one transaction."""
    draft = drafts.add_sync(
        conn, item.id, result.text, result.provenance, now, cost_micros=result.cost_micros
    )
    moved = items.transition_sync(
        conn,
        item.id,
        State.AWAITING_APPROVAL,
        "system",
        now,
        deadline=pipeline.approval.window,
        expect_attempt=item.attempt,
    )
    approval.queue_card(conn, pipeline, moved, draft, now, note=result.note, duplicate=duplicate)
