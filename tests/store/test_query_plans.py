"""The operator's questions read indexes, never whole tables: EXPLAIN QUERY PLAN proves it.

Each test runs the very function the bot and the CLI call, records every statement it
sends to SQLite (with its bound values), and asks SQLite how it would run each one.
A `SCAN` of items, events, claims, outbox or llm_outputs (a full pass over the table,
or over a whole index of it) fails the test, naming the statement and its plan; a pass
over a partial index (one that lists only, say, the pending rows) is allowed.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from pipelines import operations
from store import db, items, outbox
from store.items.machine import State
from store.reports import info
from store.upkeep import retention

#: The big tables: a full pass over any of them grows with the installation's age.
BIG = ("items", "events", "claims", "outbox", "llm_outputs")
_ALIAS = re.compile(rf"\b({'|'.join(BIG)})\s+(?:AS\s+)?([a-z_]\w*)", re.IGNORECASE)
_NOT_ALIASES = {"where", "on", "join", "left", "group", "order", "limit", "set", "values", "as"}


@pytest.fixture
async def store(data_dir: Path) -> AsyncIterator[db.Store]:
    # One reader, so tracing it sees every read.
    opened = await db.open(db.StoreConfig(data_dir=data_dir, readers=1))
    try:
        yield opened
    finally:
        await opened.close()


async def awaiting_item(store: db.Store, now: datetime, source_id: str = "g1") -> items.Item:
    item = await store.write(items.create_sync, "news", "s", source_id, {"title": "T"}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)
    moved = await store.write(
        items.transition_sync, item.id, State.AWAITING_APPROVAL, "system", now
    )
    payload = {"pipeline": "news", "attempt": 1, "version": 1}
    await outbox.enqueue(store, "card", outbox.OPERATORS, payload, now, item_id=item.id)
    return moved


async def statements(store: db.Store, call: Callable[[], Awaitable[Any]]) -> list[str]:
    """Every statement `call` runs on the store's reader and writer, values bound."""
    seen: list[str] = []

    def trace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(seen.append)

    def untrace(conn: sqlite3.Connection) -> None:
        conn.set_trace_callback(None)

    await store.read(trace)
    await store.write(trace)
    try:
        await call()
    finally:
        await store.read(untrace)
        await store.write(untrace)
    # A table-valued pragma (pragma_page_count()) is traced again as a lone comment.
    return [
        s
        for s in seen
        if not re.match(r"\s*(BEGIN|COMMIT|ROLLBACK|PRAGMA)\b", s)
        and not re.fullmatch(r"\s*--[^\n]*", s)
    ]


def full_scans(statement: str, plan: list[str], partial: frozenset[str] = frozenset()) -> list[str]:
    """The plan lines that pass over a whole big table (or a whole index that is not partial)."""
    names = set(BIG)
    for _table, alias in _ALIAS.findall(statement):
        if alias.lower() not in _NOT_ALIASES:
            names.add(alias)
    pattern = re.compile(
        rf"^SCAN ({'|'.join(sorted(names))})\b(?: USING (?:COVERING )?INDEX (\w+))?"
    )
    found = [(line, pattern.match(line)) for line in plan]
    return [line for line, match in found if match and match.group(2) not in partial]


def partial_indexes(conn: sqlite3.Connection) -> frozenset[str]:
    rows = conn.execute(
        "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL"
    )
    return frozenset(name for name, text in rows if " WHERE " in text.upper())


async def assert_no_full_scan(store: db.Store, call: Callable[[], Awaitable[Any]]) -> str:
    """Fails naming each statement whose plan scans a big table; returns every plan."""
    ran = await statements(store, call)
    assert ran, "the call ran no SQL at all"
    problems, plans = [], []
    partial = await store.read(partial_indexes)
    for statement in ran:
        rows = await store.read(
            lambda conn, s=statement: conn.execute("EXPLAIN QUERY PLAN " + s).fetchall()
        )
        plan = [str(row[3]) for row in rows]
        plans.extend(plan)
        if bad := full_scans(statement, plan, partial):
            problems.append(f"{' '.join(statement.split())}\n    plan: {plan}\n    scans: {bad}")
    assert not problems, "full scans:\n" + "\n".join(problems)
    return "\n".join(plans)


