"""The editor's numbers against a known history on both backends: every figure matches
the count taken straight from the store's tables, and the window bounds them."""

from __future__ import annotations

from datetime import datetime, timedelta

from pipelines.approval import flow, rule
from store import backend, db, drafts, items, ledger
from store.items.machine import State
from store.ledger.prices import Usage
from store.reports import stats
from store.review import decisions
from store.review.followups import Shown

MIN = timedelta(minutes=1)


def _history(conn: backend.Conn, t0: datetime) -> None:
    """news: 7 entries. a approved after 10 min, b rejected (tone) after 30, c rejected
    (tone) after 60 and undone then approved after 90 more, d expired, e filtered,
    f skipped, g still new. other: one entry, approved (never counted for news)."""

    def entry(name: str, pipeline: str = "news") -> items.Item:
        made = items.create_sync(conn, pipeline, "s", name, {"title": name}, t0)
        assert made is not None
        return made

    def carded(item: items.Item, at: datetime) -> items.Item:
        items.transition_sync(conn, item.id, State.DRAFTING, "system", at)
        drafts.add_sync(conn, item.id, drafts.Body(f"draft of {item.source_id}", {}), at)
        moved = items.transition_sync(
            conn, item.id, State.AWAITING_APPROVAL, "system", at, deadline=timedelta(hours=24)
        )
        return moved

    def decide(item: items.Item, choice: decisions.Choice, at: datetime, why: str | None) -> None:
        now = items.get_sync(conn, item.id)
        flow.decide_sync(
            conn, rule.Vote(Shown(item.id, now.attempt, now.version), 42, choice, reason=why), at
        )

    a, b, c, d = (carded(entry(n), t0 + MIN) for n in "abcd")
    decide(a, "approve", t0 + 11 * MIN, None)
    decide(b, "reject", t0 + 31 * MIN, "tone")
    decide(c, "reject", t0 + 61 * MIN, "tone")
    undone = items.get_sync(conn, c.id)
    decisions.undo_sync(
        conn, c.id, undone.attempt, undone.version, 42, t0 + 62 * MIN,
        window=timedelta(minutes=5), deadline=timedelta(hours=24),
    )  # fmt: skip
    decide(c, "approve", t0 + 152 * MIN, None)
    items.transition_sync(conn, d.id, State.EXPIRED, "sweep", t0 + 200 * MIN)
    items.transition_sync(conn, entry("e").id, State.FILTERED, "system", t0, reason="rule")
    f = entry("f")
    items.transition_sync(conn, f.id, State.DRAFTING, "system", t0)
    items.transition_sync(conn, f.id, State.SKIPPED, "system", t0, reason="triage 0.10: no")
    entry("g")
    decide(carded(entry("o", "other"), t0 + MIN), "approve", t0 + 2 * MIN, None)


def _count(conn: backend.Conn, query: str) -> int:
    return int(conn.execute(query).fetchone()[0])


def _moves(conn: backend.Conn, old: str, new: str) -> int:
    """Straight from the events table: news items' moves from `old` to `new`."""
    return _count(
        conn,
        "SELECT count(*) FROM events e JOIN items i ON e.entity_id = CAST(i.id AS TEXT) "
        f"WHERE e.entity = 'item' AND i.pipeline = 'news' AND e.from_state = '{old}' "
        f"AND e.to_state = '{new}'",
    )


async def test_the_numbers_match_the_store_for_a_known_history(
    store: db.Store, now: datetime
) -> None:
    t0 = now - timedelta(days=2)
    await store.write(_history, t0)
    await ledger.set_budget(store, ledger.Limit("global", "month", 10_000_000), "cli", t0)
    for n, micros in enumerate((1_000, 2_000, 3_000)):  # triage and drafts, any outcome
        await ledger.charge(store, f"k{n}", "news", ledger.Actual(micros, "r", Usage(1, 1)), t0)
    await ledger.charge(store, "o", "other", ledger.Actual(9_000, "r", Usage(1, 1)), t0)

    found = await stats.pipeline(store, "news", now - timedelta(days=7), now)

    def straight(conn: backend.Conn) -> dict[str, int]:
        return {
            "entries": _count(conn, "SELECT count(*) FROM items WHERE pipeline = 'news'"),
            "filtered": _moves(conn, "new", "filtered"),
            "skipped": _moves(conn, "drafting", "skipped"),
            "carded": _moves(conn, "drafting", "awaiting_approval"),
            "approved": _moves(conn, "awaiting_approval", "approved"),
            "rejected": _moves(conn, "awaiting_approval", "rejected"),
            "expired": _moves(conn, "awaiting_approval", "expired"),
            "undone": _moves(conn, "rejected", "awaiting_approval"),
            "spend": _count(conn, "SELECT sum(actual_micros) FROM claims WHERE pipeline = 'news'"),
        }

    counted = await store.read(straight)
    assert counted == {
        "entries": 7, "filtered": 1, "skipped": 1, "carded": 4, "approved": 2,
        "rejected": 2, "expired": 1, "undone": 1, "spend": 6_000,
    }  # fmt: skip
    assert (
        found.entries, found.filtered, found.skipped, found.carded, found.approved,
        found.rejected, found.expired, found.undone, found.spend_micros,
    ) == tuple(counted.values())  # fmt: skip
    assert found.approval_rate == 0.5
    assert found.spend_per_approved_micros == 3_000
    assert found.reject_reasons == [("tone", 2)]
    # Waits from card to decision: 10, 30, 60 and (after the undo) 90 minutes.
    assert (found.median_wait_s, found.p90_wait_s) == (30 * 60, 90 * 60)

    # A window that ends before anything happened counts nothing.
    before = await stats.pipeline(store, "news", t0 - timedelta(days=7), t0 - MIN)
    assert (before.entries, before.approved, before.spend_micros) == (0, 0, 0)
    assert (before.approval_rate, before.median_wait_s) == (None, None)


def test_percentile_is_a_value_observed() -> None:
    assert stats.percentile([], 0.5) is None
    assert stats.percentile([4.0, 1.0, 3.0, 2.0], 0.5) == 2.0
    assert stats.percentile([float(n) for n in range(1, 11)], 0.9) == 9.0
    assert stats.reason_of("rejected by operator:42: off-topic") == "off-topic"
    assert stats.reason_of("rejected by operator:42") == "no reason"
