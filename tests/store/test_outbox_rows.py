"""What an outbox row holds and how workers take rows: the fields read back as written,
alerts name their item on the row and in the payload, a claim over several kinds
returns every row it took and never more than its limit, and refusals say what is valid.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from store import backend, db, errors, items, outbox, payloads

LEASE = timedelta(seconds=30)


async def _item(store: db.Store, now: datetime) -> int:
    made = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": "t"}, now)
    assert made is not None
    return made.id


async def _queue(store: db.Store, kind: outbox.Kind, n: int, now: datetime) -> int:
    row_id = await outbox.enqueue(store, kind, "anyone", {"n": n}, now)
    assert row_id is not None
    return row_id


async def test_a_row_reads_back_its_times_and_what_got_through(
    store: db.Store, now: datetime
) -> None:
    row_id = await outbox.enqueue(store, "dispatch", "news", {"n": 1}, now)
    assert row_id is not None
    queued = await store.read(outbox.get_sync, row_id)
    assert (queued.created_at, queued.next_attempt_at, queued.sent_at) == (now, now, None)
    later = now + timedelta(seconds=7)
    assert await outbox.mark_sent(store, row_id, "msg-9", later)
    sent = await store.read(outbox.get_sync, row_id)
    assert (sent.state, sent.created_at, sent.sent_at, sent.external_id) == (
        "sent",
        now,
        later,
        "msg-9",
    )


async def test_an_alert_names_its_item_on_the_row_and_in_its_payload(
    store: db.Store, now: datetime
) -> None:
    item_id = await _item(store, now)
    row_id = await store.write(
        outbox.alert_sync, payloads.Alert(text="stuck", item_id=item_id), now, key="a1"
    )
    assert row_id is not None
    row = await store.read(outbox.get_sync, row_id)
    assert (row.kind, row.target, row.item_id, row.dedupe_key) == ("alert", "alerts", item_id, "a1")
    alert = payloads.Alert.from_json(row.payload)
    assert (alert.text, alert.item_id, alert.level) == ("stuck", item_id, "error")


async def test_an_alert_about_facts_carries_them_for_the_bot_to_word(
    store: db.Store, now: datetime
) -> None:
    item_id = await _item(store, now)
    facts = {"scope": "global", "spent_micros": 900}
    row_id = await store.write(
        outbox.alert_sync,
        payloads.Alert(about="budget_threshold", facts=facts, level="warning", item_id=item_id),
        now,
        key="budget:90",
    )
    assert row_id is not None
    row = await store.read(outbox.get_sync, row_id)
    assert (row.kind, row.target, row.item_id, row.dedupe_key) == (
        "alert",
        "alerts",
        item_id,
        "budget:90",
    )
    alert = payloads.Alert.from_json(row.payload)
    assert (alert.about, alert.facts, alert.item_id, alert.level, alert.text) == (
        "budget_threshold",
        facts,
        item_id,
        "warning",
        "",
    )
    # At most once per key: the same facts again queue nothing.
    again = await store.write(
        outbox.alert_sync,
        payloads.Alert(about="budget_threshold", facts=facts),
        now,
        key="budget:90",
    )
    assert again is None


async def test_an_alert_about_defaults_to_an_error_about_no_item(
    store: db.Store, now: datetime
) -> None:
    row_id = await store.write(
        outbox.alert_sync, payloads.Alert(about="claim_overrun", facts={"claim": 3}), now, key="o"
    )
    assert row_id is not None
    row = await store.read(outbox.get_sync, row_id)
    alert = payloads.Alert.from_json(row.payload)
    assert (row.item_id, alert.item_id, alert.level, alert.about) == (
        None,
        None,
        "error",
        "claim_overrun",
    )


async def test_a_claim_over_several_kinds_returns_every_row_it_took(
    store: db.Store, now: datetime
) -> None:
    cards = [await _queue(store, "card", n, now) for n in range(2)]
    alerts = [await _queue(store, "alert", n, now) for n in range(2)]
    taken = await outbox.claim_due(
        store, outbox.Claimant("a", LEASE), now, ["card", "alert"], limit=10
    )
    assert [row.id for row in taken] == sorted([*cards, *alerts])
    assert (
        await outbox.claim_due(store, outbox.Claimant("b", LEASE), now, ["card", "alert"], limit=10)
        == []
    )


async def test_a_claims_limit_holds_across_kinds_and_leaves_the_rest_to_others(
    store: db.Store, now: datetime
) -> None:
    cards = [await _queue(store, "card", n, now) for n in range(2)]
    alerts = [await _queue(store, "alert", n, now) for n in range(3)]
    first = await outbox.claim_due(
        store, outbox.Claimant("a", LEASE), now, ["card", "alert"], limit=3
    )
    # The kinds are taken in the order asked: both cards, then one alert.
    assert [row.id for row in first] == [*cards, alerts[0]]
    second = await outbox.claim_due(
        store, outbox.Claimant("b", LEASE), now, ["card", "alert"], limit=3
    )
    assert [row.id for row in second] == alerts[1:]


async def test_a_deferred_row_keeps_what_already_got_through(
    store: db.Store, now: datetime
) -> None:
    row_id = await outbox.enqueue(store, "dispatch", "news", {"n": 1}, now)
    assert row_id is not None
    later = now + timedelta(seconds=30)
    assert await outbox.defer(store, row_id, "flood wait", later, progress="part-1")
    row = await store.read(outbox.get_sync, row_id)
    assert (row.state, row.attempts, row.next_attempt_at, row.last_error, row.external_id) == (
        "pending",
        0,
        later,
        "flood wait",
        "part-1",
    )


async def test_queued_says_whether_a_key_holds_a_row_until_it_is_called_off(
    store: db.Store, now: datetime
) -> None:
    assert await outbox.queued(store, "k") is False
    await outbox.enqueue(store, "dispatch", "news", {"n": 1}, now, dedupe_key="k")
    assert await outbox.queued(store, "k") is True
    assert await store.write(outbox.cancel_sync, "k", "undone")
    assert await outbox.queued(store, "k") is False


async def test_one_unit_queueing_two_kinds_wakes_the_workers_of_both(
    store: db.Store, now: datetime
) -> None:
    cards, alerts = outbox.wakeup(store, ["card"]), outbox.wakeup(store, ["alert"])

    def unit(conn: backend.Conn) -> None:
        outbox.enqueue_sync(conn, "card", "operators", {"n": 1}, now)
        outbox.enqueue_sync(conn, "alert", "alerts", {"text": "x"}, now)

    await store.write(unit)
    assert cards.is_set() and alerts.is_set()


async def test_refusals_name_what_is_valid(store: db.Store, now: datetime) -> None:
    with pytest.raises(ValueError) as refused:
        await outbox.enqueue(store, "fax", "news", {}, now)  # type: ignore[arg-type]
    assert str(refused.value) == (
        "unknown outbox kind 'fax'; valid: card, card_edit, alert, dispatch"
    )
    with pytest.raises(errors.NotFound) as missing:
        await store.read(outbox.get_sync, 404)
    assert str(missing.value) == "no outbox row 404"


async def test_a_worker_on_a_shared_store_looks_for_others_rows_within_the_fallback(
    store: db.Store,
) -> None:
    # SQLite's one process hears every row it queues; a database server's workers
    # fall back to looking every SHARED_POLL_S in case a notification was lost.
    shared = store.dialect != "sqlite"
    assert outbox.longest_wait(store, 60.0) == (outbox.SHARED_POLL_S if shared else 60.0)
    assert outbox.longest_wait(store, 1.0) == 1.0


@pytest.mark.sqlite_only
async def test_a_payload_is_kept_as_readable_text(store: db.Store, now: datetime) -> None:
    row_id = await outbox.enqueue(store, "alert", "alerts", {"text": "café ☕"}, now)

    def stored(conn: backend.Conn) -> str:
        found: str = conn.execute("SELECT payload FROM outbox WHERE id = ?", (row_id,)).fetchone()[
            0
        ]
        return found

    # Not \\u escapes: an operator reading the table sees the words, and they take less room.
    assert "café ☕" in await store.read(stored)
