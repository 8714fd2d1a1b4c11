"""What a claim's life costs in statements (each a round trip to a PostgreSQL server): on
PostgreSQL, once the connection's slots have room, begin, start_provider and complete
are one statement each, and they write exactly what the statement-by-statement way
writes (the way SQLite always takes, and PostgreSQL when a slot needs room)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

import pytest

from store import backend, db, items, ledger
from store.ledger import claims, outputs
from store.ledger import settle as ledger_settle
from store.ledger.prices import Usage
from tests.store import statements
from tests.store.test_ledger_trail import alert_rows

ENDPOINT = "llm.draft"
LEASE = timedelta(minutes=10)
WORST = 1_000
CHAINED = ("claims.begin", "claims.start", "ledger_settle.complete")
REPLY = outputs.Reply("a draft", "m", "req-1", None)


class StepByStep(statements.Counting):
    """A connection on which no statement chains writes: the statement-by-statement way."""

    dialect = None


def _life(
    conn: backend.Conn, key: str, item: items.Item, actual: int, now: datetime
) -> tuple[list[dict[str, int]], ledger_settle.Settlement]:
    """A claim begun, started and completed with its reply, each step's statements counted
    (the evidence and the reply alike for every key, so that two lives compare)."""
    counted = conn if isinstance(conn, statements.Counting) else statements.Counting(conn)
    sent = []
    work = claims.begin_sync(
        counted, claims.Call(key, ENDPOINT, {}, WORST, "news", item.id, LEASE), now
    )
    assert (work.replayed, work.state, work.reserved_micros) == (False, "reserved", WORST)
    sent.append(dict(counted.sent))
    counted.sent.clear()
    claims.start_provider_sync(counted, work.id, now)
    sent.append(dict(counted.sent))
    counted.sent.clear()
    settled = ledger_settle.complete_sync(
        counted,
        work.id,
        ledger_settle.Actual(actual, "request req-1", Usage(10, 20)),
        item.content_hash,
        now,
        REPLY,
    )
    sent.append(dict(counted.sent))
    return sent, settled


async def _item(store: db.Store, source_id: str, now: datetime) -> items.Item:
    made = await store.write(items.create_sync, "news", "feed", source_id, {"t": source_id}, now)
    assert made is not None
    return made


async def _written(store: db.Store, claim_id: int) -> dict[str, Any]:
    """Everything a claim's life wrote that says what happened, without ids and keys."""

    def read(conn: backend.Conn) -> dict[str, Any]:
        claim = claims.get_sync(conn, claim_id)
        found = conn.execute(
            "SELECT from_state, to_state, actor, attempt, reason, at FROM events"
            " WHERE entity = 'claim' AND entity_id = :id ORDER BY id",
            {"id": str(claim_id)},
        ).fetchall()
        holds = conn.execute(
            "SELECT scope, period, period_start, micros FROM claim_holds"
            " WHERE claim_id = :id ORDER BY scope, period",
            {"id": claim_id},
        ).fetchall()
        kept = outputs.get_sync(conn, claim_id)
        return {
            "claim": (
                claim.state,
                claim.provider_allowed,
                claim.reserved_micros,
                claim.actual_micros,
                claim.lease_until,
                claim.evidence,
                claim.usage,
                claim.reason,
                claim.created_at,
                claim.started_at,
                claim.ended_at,
            ),
            "events": [tuple(row) for row in found],
            "holds": [tuple(row) for row in holds],
            "output": kept and (kept.text, kept.model, kept.request_id, kept.error),
        }

    return await store.read(read)


async def _spent(store: db.Store) -> list[tuple[str, str, int, int]]:
    rows = await store.read(
        lambda c: c.execute(
            "SELECT scope, period, sum(spent_micros), sum(held_micros) FROM budget_slots"
            " GROUP BY scope, period ORDER BY scope, period"
        ).fetchall()
    )
    return [(r[0], r[1], int(r[2]), int(r[3])) for r in rows]


async def _budgets(store: db.Store, limit: int, now: datetime) -> None:
    for scope, period in (("news", "day"), ("global", "month")):
        await ledger.set_budget(store, ledger.Limit(scope, period, limit), "cli", now)


