"""The engine end to end against a local feed server over real sockets."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import httpx
import pytest

from pipelines.approval import flow, rule
from pipelines.config import spec
from pipelines.drafting import drafters, moves
from pipelines.runs import engine, intake
from pipelines.service import scheduler
from store import backend, db, items, outbox
from store.audit import events
from store.intake import runs, seen, timetable
from store.items.machine import State
from store.review.followups import Shown
from tests.fakes.feed_server import FeedServer
from tests.fakes.feeds import rss
from tests.store import statements

PIPELINE = """
name: {name}
schedule: 5m
sources:
{sources}
approval:
  window: 2h
dispatch:
  type: none
"""


def write_pipeline(directory: Path, name: str, urls: list[str]) -> spec.Pipeline:
    sources = "".join(
        f"  - type: rss\n    url: {url}\n    scope: s{n}\n" for n, url in enumerate(urls)
    )
    (directory / f"{name}.yaml").write_text(PIPELINE.format(name=name, sources=sources))
    loaded = spec.load_dir(directory)
    assert not loaded.errors, spec.format_errors(loaded.errors)
    return loaded.pipelines[name]


@pytest.fixture
def feeds() -> Iterator[FeedServer]:
    with FeedServer() as server:
        yield server


async def test_ticks_create_each_item_once(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    entries = [("a", "Alpha", "first story"), ("b", "Beta", "second story")]
    feeds.set("/feed.xml", rss(entries))
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    eng = engine.Engine(store, {"news": pipeline}, client=client)

    first = await eng.tick("news", "schedule", now)
    assert (first.counts, first.status) == (runs.Counts(fetched=2, new=2, drafted=2), "ok")
    again = await eng.tick("news", "schedule", now + timedelta(minutes=5))
    assert again.counts == runs.Counts(fetched=2, new=0, drafted=0)

    feeds.set("/feed.xml", rss([*entries, ("c", "Gamma", "third story")]))
    third = await eng.tick("news", "schedule", now + timedelta(minutes=10))
    assert (third.counts.new, third.counts.drafted) == (1, 1)

    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert sorted(i.source_id for i in waiting) == ["a", "b", "c"]
    cards = await outbox.due(store, now + timedelta(hours=1), ["card"])
    assert len(cards) == 3
    card = next(c for c in cards if c.payload["title"] == "Gamma")
    assert card.payload["text"].startswith("Gamma\n\nthird story")
    assert card.payload["link"] == "https://example.org/c"
    assert (card.payload["version"], card.payload["attempt"]) == (1, 1)
    gamma = next(i for i in waiting if i.source_id == "c")
    assert gamma.deadline == now + timedelta(minutes=10, hours=2)
    history = await events.for_entity(store, "item", gamma.id)
    assert [e.to_state for e in history] == ["new", "drafting", "awaiting_approval"]
    recent = await runs.recent_runs(store, "news")
    assert [r.counts.new for r in recent] == [1, 0, 2]


async def test_a_failing_source_fails_alone(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    feeds.set("/broken.xml", "oops", status=500)
    feeds.set("/good.xml", rss([("g1", "Good", "still delivered")]))
    pipeline = write_pipeline(tmp_path, "mixed", [feeds.url("/broken.xml"), feeds.url("/good.xml")])
    report = await engine.Engine(store, {"mixed": pipeline}, client=client).tick(
        "mixed", "manual", now
    )
    assert report.status == "error"
    assert report.counts.new == 1
    run = (await runs.recent_runs(store, "mixed"))[0]
    assert run.status == "error"
    assert run.error_text is not None and "source s0" in run.error_text and "500" in run.error_text
    assert "s1" not in run.error_text
    alerts = await outbox.due(store, now, ["alert"])
    assert len(alerts) == 1 and "failed" in alerts[0].payload["text"]


async def test_duplicate_gate_marks_the_card(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([("x1", "Launch day", "The product launches on Monday at noon.")]))
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    first = (await items.in_state(store, State.AWAITING_APPROVAL, "news"))[0]
    decision = await flow.decide(
        store, pipeline, rule.Vote(Shown(first.id, 1, 1), 7, "approve"), now
    )
    assert decision.outcome == "approved"

    feeds.set("/feed.xml", rss([("x2", "Launch day", "The product launches on Monday at noon.")]))
    await eng.tick("news", "schedule", now + timedelta(hours=1))
    cards = [
        c
        for c in await outbox.due(store, now + timedelta(hours=2), ["card"])
        if c.item_id != first.id
    ]
    assert len(cards) == 1
    assert cards[0].payload["duplicate_of"] == first.id
    # Nothing is dropped silently: the duplicate still waits for an operator.
    assert (await items.get(store, cards[0].item_id or 0)).state == State.AWAITING_APPROVAL


async def test_a_replayed_item_is_drafted_again(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([("r1", "Redo", "body")]))
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    eng = engine.Engine(store, {"news": pipeline}, client=client)
    await eng.tick("news", "schedule", now)
    item = (await items.in_state(store, State.AWAITING_APPROVAL, "news"))[0]
    await flow.decide(store, pipeline, rule.Vote(Shown(item.id, 1, 1), 7, "reject"), now)
    await store.write(items.replay_sync, item.id, "operator:7", now, "try again")
    report = await eng.tick("news", "replay", now + timedelta(minutes=1))
    assert (report.counts.new, report.counts.drafted) == (0, 1)
    again = await items.get(store, item.id)
    assert (again.state, again.attempt, again.version) == (State.AWAITING_APPROVAL, 2, 2)


async def test_approval_queues_card_edit_and_dispatch_together(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([("d1", "Ship", "it")]))
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    await engine.Engine(store, {"news": pipeline}, client=client).tick("news", "schedule", now)
    item = (await items.in_state(store, State.AWAITING_APPROVAL, "news"))[0]
    await flow.decide(store, pipeline, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now)
    again = await flow.decide(store, pipeline, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now)
    assert again.outcome == "unchanged"
    edits = await outbox.for_item(store, item.id, "card_edit")
    dispatches = await outbox.for_item(store, item.id, "dispatch")
    assert len(edits) == 1 and edits[0].payload["status"].startswith("✅ approved by operator:7")
    assert len(dispatches) == 1 and dispatches[0].payload == {
        "item_id": item.id,
        "attempt": 1,
        "version": 1,
        "pipeline": "news",
    }


@pytest.mark.parametrize("fail_closed", [False, True])
async def test_a_broken_dedup_table_degrades_open_unless_fail_closed(
    store: db.Store,
    feeds: FeedServer,
    client: httpx.AsyncClient,
    tmp_path: Path,
    data_dir: Path,
    now: datetime,
    fail_closed: bool,
) -> None:
    feeds.set("/feed.xml", rss([("k1", "Kept", "one"), ("k2", "Also kept", "two")]))
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    pipeline.dedup.fail_closed = fail_closed
    # A real store failure: the dedup table is gone (as after a botched manual repair).
    raw = sqlite3.connect(data_dir / "gatehouse.db", isolation_level=None)
    raw.execute("DROP TABLE seen_items")
    raw.close()
    report = await engine.Engine(store, {"news": pipeline}, client=client).tick(
        "news", "schedule", now
    )
    assert report.status == "error"
    assert "dedup unavailable" in report.errors[0]
    created = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert len(created) == (0 if fail_closed else 2)
    alerts = await outbox.due(store, now, ["alert"])
    assert len(alerts) == 1 and "dedup unavailable" in alerts[0].payload["text"]


class FailOn:
    """A drafter that fails for one source id and drafts the rest from the template."""

    def __init__(self, pipeline: spec.Pipeline, bad: str) -> None:
        self.template = drafters.TemplateDrafter(pipeline)
        self.bad = bad

    async def draft(self, item: items.Item, now: datetime) -> drafters.DraftResult:
        if item.source_id == self.bad:
            raise drafters.DraftFailed("the model refused", reason="provider")
        return await self.template.draft(item, now)


async def test_mark_at_success_marks_only_what_reached_approval(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([("ok1", "Fine", "drafts"), ("bad1", "Broken", "fails")]))
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    pipeline.dedup.mark_at = "success"
    eng = engine.Engine(
        store, {"news": pipeline}, client=client, drafter_for=lambda p: FailOn(p, "bad1")
    )
    report = await eng.tick("news", "schedule", now)
    assert (report.counts.drafted, report.counts.failed) == (1, 1)
    assert await store.read(seen.filter_unseen_sync, "news", "s0", ["ok1", "bad1"]) == ["bad1"]
    # Its row exists (failed, replayable), so fetching it again creates nothing new.
    again = await eng.tick("news", "schedule", now + timedelta(minutes=5))
    assert again.counts.new == 0


async def test_a_batch_records_in_chunks_and_saves_the_etag_with_the_last(
    store: db.Store,
    feeds: FeedServer,
    client: httpx.AsyncClient,
    tmp_path: Path,
    data_dir: Path,
    now: datetime,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(intake, "RECORD_CHUNK", 2)
    entries = [(f"e{n}", f"Story {n}", f"body {n}") for n in range(5)]
    feeds.set("/feed.xml", rss(entries), etag='"v1"')
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    pipeline.dedup.fail_closed = True
    # A real failure inside the second chunk's transaction (e2, e3).
    raw = sqlite3.connect(data_dir / "gatehouse.db", isolation_level=None)
    raw.execute(
        "CREATE TRIGGER boom BEFORE INSERT ON items WHEN NEW.source_id = 'e3' "
        "BEGIN SELECT RAISE(ABORT, 'disk trouble'); END"
    )
    eng = engine.Engine(store, {"news": pipeline}, client=client)

    first = await eng.tick("news", "schedule", now)
    # The first chunk committed whole; the second rolled back whole: its marks too.
    assert (first.counts.fetched, first.counts.new, first.counts.drafted) == (5, 2, 2)
    assert "dedup unavailable" in first.errors[0]
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert sorted(i.source_id for i in waiting) == ["e0", "e1"]
    ids = [f"e{n}" for n in range(5)]
    assert await store.read(seen.filter_unseen_sync, "news", "s0", ids) == ["e2", "e3", "e4"]
    assert await timetable.source_state(store, "news", "s0") == {}  # no ETag: refetch all

    raw.execute("DROP TRIGGER boom")
    raw.close()
    second = await eng.tick("news", "schedule", now + timedelta(minutes=5))
    assert (second.counts.fetched, second.counts.new, second.status) == (5, 3, "ok")
    waiting = await items.in_state(store, State.AWAITING_APPROVAL, "news")
    assert sorted(i.source_id for i in waiting) == ids
    assert await timetable.source_state(store, "news", "s0") != {}
    third = await eng.tick("news", "schedule", now + timedelta(minutes=10))
    assert (third.counts.fetched, third.counts.new) == (0, 0)  # 304: the ETag was kept


async def test_the_tick_cap_carries_the_rest_to_a_follow_up_run(
    store: db.Store, feeds: FeedServer, client: httpx.AsyncClient, tmp_path: Path, now: datetime
) -> None:
    feeds.set("/feed.xml", rss([(f"c{n}", f"Story {n}", f"body {n}") for n in range(5)]))
    pipeline = write_pipeline(tmp_path, "news", [feeds.url("/feed.xml")])
    eng = engine.Engine(store, {"news": pipeline}, client=client, max_items_per_tick=3)
    sched = scheduler.Scheduler(store, eng, {"news": pipeline})

    first = await eng.tick("news", "schedule", now)
    assert (first.counts.new, first.counts.drafted) == (5, 3)
    assert len(await items.in_state(store, State.NEW, "news")) == 2
    assert (await timetable.all_states(store))["news"].run_requested_at == now

    later = now + timedelta(seconds=1)
    assert await sched.run_once(later) == ["news"]
    recent = await runs.recent_runs(store, "news")
    assert [(r.trigger, r.counts.drafted) for r in recent] == [("manual", 2), ("schedule", 3)]
    assert len(await items.in_state(store, State.AWAITING_APPROVAL, "news")) == 5
    assert (await timetable.all_states(store))["news"].run_requested_at is None
    assert await sched.run_once(later + timedelta(seconds=1)) == []  # nothing left over


def test_the_tick_cap_must_be_positive(store: db.Store, client: httpx.AsyncClient) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        engine.Engine(store, {}, client=client, max_items_per_tick=0)


async def test_a_draft_for_an_item_another_worker_already_brought_to_approval_is_not_used(
    store: db.Store, tmp_path: Path, now: datetime
) -> None:
    """A worker that read an item in drafting just before another worker's late reply
    took it to approval writes nothing: one draft, one card."""
    pipeline = write_pipeline(tmp_path, "news", ["https://example.org/feed.xml"])

    def drafting(conn: sqlite3.Connection) -> items.Item:
        created = items.create_sync(conn, "news", "s0", "a", {"title": "A"}, now)
        assert created is not None
        return items.transition_sync(conn, created.id, State.DRAFTING, "system", now)

    stale = await store.write(drafting)
    reply = drafters.DraftResult("the one reply", {"drafter": "llm"})
    first = await store.write(moves.to_approval, pipeline, stale, reply, None, now)
    second = await store.write(moves.to_approval, pipeline, stale, reply, None, now)

    assert (first, second) == (True, False)
    after = await items.get(store, stale.id)
    assert (after.state, after.version) == (State.AWAITING_APPROVAL, 1)
    cards = await outbox.due(store, now + timedelta(hours=1), ["card"])
    assert [c.item_id for c in cards] == [stale.id]


async def test_a_draft_reaches_approval_in_one_move_of_its_item(
    store: db.Store, tmp_path: Path, now: datetime
) -> None:
    """The item, still as it was read, moves to its next version in one statement that
    locks it (no read of it first), and its draft is stored under that version."""
    pipeline = write_pipeline(tmp_path, "news", ["http://127.0.0.1:9/feed.xml"])
    made = await store.write(items.create_sync, "news", "s0", "guid", {"title": "T"}, now)
    assert made is not None
    drafting = await store.write(items.transition_sync, made.id, State.DRAFTING, "system", now)
    result = drafters.DraftResult("the draft", {"drafter": "template"})

    def unit(conn: backend.Conn) -> tuple[bool, dict[str, int]]:
        counted = statements.Counting(conn)
        reached = moves.to_approval(counted, pipeline, drafting, result, None, now)
        return reached, dict(counted.sent)

    reached, sent = await store.write(unit)
    assert reached
    assert sent == {
        "items.move": 1, "events.insert": 1, "items.insert_draft": 1,
        "outbox.enqueue": 1, "notify.notify": 1,  # (PostgreSQL sends it once, at COMMIT)
    }  # fmt: skip
    moved = await items.get(store, made.id)
    assert (moved.state, moved.version) == (State.AWAITING_APPROVAL, 1)
    assert moved.deadline == now + timedelta(hours=2)
