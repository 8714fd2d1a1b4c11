"""ledger.charge: spend made elsewhere (a dry run's drafts) counted against the budgets,
in one unit, once per key, refused whole when it no longer fits."""

from __future__ import annotations

from datetime import datetime

import pytest

from store import db, errors, ledger
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage
from tests import snapshot


async def test_a_charge_is_one_settled_claim_without_an_item_and_counted_once(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), "cli", now)
    claim = await ledger.charge(
        store, "dry-run:news:1", "news", ledger.Actual(3_000, "dry run", Usage(120, 40)), now
    )
    assert claim is not None
    assert (claim.state, claim.item_id, claim.actual_micros) == (ClaimState.SETTLED, None, 3_000)
    again = await ledger.charge(
        store, "dry-run:news:1", "news", ledger.Actual(3_000, "dry run", Usage(120, 40)), now
    )
    assert again is not None and again.id == claim.id
    [day] = (await ledger.report(store, now)).budgets
    assert (day.spent_micros, day.held_micros) == (3_000, 0)


async def test_a_charge_that_no_longer_fits_is_refused_and_writes_nothing(
    store: db.Store, now: datetime
) -> None:
    await ledger.set_budget(store, ledger.Limit("news", "day", 2_000), "cli", now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.BudgetExceeded):
        await ledger.charge(
            store, "dry-run:news:2", "news", ledger.Actual(2_001, "dry run", Usage(1, 1)), now
        )
    assert await snapshot.tables(store) == before


async def test_without_a_budget_nothing_is_counted(store: db.Store, now: datetime) -> None:
    charged = await ledger.charge(
        store, "dry-run:news:3", "news", ledger.Actual(10, "dry run", Usage(1, 1)), now
    )
    assert charged is None
