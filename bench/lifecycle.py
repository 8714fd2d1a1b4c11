"""N items through their whole life: fetch, template draft, approval, dispatch, pruning.

    python -m bench lifecycle [--items N]        (default 100,000)

Every step goes through the project's own functions, with the stages running side by
side as in the bot: a fetcher records items as a tick does (dedup marks and item rows in
one transaction, the move to drafting in another, intake.RECORD_CHUNK items each) and
drafts them with the template drafter (draft, awaiting_approval and card in one
transaction); an approver approves the pending items (`flow.decide`: vote, approved,
card edit and dispatch row); a sender marks cards and card edits sent as the Telegram
sender does after sending; the dispatcher (`dispatcher.run_once`, back to back)
dispatches to a `none` target.
A probe writes a tiny unit every 10 ms meanwhile, in the foreground as a tap's writes
are: its wait is what a tap would feel. At the end retention prunes as it would after
its age, and the bytes the database holds per item are counted (pages in use, not the
free ones SQLite reuses), with the share of each table and index.

Prints items_per_s (end to end), approved_per_s (fetch to approval, without the
dispatcher, which sends one row at a time), peak_wal_mb (the largest the WAL file
got), max_writer_stall_ms (the longest a checkpoint held the writer),
max_probe_write_ms, p99_probe_write_ms and bytes_per_item; the last line is one JSON
object.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

from bench import common
from pipelines.approval import flow, rule
from pipelines.config import spec
from pipelines.drafting import drafters
from pipelines.runs import intake
from pipelines.service import dispatcher, seal_loop
from store import backend, db, drafts, items, outbox
from store.audit import events
from store.intake import seen
from store.items.machine import State
from store.review.followups import Shown
from store.upkeep import retention

#: Items recorded per fetch transaction, and moved to drafting per transaction: a tick's.
CHUNK = intake.RECORD_CHUNK
#: Drafts and approvals in flight at once.
CONCURRENCY = 32
OPERATOR = 1001
SUMMARY = (
    "The council voted on Tuesday to extend the bike lane network along Main Street, "
    "adding protected lanes between the station and the river. Work starts in spring "
    "and is expected to take four months; residents can comment on the plans until the "
    "end of the month at the town hall or online."
)


def pipeline_config(tmp: Path) -> spec.Pipeline:
    folder = tmp / "pipelines"
    folder.mkdir()
    # No undo window: an approval's dispatch row is due at once. The window (10 s by
    # default) is a pause for the operator, not work; with it, the run's last items
    # would wait it out and the figure would count that wait.
    (folder / "bench.yaml").write_text(
        "name: bench\nschedule: manual\nsources:\n  - type: rss\n"
        "    url: http://127.0.0.1:9/feed.xml\n    scope: feed\n"
        "approval:\n  undo_window: 0s\ndispatch:\n  type: none\n"
    )
    return spec.load_dir(folder).pipelines["bench"]


def payload(n: int) -> dict[str, Any]:
    return {
        "title": f"Council extends the bike lanes on Main Street, part {n}",
        "text": SUMMARY,
        "link": f"https://news.example.org/2026/11/30/bike-lanes-main-street-{n}",
        "published": "2026-11-30T08:00:00+00:00",
        "extra": {},
    }


class Lifecycle:
    def __init__(self, store: db.Store, pipeline: spec.Pipeline, total: int) -> None:
        self.store = store
        self.pipeline = pipeline
        self.total = total
        self.drafter = drafters.TemplateDrafter(pipeline)
        self.fetched_all = asyncio.Event()
        self.dispatched = 0
        self.approved = 0
        self.all_approved_at = 0.0
        self.peak_wal = 0
        self.probe_ms: list[float] = []

    def now(self) -> datetime:
        return datetime.now(UTC)

    async def fetcher(self) -> None:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def draft(item: items.Item) -> None:
            async with gate:
                await self.draft_one(item)

        for start in range(0, self.total, CHUNK):
            ids = [f"guid-{n}" for n in range(start, min(start + CHUNK, self.total))]
            created = await self.store.write(functools.partial(self.record, ids=ids))
            drafting = await self.store.write(functools.partial(self.start, waiting=created))
            await asyncio.gather(*(draft(item) for item in drafting))
        self.fetched_all.set()

    def record(self, conn: backend.Conn, *, ids: list[str]) -> list[items.Item]:
        now = self.now()
        fresh = seen.mark_seen_sync(conn, "bench", "feed", ids, now)
        created = []
        for source_id in fresh:
            number = int(source_id.removeprefix("guid-"))
            item = items.create_sync(conn, "bench", "feed", source_id, payload(number), now)
            assert item is not None
            created.append(item)
        return created

    def start(self, conn: backend.Conn, *, waiting: list[items.Item]) -> list[items.Item]:
        now = self.now()
        return [items.transition_sync(conn, i.id, State.DRAFTING, "system", now) for i in waiting]

    async def draft_one(self, item: items.Item) -> None:
        result = await self.drafter.draft(item, self.now())

        def unit(conn: backend.Conn) -> None:
            now = self.now()
            draft = drafts.add_sync(conn, item.id, drafts.Body(result.text, result.provenance), now)
            moved = items.transition_sync(
                conn, item.id, State.AWAITING_APPROVAL, "system", now, expect_attempt=1
            )
            flow.queue_card(conn, self.pipeline, moved, flow.Card(draft, result.note), now)

        await self.store.write(unit)

    async def approver(self) -> None:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def approve(item: items.Item) -> None:
            async with gate:
                await flow.decide(
                    self.store,
                    self.pipeline,
                    rule.Vote(Shown(item.id, 1, 1), OPERATOR, "approve"),
                    self.now(),
                )
                self.approved += 1
                if self.approved == self.total:
                    self.all_approved_at = time.perf_counter()

        while not (self.fetched_all.is_set() and self.dispatched >= self.total):
            waiting = await items.in_state(self.store, State.AWAITING_APPROVAL, limit=500)
            await asyncio.gather(*(approve(item) for item in waiting))
            if not waiting:
                await asyncio.sleep(0.01)

    async def mark_sent(self, gate: asyncio.Semaphore, row: outbox.Row) -> None:
        async with gate:
            await outbox.mark_sent(self.store, row.id, '{"1001": [1]}', self.now())

    async def sender(self) -> None:
        """What the Telegram sender records after each message went out."""
        gate = asyncio.Semaphore(CONCURRENCY)
        while not (self.fetched_all.is_set() and self.dispatched >= self.total):
            rows = await outbox.due(self.store, self.now(), ("card", "card_edit"), limit=500)
            await asyncio.gather(*(self.mark_sent(gate, row) for row in rows))
            if not rows:
                await asyncio.sleep(0.01)

    async def dispatch(self, client: httpx.AsyncClient) -> None:
        pipelines = {"bench": self.pipeline}
        while self.dispatched < self.total:
            done = await dispatcher.run_once(self.store, pipelines, client, self.now())
            step = max(1, self.total // 10)
            if (self.dispatched + done) // step > self.dispatched // step:
                print(f"  {self.dispatched + done:,} dispatched", flush=True)
            self.dispatched += done
            if not done:
                await asyncio.sleep(0.01)

    async def watch(self, stop: asyncio.Event) -> None:
        """Sample the WAL's size, and time a tiny foreground write every 10 ms."""
        while not stop.is_set():
            self.peak_wal = max(self.peak_wal, self.store.wal_bytes())
            started = time.perf_counter()
            with db.foreground():  # as a tap's: ahead of the queued background units
                await self.store.write(lambda conn: None)
            self.probe_ms.append((time.perf_counter() - started) * 1000)
            await asyncio.sleep(0.01)


