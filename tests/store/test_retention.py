"""Retention: sent messages of ended items and settled LLM outputs go; the record stays.

Real SQLite files throughout: rows are made by the store's own functions (raw SQL only
for claims, whose ledger path needs prices and budgets this test is not about).
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from store import db, drafts, items, outbox
from store.audit import events, sealer
from store.backends import migrate, sqlite_store
from store.items.machine import State
from store.ledger import outputs as llm_outputs
from store.upkeep import retention
from tests import forger

DAY = timedelta(days=1)


async def ended_item(store: db.Store, now: datetime, source_id: str) -> items.Item:
    """An item rejected at `now`, with a sent card, a sent card edit and a dispatch row."""
    item = await store.write(items.create_sync, "news", "s", source_id, {"title": source_id}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)
    await store.write(
        lambda c: drafts.add_sync(c, item.id, drafts.Body(f"draft {source_id}", {}), now)
    )
    await store.write(items.transition_sync, item.id, State.AWAITING_APPROVAL, "system", now)
    await store.write(items.transition_sync, item.id, State.REJECTED, "operator:7", now)
    for kind in ("card", "card_edit", "dispatch"):
        payload = {"attempt": 1, "version": 1}
        row = await outbox.enqueue(store, kind, "operators", payload, now, item_id=item.id)
        assert row is not None
        await outbox.mark_sent(store, row, "{}", now)
    return item


async def kinds_left(store: db.Store) -> list[tuple[int | None, str, str]]:
    return await store.read(
        lambda c: c.execute("SELECT item_id, kind, state FROM outbox ORDER BY id").fetchall()
    )


async def test_sent_messages_of_ended_items_go_and_the_record_stays(
    store: db.Store, now: datetime
) -> None:
    old = await ended_item(store, now - 40 * DAY, "old")
    recent = await ended_item(store, now - 5 * DAY, "recent")
    # A live item's card stays however old: its card edit still has to find it. So does
    # the old card of an item that ended within the age (its ending edit may be pending).
    live = await store.write(items.create_sync, "news", "s", "live", {}, now - 40 * DAY)
    assert live is not None
    late = await store.write(items.create_sync, "news", "s", "late", {}, now - 40 * DAY)
    assert late is not None
    await store.write(items.transition_sync, late.id, State.DRAFTING, "system", now - 40 * DAY)
    await store.write(items.transition_sync, late.id, State.FAILED, "system", now - 2 * DAY)
    for item_id in (live.id, late.id):
        card = await outbox.enqueue(store, "card", "operators", {}, now - 40 * DAY, item_id=item_id)
        assert card is not None
        await outbox.mark_sent(store, card, "{}", now - 40 * DAY)
    # An old alert without an item goes; a failed and a pending one stay.
    for key in ("sent", "failed", "pending"):
        row = await outbox.enqueue(store, "alert", "alerts", {"text": key}, now - 40 * DAY)
        assert row is not None
        if key == "sent":
            await outbox.mark_sent(store, row, "{}", now - 40 * DAY)
        elif key == "failed":
            await outbox.mark_failed(store, row, "bad chat")
    events_before = await store.read(lambda c: events.verify_sync(c).checked)

    pruned = await retention.prune(store, now, batch=2)  # several small writes

    assert pruned == retention.Pruned(messages=3, llm_outputs=0)
    assert await kinds_left(store) == [
        (old.id, "dispatch", "sent"),
        (recent.id, "card", "sent"),
        (recent.id, "card_edit", "sent"),
        (recent.id, "dispatch", "sent"),
        (live.id, "card", "sent"),
        (late.id, "card", "sent"),
        (None, "alert", "failed"),
        (None, "alert", "pending"),
    ]
    chain = await store.read(events.verify_sync)
    assert chain.ok and chain.checked == events_before
    assert (await drafts.get(store, old.id, 1)).text == "draft old"
    # Nothing is left to prune: a second pass deletes nothing.
    assert await retention.prune(store, now) == retention.Pruned(0, 0)


def _claim(conn: sqlite3.Connection, claim_id: int, state: str, at: int) -> None:
    actual = 10 if state == "settled" else None
    conn.execute(
        "INSERT INTO claims (id, idem_hash, request_digest, pipeline, state, provider_allowed,"
        " reserved_micros, actual_micros, lease_until, created_at, updated_at)"
        " VALUES (?, ?, 'd', 'news', ?, 1, 100, ?, 0, ?, ?)",
        (claim_id, f"h{claim_id}", state, actual, at, at),
    )


async def test_llm_outputs_of_finished_claims_go_after_the_age(
    store: db.Store, now: datetime
) -> None:
    old, recent = now - 40 * DAY, now - 5 * DAY
    cases = [
        (1, "settled", old),
        (2, "released", old),
        (3, "uncertain", old),
        (4, "settled", recent),
    ]

    def unit(conn: sqlite3.Connection) -> None:
        for claim_id, state, at in cases:
            _claim(conn, claim_id, state, int(at.timestamp() * 1000))
            llm_outputs.keep_sync(conn, claim_id, llm_outputs.Reply("out", "m", None, None), at)

    await store.write(unit)
    assert await retention.prune(store, now) == retention.Pruned(messages=0, llm_outputs=2)
    kept = [c for c, _, _ in cases if await llm_outputs.get(store, c) is not None]
    # An uncertain claim's output is the operator's evidence; a recent one may be reused.
    assert kept == [3, 4]
    assert await store.read(lambda c: c.execute("SELECT count(*) FROM claims").fetchone()[0]) == 4


async def test_a_card_row_holds_no_draft_text_and_reads_it_from_the_draft(
    store: db.Store, now: datetime
) -> None:
    item = await store.write(items.create_sync, "news", "s", "g", {"title": "T"}, now)
    assert item is not None
    await store.write(lambda c: drafts.add_sync(c, item.id, drafts.Body("the draft <b>", {}), now))
    payload = {"pipeline": "news", "attempt": 1, "version": 1}
    row_id = await outbox.enqueue(store, "card", "operators", payload, now, item_id=item.id)
    assert row_id is not None
    stored = await store.read(
        lambda c: c.execute("SELECT payload FROM outbox WHERE id = ?", (row_id,)).fetchone()[0]
    )
    assert json.loads(stored) == payload
    row = await store.read(outbox.get_sync, row_id)
    assert row.payload == {**payload, "text": "the draft <b>"}
    [due] = await outbox.due(store, now)
    [listed] = await outbox.for_item(store, item.id, "card")
    assert due.payload == listed.payload == row.payload


#: The events' columns as migration 0007 left them.
OLD_COLUMNS = (
    "id, entity, entity_id, from_state, to_state, actor, attempt, reason, at, prev_hash, hash"
)


def before_operator_queries(tmp_path: Path) -> tuple[sqlite3.Connection, int]:
    """A database at the schema before this migration, and the migration's version."""
    older = tmp_path / "older"
    older.mkdir()
    every = migrate.discover()
    mine = next(m for m in every if m.name == "operator_queries")
    for migration in every[: every.index(mine)]:
        shutil.copy(migration.path, older / migration.path.name)
    conn = sqlite3.connect(tmp_path / "db", isolation_level=None)
    conn.row_factory = sqlite_store.Row  # as the store's own connections hand rows back
    migrate.apply_pending(conn, older)
    return conn, mine.version


