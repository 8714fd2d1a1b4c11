"""The ledger's trail and its words: each claim step's event says who moved it and why,
alerts name their claim and item once, budget periods are UTC whatever the server's
time zone, and every refusal says what was wrong and what is valid."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest

from store import clock, db, errors, items, ledger
from store.audit import events
from store.ledger import budgets, claims
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage
from tests.store.test_ledger import LEASE, OP, begin


async def trail(store: db.Store, claim_id: int) -> list[tuple[str | None, str, str, str | None]]:
    found = await events.for_entity(store, "claim", claim_id)
    return [(e.from_state, e.to_state, e.actor, e.reason) for e in found]


async def alert_rows(store: db.Store) -> list[tuple[int | None, str | None, dict[str, Any]]]:
    rows = await store.read(
        lambda c: c.execute(
            "SELECT item_id, dedupe_key, payload FROM outbox WHERE kind = 'alert' ORDER BY id"
        ).fetchall()
    )
    return [(row[0], row[1], json.loads(row[2])) for row in rows]


async def test_each_step_of_a_claim_is_an_event_that_says_why(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    await ledger.set_budget(store, ledger.Limit("news", "month", 10_000), OP, now)
    work = await begin(store, now)
    started = now + timedelta(seconds=1)
    await ledger.start_provider(store, work.id, started)
    assert await trail(store, work.id) == [
        (None, "reserved", "system", "holds 1000 micros in news/month, global/day"),
        ("reserved", "started", "system", "provider call authorized"),
    ]
    claim = await ledger.get(store, work.id)
    assert (claim.created_at, claim.started_at, claim.ended_at) == (now, started, None)

    ended = now + timedelta(seconds=2)
    await ledger.fail(store, work.id, "", ended)  # no reason given: the trail still says one
    claim = await ledger.get(store, work.id)
    assert (claim.state, claim.ended_at) == (ClaimState.UNCERTAIN, None)
    assert (await trail(store, work.id))[-1] == ("started", "uncertain", "system", "failed")


async def test_a_renewed_lease_and_a_swept_one_are_in_the_trail(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    work = await begin(store, now)
    later = now + timedelta(minutes=5)
    renewed = await store.write(claims.renew_sync, work.id, later, LEASE)
    assert renewed.lease_until == later + LEASE
    swept_at = later + LEASE + timedelta(seconds=1)
    [swept] = await ledger.recover(store, swept_at)
    assert swept.state == ClaimState.RELEASED
    assert (await trail(store, work.id))[1:] == [
        (
            "reserved",
            "reserved",
            "system",
            f"lease renewed until {(later + LEASE).isoformat()} to resume the draft",
        ),
        ("reserved", "released", "sweep", f"lease expired at {(later + LEASE).isoformat()}"),
    ]


async def test_work_without_a_budget_says_so_and_never_reaches_the_provider(
    store: db.Store, now: datetime
) -> None:
    work = await begin(store, now)
    assert (await trail(store, work.id)) == [
        (
            None,
            "unbudgeted",
            "system",
            "no budget configured for 'news' or global: provider not allowed",
        )
    ]
    with pytest.raises(errors.IllegalTransition) as refused:
        await ledger.start_provider(store, work.id, now)
    assert str(refused.value) == (
        f"claim {work.id} has no budget configured; the provider is not allowed "
        "(use the deterministic drafter)"
    )


async def test_a_lapsed_lease_authorizes_nothing_and_says_what_happens_next(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    work = await begin(store, now)
    with pytest.raises(errors.LeaseExpired) as refused:
        await ledger.start_provider(store, work.id, now + LEASE)
    assert str(refused.value) == (
        f"claim {work.id}'s lease expired at {(now + LEASE).isoformat()}; "
        "the provider call is not authorized (recover() will release the hold)"
    )


async def test_an_uncertain_claim_alerts_once_naming_its_item(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), OP, now)
    item = await store.write(items.create_sync, "news", "feed", "g1", {"title": "t"}, now)
    assert item is not None
    work = await begin(store, now, item_id=item.id)
    await ledger.start_provider(store, work.id, now)
    await ledger.fail(store, work.id, "timed out", now)
    await ledger.fail(store, work.id, "timed out again", now)  # uncertain stays: no change
    assert await alert_rows(store) == []  # told with its episode, by claim recovery
    await ledger.recover(store, now)
    await ledger.recover(store, now)  # named already: no second alert
    [(item_id, key, payload)] = await alert_rows(store)
    assert (item_id, key, payload["about"]) == (
        None,
        f"claims-uncertain:{work.id}:{clock.to_ms(now)}",
        "claims_uncertain",
    )
    assert payload["facts"] == {
        "claim_ids": [work.id],
        "pipelines": ["news"],
        "items": 1,
        "reason": "timed out",
        "held_micros": 1_000,
        "first_started": clock.to_ms(now),
        "last_started": clock.to_ms(now),
    }


async def test_a_limit_is_an_event_in_dollars_and_micros(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("news", "month", 2_500_000), OP, now)
    found = await events.for_entity(store, "budget", "news/month")
    assert [(e.from_state, e.to_state, e.reason) for e in found] == [
        (None, "limit:2500000", "month limit $2.50 (2500000 micros)")
    ]


async def test_a_threshold_alerts_when_spend_crosses_it_once_per_period(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 2_000), OP, now)

    async def spend(key: str, micros: int) -> list[int]:
        work = await begin(store, now, key=key, worst=micros)
        await ledger.start_provider(store, work.id, now)
        await ledger.complete(store, work.id, ledger.Actual(micros, key, Usage(1, 1)), None, now)
        return [p["facts"]["pct"] for _, _, p in await alert_rows(store)]

    assert await spend("a", 900) == []  # 45%
    # A lower limit puts spend at 90% without new spend: no line was crossed by spend.
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000), OP, now)
    assert await spend("b", 10) == []  # 91%
    assert await spend("c", 90) == [100]
    # A higher limit: its lines are crossed again, but each share alerts once a period.
    await ledger.set_budget(store, ledger.Limit("global", "day", 4_000), OP, now)  # 25%
    assert await spend("d", 1_000) == [100, 50]
    assert await spend("e", 2_000) == [100, 50, 80]  # 100% again: already said today


async def test_a_refused_limit_writes_nothing(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000), OP, now)
    await begin(store, now, worst=600)
    with pytest.raises(errors.Conflict) as refused:
        await ledger.set_budget(store, ledger.Limit("global", "day", 599), OP, now)
    assert str(refused.value) == (
        f"global/day from {now:%Y-%m-%d} already has 0 micros spent and 600 held; "
        "the limit must be at least 600 micros"
    )
    [row] = (await ledger.report(store, now)).budgets
    assert row.limit_micros == 1_000
    assert len(await events.for_entity(store, "budget", "global/day")) == 1


@pytest.fixture
def server_in_new_york() -> Iterator[None]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("TZ", "America/New_York")
        time.tzset()
        yield
    time.tzset()


@pytest.mark.usefixtures("server_in_new_york")
def test_periods_are_utc_days_and_months_whatever_the_servers_zone() -> None:
    # 02:30:15.5 on the 3rd in UTC is still the 2nd in New York (and in +05:00, 07:30).
    at = datetime(2026, 12, 3, 2, 30, 15, 500_000, tzinfo=UTC)
    for now in (at, at.astimezone(timezone(timedelta(hours=5)))):
        assert budgets.period_start("day", now) == datetime(2026, 12, 3, tzinfo=UTC)
        assert budgets.period_start("month", now) == datetime(2026, 12, 1, tzinfo=UTC)
    with pytest.raises(ValueError) as refused:
        budgets.period_start("week", at)  # type: ignore[arg-type]
    assert str(refused.value) == "unknown budget period 'week'; valid: day, month"


async def test_this_months_row_counts_the_spend_of_earlier_days(
    store: db.Store, now: datetime
) -> None:
    earlier = now - timedelta(days=3)
    await ledger.set_budget(store, ledger.Limit("news", "month", 10_000), OP, earlier)
    work = await begin(store, earlier, worst=700)
    await ledger.start_provider(store, work.id, earlier)
    await ledger.complete(store, work.id, ledger.Actual(700, "req", Usage(1, 1)), None, earlier)
    [month] = (await ledger.report(store, now)).budgets
    assert (month.period_start, month.spent_micros) == (now.replace(day=1, hour=0), 700)


async def test_refusals_name_what_is_valid(store: db.Store, now: datetime) -> None:
    with pytest.raises(ValueError) as bad_scope:
        await ledger.set_budget(store, ledger.Limit("news feed", "day", 1), OP, now)
    assert str(bad_scope.value) == (
        "invalid budget scope 'news feed'; valid: 'global' or a pipeline name "
        "(letters, digits, _ . : -, at most 100 characters)"
    )
    with pytest.raises(ValueError) as no_key:
        await ledger.begin(store, ledger.Call("", "llm.draft", {}, 1, "news", None, LEASE), now)
    assert str(no_key.value) == "an idempotency key and an endpoint are both required"
    with pytest.raises(ValueError) as no_endpoint:
        await ledger.begin(store, ledger.Call("k", "", {}, 1, "news", None, LEASE), now)
    assert str(no_endpoint.value) == str(no_key.value)
    with pytest.raises(ValueError) as global_pipeline:
        await ledger.begin(store, ledger.Call("k", "llm.draft", {}, 1, "global", None, LEASE), now)
    assert str(global_pipeline.value) == (
        "'global' is the budget scope of all pipelines, not a pipeline name"
    )
    with pytest.raises(ValueError) as fraction:
        await ledger.begin(store, ledger.Call("k", "llm.draft", {}, 1.5, "news", None, LEASE), now)  # type: ignore[arg-type]
    assert str(fraction.value) == "worst_case_micros must be a whole number of micros >= 0, got 1.5"
    with pytest.raises(ValueError) as batch:
        await ledger.recover(store, now, batch=0)
    assert str(batch.value) == "batch must be at least 1, got 0"
    for missing in (ledger.get(store, 404), ledger.start_provider(store, 404, now)):
        with pytest.raises(errors.NotFound) as unknown:
            await missing
        assert str(unknown.value) == "no budget claim 404"