def test_the_check_itself_catches_a_scan() -> None:
    statement = "SELECT c.id FROM claims c WHERE c.pipeline = 'x'"
    assert full_scans(statement, ["SCAN c"]) == ["SCAN c"]
    assert full_scans("SELECT count(*) FROM items", ["SCAN items USING COVERING INDEX x"])
    assert full_scans("SELECT * FROM items WHERE id = 1", ["SEARCH items USING ..."]) == []
    pending_only = frozenset({"outbox_due"})
    assert (
        full_scans("SELECT * FROM outbox", ["SCAN outbox USING INDEX outbox_due"], pending_only)
        == []
    )
    assert full_scans("SELECT * FROM outbox", ["SCAN outbox USING INDEX other"], pending_only)


async def test_pending_and_its_cards(store: db.Store, now: datetime) -> None:
    item = await awaiting_item(store, now)

    async def pending() -> None:
        for waiting in await operations.pending(store):
            await outbox.for_item(store, waiting.id, "card")

    plans = await assert_no_full_scan(store, pending)
    assert "items_pending" in plans and "outbox_by_item" in plans
    assert [i.id for i in await operations.pending(store)] == [item.id]


async def test_status_overview(store: db.Store, now: datetime) -> None:
    await awaiting_item(store, now)
    await assert_no_full_scan(store, lambda: operations.overview(store, ["news", "other"], now))
    found = await operations.overview(store, ["news", "other"], now)
    assert [(p.name, p.awaiting, p.breaches) for p in found.pipelines] == [
        ("news", 1, 0),
        ("other", 0, 0),
    ]


async def test_budget_report(store: db.Store, now: datetime) -> None:
    plans = await assert_no_full_scan(store, lambda: operations.budget(store, now))
    assert "COVERING INDEX claims_by_created" in plans


async def test_history(store: db.Store, now: datetime) -> None:
    item = await awaiting_item(store, now)
    await assert_no_full_scan(store, lambda: operations.history(store, item.id))


async def test_cli_status_summary(store: db.Store, now: datetime) -> None:
    await awaiting_item(store, now)
    await awaiting_item(store, now, "g2")
    await assert_no_full_scan(store, lambda: info.info(store))
    summary = await info.info(store)
    # 2 items, each: created, drafting, awaiting_approval.
    assert summary.rows == {"events": 6, "items": 2, "claims": 0, "pipeline_runs": 0}
    assert summary.db_bytes > 0 and summary.free_bytes >= 0


async def test_outbox_due_and_retention(store: db.Store, now: datetime) -> None:
    await awaiting_item(store, now)
    plans = await assert_no_full_scan(store, lambda: outbox.due(store, now))
    assert "USING INDEX outbox_due" in plans
    plans = await assert_no_full_scan(
        store, lambda: retention.prune(store, now + timedelta(days=90))
    )
    # Retention walks its own small indexes, never every sent dispatch row.
    assert "outbox_prunable (state=? AND sent_at<?)" in plans
    assert "llm_outputs_by_age (created_at<?)" in plans


async def test_due_reads_each_kind_alone_and_merges_them_oldest_first(
    store: db.Store, now: datetime
) -> None:
    later = now + timedelta(hours=1)
    ids = []
    for kind, at in (
        ("dispatch", now), ("alert", now), ("dispatch", later), ("card_edit", now),
        ("alert", now), ("dispatch", now),
    ):  # fmt: skip
        row = await outbox.enqueue(store, kind, "t", {"n": len(ids)}, at)
        assert row is not None
        ids.append(row)
    due = await outbox.due(store, now, ("alert", "card_edit", "dispatch"), limit=4)
    assert [r.id for r in due] == [ids[0], ids[1], ids[3], ids[4]]
    sender = await outbox.due(store, now, ("card", "card_edit", "alert"))
    assert [r.id for r in sender] == [ids[1], ids[3], ids[4]]


async def test_stats(store: db.Store, now: datetime) -> None:
    await awaiting_item(store, now)
    since = now - timedelta(days=7)
    plans = await assert_no_full_scan(store, lambda: operations.stats(store, ["news"], 7, now))
    assert "events_by_entity" in plans and "claims_by_created" in plans
    [found] = await operations.stats(store, ["news"], 7, now + timedelta(seconds=1))
    assert (found.entries, found.carded, found.since) == (1, 1, since + timedelta(seconds=1))