def test_the_events_rebuild_keeps_the_chain_and_its_guards(tmp_path: Path, now: datetime) -> None:
    conn, version = before_operator_queries(tmp_path)
    prev = events.GENESIS
    for n in range(1, 4):  # rows as written before: each stores the hash it chains to
        fields: dict[str, object] = {
            "id": n, "entity": "pipeline", "entity_id": "news", "from_state": None,
            "to_state": f"s{n}", "actor": "system", "attempt": 0, "reason": None,
            "at": n, "prev_hash": prev,
        }  # fmt: skip
        fields["hash"] = prev = events.compute_hash(fields)
        conn.execute(
            "INSERT INTO events VALUES (:id, :entity, :entity_id, :from_state, :to_state,"
            " :actor, :attempt, :reason, :at, :prev_hash, :hash)",
            fields,
        )
    before = conn.execute(f"SELECT {OLD_COLUMNS} FROM events ORDER BY id").fetchall()
    assert version in migrate.apply_pending(conn)
    assert conn.execute(f"SELECT {OLD_COLUMNS} FROM events ORDER BY id").fetchall() == before
    # Rows chained before the sealer existed keep their hash; their id is their place.
    assert conn.execute("SELECT seq FROM events ORDER BY id").fetchall() == [(1,), (2,), (3,)]
    # New events store no copy of the hash they chain to; readers derive it.
    conn.execute("BEGIN")
    for n in range(2):
        events.append(conn, "pipeline", "news", None, f"t{n}", "system", now + n * DAY)
    assert sealer.seal_sync(conn) == 2
    conn.execute("COMMIT")
    stored = conn.execute("SELECT prev_hash FROM events WHERE id > 3").fetchall()
    assert stored == [(None,), (None,)]
    chained = events.for_entity_sync(conn, "pipeline", "news")
    assert [e.prev_hash for e in chained] == [events.GENESIS] + [e.hash for e in chained[:-1]]
    report = events.verify_sync(conn)
    assert report.ok and report.checked == 5
    before = conn.execute("SELECT * FROM events ORDER BY id").fetchall()
    for statement in ("UPDATE events SET reason = 'x'", "DELETE FROM events"):
        with pytest.raises(sqlite3.IntegrityError, match="append-only"):
            conn.execute(statement)
    assert conn.execute("SELECT * FROM events ORDER BY id").fetchall() == before


