"""A vote through the approval rule on both backends: one refused by four eyes is
recorded and then rolled back with its unit, so nothing of it stays; one that counts
locks its item once, with four eyes on too."""

from __future__ import annotations

from datetime import datetime

import pytest

from pipelines.approval import flow, rule
from store import backend, db, drafts, errors, items
from store.items.machine import State
from store.review.followups import Shown
from tests import snapshot
from tests.pipelines import test_review
from tests.store import statements

ALICE, BOB = test_review.ALICE, test_review.BOB


async def _edited_by_alice(store: db.Store, now: datetime) -> items.Item:
    item = await test_review.awaiting(store, now)
    await store.write(
        drafts.edit_sync, drafts.Edit(item.id, 1, ALICE, "operator:11"), "Alice's words", now
    )
    return await items.get(store, item.id)


async def test_a_vote_refused_by_four_eyes_leaves_nothing(store: db.Store, now: datetime) -> None:
    p, item = test_review.pipeline(quorum=2), await _edited_by_alice(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(flow.WroteThisVersion):
        await flow.decide(
            store, p, rule.Vote(Shown(item.id, 1, item.version), ALICE, "approve"), now
        )
    assert await snapshot.tables(store) == before
    with pytest.raises(errors.Conflict):  # the refusal is a Conflict, as a stale card is
        await flow.decide(
            store, p, rule.Vote(Shown(item.id, 1, item.version), ALICE, "approve"), now
        )


async def test_a_four_eyes_vote_locks_its_item_once(store: db.Store, now: datetime) -> None:
    p, item = test_review.pipeline(quorum=2), await _edited_by_alice(store, now)

    def unit(conn: backend.Conn) -> tuple[rule.Decision, int]:
        counting = statements.Counting(conn)
        decided = flow.decide_sync(
            counting, rule.Vote(Shown(item.id, 1, item.version), BOB, "approve"), now, pipeline=p
        )
        return decided, counting.sent["items.lock"]

    decided, locks = await store.write(unit)
    assert (decided.outcome, decided.approvals, locks) == ("pending", (BOB,), 1)
    assert decided.reach is not None and decided.reach.barred == (ALICE,)
    assert (await items.get(store, item.id)).state == State.AWAITING_APPROVAL
