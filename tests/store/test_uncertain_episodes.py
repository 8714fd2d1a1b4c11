"""Uncertain claims by the episode: one alert tells every claim one pass of claim
recovery finds (a stop that cut off several calls), and one transaction settles many,
chosen by pipeline and moment, through the operation the CLI and the bot share."""

from __future__ import annotations

import re
from datetime import datetime, timedelta
from typing import Any

import pytest

from bot.chat import alerts as bot_alerts
from pipelines import operations
from store import db, ledger, outbox
from store.audit import events
from store.ledger import uncertain
from tests.store.test_ledger import LEASE, OP, begin


async def cut_off(store: db.Store, now: datetime, *keys: str, **kw: Any) -> list[int]:
    """Claims whose calls started and whose process then stopped: uncertain at recovery."""
    ids = []
    for key in keys:
        work = await begin(store, now, key=key, **kw)
        await ledger.start_provider(store, work.id, now)
        ids.append(work.id)
    return ids


async def episode_alerts(store: db.Store, at: datetime) -> list[outbox.Row]:
    rows = await outbox.due(store, at, ["alert"])
    return [row for row in rows if row.payload.get("about") == "claims_uncertain"]


async def test_one_alert_tells_every_call_one_stop_cut_off(store: db.Store, now: datetime) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), OP, now)
    ids = await cut_off(store, now, "k1", "k2", "k3", worst=800)
    after = now + LEASE + timedelta(minutes=1)
    await ledger.recover(store, after)  # the restart's pass: all three become uncertain
    await ledger.recover(store, after)  # the next pass: nothing new to tell
    [alert] = await episode_alerts(store, after)
    assert alert.payload["facts"]["claim_ids"] == ids
    assert bot_alerts.row_text(alert) == (
        f"💸 3 calls were cut off (begun by {now:%Y-%m-%d %H:%M} UTC; news) · $0.0024 held: "
        f"lease expired at {(now + LEASE).isoformat()}. The provider may have charged them; "
        "its console says. Not charged settles them at $0, Charged at what each held (or: "
        "gatehouse reconcile-claim --uncertain --at zero|reserve --evidence TEXT); the items "
        "waiting behind them then go on by themselves."
    )
    # A later claim cut off is a new episode, told alone.
    [later] = await cut_off(store, after, "k4")
    await ledger.fail(store, later, "timed out after the request was sent", after)
    await ledger.recover(store, after)
    assert [a.payload["facts"]["claim_ids"] for a in await episode_alerts(store, after)] == [
        ids,
        [later],
    ]


async def test_many_settle_in_one_unit_chosen_by_pipeline_and_moment(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000_000), OP, now)
    news = await cut_off(store, now, "n1", "n2", worst=1_000)
    [sport] = await cut_off(store, now, "s1", worst=500, pipeline="sport")
    for claim_id in (*news, sport):
        await ledger.fail(store, claim_id, "cut off by the stop", now)
    [late] = await cut_off(store, now, "n3", worst=700)
    later = now + timedelta(minutes=5)
    await ledger.fail(store, late, "cut off by the stop", later)

    done = await operations.settle_uncertain(
        store, "reserve", "console: charged", OP, later, pipeline="news",
        before=now + timedelta(minutes=1),
    )  # fmt: skip
    assert [s.claim.id for s in done.settled] == news and done.micros == 2_000
    states = {c: (await ledger.get(store, c)).state for c in (*news, sport, late)}
    assert states == {news[0]: "settled", news[1]: "settled", sport: "uncertain", late: "uncertain"}
    [budget] = (await ledger.report(store, later)).budgets
    assert (budget.spent_micros, budget.held_micros) == (2_000, 1_200)

    done = await operations.settle_uncertain(
        store, "zero", "console: nothing", OP, later, claim_ids=[news[0], sport, late]
    )
    assert [s.claim.actual_micros for s in done.settled] == [0, 0]
    assert done.already == (news[0],)  # settled before: left as it was
    trail = await events.for_entity(store, "claim", str(sport))
    assert (trail[-1].to_state, trail[-1].actor) == ("settled", OP)


@pytest.mark.parametrize(
    ("at", "evidence", "said"),
    [("half", "x", "valid: zero (not charged), reserve (charged)"), ("zero", " ", "evidence")],
)
async def test_a_bad_settlement_is_refused_naming_what_is_valid(
    store: db.Store, now: datetime, at: str, evidence: str, said: str
) -> None:
    with pytest.raises(operations.Invalid, match=re.escape(said)):
        await operations.settle_uncertain(store, at, evidence, OP, now)
    assert uncertain.AT == ("zero", "reserve")