def test_the_migration_drops_text_that_cards_repeated(tmp_path: Path) -> None:
    conn, version = before_operator_queries(tmp_path)
    conn.execute(
        "INSERT INTO items (id, pipeline, scope, source_id, payload, content_hash, state,"
        " created_at, last_transition_at) VALUES (1, 'p', 's', 'x', '{}', 'h', 'new', 0, 0)"
    )
    card = json.dumps({"text": "repeated", "version": 1})
    alert = json.dumps({"text": "an alert keeps its text"})
    for kind, payload in (("card", card), ("alert", alert)):
        conn.execute(
            "INSERT INTO outbox (kind, target, item_id, payload, next_attempt_at, created_at)"
            " VALUES (?, 't', 1, ?, 0, 0)",
            (kind, payload),
        )
    assert version in migrate.apply_pending(conn)
    stored = [json.loads(p) for (p,) in conn.execute("SELECT payload FROM outbox ORDER BY id")]
    assert stored == [{"version": 1}, {"text": "an alert keeps its text"}]


async def test_a_rewritten_event_still_breaks_the_chain_at_the_next_one(
    store: db.Store, now: datetime
) -> None:
    """With the previous hash derived, not stored, a forger who rehashes an edited event
    is caught by the event after it, whose hash covered the original."""
    for n in range(3):
        await store.write(
            lambda c, n=n: events.append(c, "pipeline", "news", None, f"s{n}", "system", now)
        )
    await sealer.seal(store)

    with forger.raw(store, triggers=False) as conn:
        [second] = [e for e in events.for_entity_sync(conn, "pipeline", "news") if e.id == 2]
        fields = {**second.__dict__, "to_state": "forged", "at": int(now.timestamp() * 1000)}
        fields["id"] = second.seq
        conn.execute(
            "UPDATE events SET to_state = 'forged', hash = ? WHERE id = 2",
            (events.compute_hash(fields),),
        )
    report = await events.verify_chain(store)
    assert report.broken is not None and report.broken.event_id == 3
    assert "edited" in str(report.broken)
