"""The words of the alerts the store records as facts (budgets, claims)."""

from __future__ import annotations

from bot.chat import alerts
from store import payloads


def fact(about: payloads.About, item_id: int | None = None, **facts: object) -> payloads.Alert:
    return payloads.Alert(about=about, facts=dict(facts), item_id=item_id)


def test_an_overrun_says_what_was_held_and_what_it_cost() -> None:
    said = alerts.text(fact("claim_overrun", claim_id=7, held_micros=1000, cost_micros=1250))
    assert said == (
        "Claim 7 cost $0.00125 (1250 micros), more than the 1000 micros held "
        "for its worst case: check the price table and max_tokens"
    )


def test_an_uncertain_claim_names_the_command_that_settles_it() -> None:
    said = alerts.text(
        fact("claim_uncertain", 12, claim_id=3, pipeline="news", reason="lease lapsed",
             held_micros=2_500_000)
    )  # fmt: skip
    assert said == (
        "💸 claim 3 (news, item 12) is uncertain: lease lapsed. Its hold of $2.50 stays "
        "until you reconcile it with the provider's figure: "
        "gatehouse reconcile-claim 3 <usd> <evidence>"
    )


def test_a_budget_threshold_says_spent_limit_and_held() -> None:
    said = alerts.text(
        fact("budget_threshold", budget="global/day from 2026-12-01", pct=80,
             spent_micros=8_000_000, limit_micros=10_000_000, held_micros=500_000)
    )  # fmt: skip
    assert said == (
        "Budget global/day from 2026-12-01: 80% reached — spent $8.00 of $10.00 ($0.50 held)"
    )


def test_words_come_through_and_incomplete_facts_still_show() -> None:
    assert alerts.text(payloads.Alert(text="run 3 failed")) == "run 3 failed"
    assert alerts.text(fact("claim_overrun", claim_id=7)) == "claim_overrun: {'claim_id': 7}"