def bytes_in_use(conn: backend.Conn) -> tuple[int, dict[str, int]]:
    """Bytes of pages in use (free pages excluded), and per table with its indexes."""
    page_size = conn.execute("PRAGMA page_size").fetchone()[0]
    pages = conn.execute("PRAGMA page_count").fetchone()[0]
    free = conn.execute("PRAGMA freelist_count").fetchone()[0]
    per_table: dict[str, int] = {}
    rows = conn.execute(
        "SELECT coalesce(m.tbl_name, s.name), sum(s.pgsize) FROM dbstat s"
        " LEFT JOIN sqlite_master m ON m.name = s.name GROUP BY 1"
    )
    for table, size in rows:
        per_table[table] = int(size)
    return (pages - free) * page_size, per_table


async def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m bench lifecycle")
    parser.add_argument("--items", type=int, default=100_000)
    args = common.parse(parser, argv, items=200)
    with tempfile.TemporaryDirectory() as tmp:
        pipeline = pipeline_config(Path(tmp))
        store = await db.open(db.StoreConfig(data_dir=Path(tmp) / "data"))
        life = Lifecycle(store, pipeline, args.items)
        stop = asyncio.Event()
        try:
            async with httpx.AsyncClient() as client:
                watcher = asyncio.create_task(life.watch(stop))
                # The leader's sealer runs beside the writes, as in the bot.
                seal = seal_loop.run(store, lambda: datetime.now(UTC), seal_loop.SEAL_EVERY_S,
                                   timedelta(seconds=seal_loop.MAX_SEAL_DELAY_S), stop)  # fmt: skip
                sealing_task = asyncio.create_task(seal)
                started = time.perf_counter()
                await asyncio.gather(
                    life.fetcher(), life.approver(), life.sender(), life.dispatch(client)
                )
                elapsed = time.perf_counter() - started
                stop.set()
                await watcher
                await sealing_task
            dispatched = (await items.counts(store, ["bench"], [State.DISPATCHED]))["bench"]
            later = datetime.now(UTC) + store.config.retention + timedelta(days=1)
            pruned = await retention.prune(store, later)
            await store.checkpoint("TRUNCATE")
            chain = await store.read(events.verify_sync)
            used, per_table = await store.read(bytes_in_use)
            stats = store.checkpoint_stats
        finally:
            await store.close()
    assert dispatched[State.DISPATCHED] == args.items, dispatched
    assert chain.ok, chain
    for table, size in sorted(per_table.items(), key=lambda kv: -kv[1]):
        print(f"  {table:<24} {size / args.items:8.0f} bytes per item")
    common.report(
        {
            "bench": "lifecycle",
            "items": args.items,
            "seconds": round(elapsed, 1),
            "items_per_s": round(args.items / elapsed),
            # Fetch, draft and approval alone: the dispatcher sends one row at a time.
            "approved_per_s": round(args.items / (life.all_approved_at - started)),
            "peak_wal_mb": round(max(life.peak_wal, stats.peak_wal_bytes) / 2**20, 1),
            "max_writer_stall_ms": round(stats.longest_hold_s * 1000, 1),
            "held_checkpoints": stats.held,
            "passive_checkpoints": stats.passive,
            "max_probe_write_ms": round(max(life.probe_ms, default=0.0), 1),
            "p99_probe_write_ms": round(common.percentile(life.probe_ms, 99), 1),
            "pruned_messages": pruned.messages,
            "bytes_per_item": round(used / args.items),
            "events": chain.checked,
        }
    )