@pytest.mark.parametrize("actual", [900, 1_600], ids=["within", "overrun"])
async def test_a_claim_s_life_is_three_statements_and_writes_what_step_by_step_writes(
    store: db.Store, dialect: str, now: datetime, actual: int
) -> None:
    # A grant is an eighth of what is left: room for two holds in the first grant.
    await _budgets(store, 20_000, now)
    first, second = await _item(store, "a", now), await _item(store, "b", now)

    def both(conn: backend.Conn) -> tuple[list[dict[str, int]], list[dict[str, int]], int, int]:
        # One unit, one connection: the first life grants this connection's slots room.
        stepwise, done = _life(StepByStep(conn), "a", first, actual, now)
        chained, again = _life(conn, "b", second, actual, now)
        return stepwise, chained, done.claim.id, again.claim.id

    stepwise, chained, a, b = await store.write(both)
    if dialect == "postgres":
        settled = {"ledger_settle.complete": 1}
        if actual > WORST:  # an overrun (a pricing bug) grants it in each row, and alerts
            settled |= {"budgets.claim_holds": 1, "budget_slots.add_granted": 2}
            settled |= {"outbox.enqueue": 1}
        assert chained == [{"claims.begin": 1}, {"claims.start": 1}, settled]
    else:  # SQLite cannot chain writes: it never sends those statements
        assert not any(name in sent for sent in chained for name in CHAINED)
    assert not any(name in sent for sent in stepwise for name in CHAINED)
    written = await _written(store, b)
    assert written == await _written(store, a)
    assert written["output"] == ("a draft", "m", "req-1", None)
    assert len(written["events"]) == 3 and len(written["holds"]) == 2
    assert await _spent(store) == [
        ("global", "month", 2 * actual, 0),
        ("news", "day", 2 * actual, 0),
    ]


async def test_a_settlement_in_one_statement_alerts_the_thresholds_its_own_spend_crossed(
    store: db.Store, now: datetime
) -> None:
    """The statement cannot see its own writes: it counts the spend it settles itself."""
    await _budgets(store, 16_000, now)
    first, second = await _item(store, "a", now), await _item(store, "b", now)

    def unit(conn: backend.Conn) -> ledger_settle.Settlement:
        _life(conn, "a", first, 900, now)  # 900 of 16,000: no threshold
        return _life(conn, "b", second, 7_600, now)[1]  # 8,500: past 50 %, an overrun

    settled = await store.write(unit)
    assert settled.overrun_micros == 6_600
    crossed = [
        (
            alert["facts"]["budget"].split(" ")[0],
            alert["facts"]["pct"],
            alert["facts"]["spent_micros"],
            alert["facts"]["held_micros"],
        )
        for _, _, alert in await alert_rows(store)
        if alert["about"] == "budget_threshold"
    ]
    assert crossed == [("news/day", 50, 8_500, 0), ("global/month", 50, 8_500, 0)]


async def test_a_claim_with_no_budget_begins_in_one_statement_as_step_by_step_begins_it(
    store: db.Store, dialect: str, now: datetime
) -> None:
    first, second = await _item(store, "a", now), await _item(store, "b", now)

    def both(conn: backend.Conn) -> tuple[claims.Work, claims.Work, dict[str, int]]:
        stepwise = claims.begin_sync(
            StepByStep(conn), claims.Call("a", ENDPOINT, {}, WORST, "news", first.id, LEASE), now
        )
        counted = statements.Counting(conn)
        chained = claims.begin_sync(
            counted, claims.Call("b", ENDPOINT, {}, WORST, "news", second.id, LEASE), now
        )
        return stepwise, chained, dict(counted.sent)

    stepwise, chained, sent = await store.write(both)
    assert (chained.replayed, chained.state, chained.provider_allowed) == (
        False, "unbudgeted", False,
    )  # fmt: skip
    if dialect == "postgres":
        assert sent == {"claims.begin": 1}
    written = await _written(store, chained.id)
    assert written == await _written(store, stepwise.id)
    assert (
        written["events"][0][4] == "no budget configured for 'news' or global: provider not allowed"
    )
