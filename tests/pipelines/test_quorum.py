"""Who may still approve a version: the one rule the card, the vote and `check` share."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest

from pipelines.approval import flow, quorum, rule
from pipelines.service import nudges
from store import db, outbox, payloads
from store.review.followups import Shown
from tests.pipelines import test_review
from tests.pipelines.test_review import pipeline

A, B, C, X = 1, 2, 3, 9

# approvers, quorum, four eyes, author, voted, escalate_to, escalated
# -> who may approve, who is awaited, short, can escalate
TABLE: list[tuple[Any, ...]] = [
    # A drafter's version: everyone listed may approve it.
    ((A, B), 2, True, None, (), (), False, (A, B), (A, B), False, False),
    # A edits a 2-of-2: only B may approve; the item is short and never awaits A.
    ((A, B), 2, True, A, (), (), False, (B,), (B,), True, False),
    ((A, B), 2, True, A, (B,), (), False, (B,), (), True, False),
    # Four eyes off: the author may approve their own version.
    ((A, B), 2, False, A, (), (), False, (A, B), (A, B), False, False),
    # Three for quorum 2: an edit leaves two, enough.
    ((A, B, C), 2, True, A, (), (), False, (B, C), (B, C), False, False),
    ((A, B, C), 3, True, B, (A,), (), False, (A, C), (C,), True, False),
    # escalate_to would help until it is brought in; then it may approve.
    ((A, B), 2, True, A, (B,), (X,), False, (B,), (), True, True),
    ((A, B), 2, True, A, (B,), (X,), True, (B, X), (X,), False, False),
    # Escalating to the author alone helps no one.
    ((A, B), 2, True, A, (), (A,), False, (B,), (B,), True, False),
    # A vote from the terminal (0) counts toward the quorum, though it is no person.
    ((A, B), 2, True, A, (0,), (), False, (B,), (B,), False, False),
    # Approvers not known (no operators configured): anyone may, never short.
    ((), 2, True, A, (), (), False, None, None, False, False),
]


@pytest.mark.parametrize(
    ("approvers", "need", "four_eyes", "author", "voted", "escalate_to", "escalated",
     "may", "waiting", "short", "can_escalate"),
    TABLE,
)  # fmt: skip
def test_who_may_approve_a_version(
    approvers: tuple[int, ...], need: int, four_eyes: bool, author: int | None,
    voted: tuple[int, ...], escalate_to: tuple[int, ...], escalated: bool,
    may: tuple[int, ...] | None, waiting: tuple[int, ...] | None, short: bool, can_escalate: bool,
) -> None:  # fmt: skip
    rules = quorum.Rules(need, four_eyes, approvers, escalate_to)
    found = quorum.reach(rules, quorum.Version(author, escalated), voted)
    got = (found.may, found.waiting, found.short, found.can_escalate)
    assert got == (may, waiting, short, can_escalate)
    if author is not None and four_eyes:
        assert author not in (found.waiting or ())


def test_the_card_says_plainly_who_can_and_what_helps() -> None:
    stuck = quorum.reach(quorum.Rules(2, True, (A, B), (X,)), quorum.Version(A))
    assert quorum.shortfall(stuck) == (
        "needs 2 approvals from people other than operator:1, but only operator:2 may approve"
        " it: escalate it to bring in more approvers, or reject it"
    )
    alone = quorum.reach(quorum.Rules(1, True, (A,)), quorum.Version(A))
    assert quorum.shortfall(alone) == (
        "needs 1 approval from people other than operator:1, and no one else may approve it:"
        " reject it, or it waits until its approval window passes"
    )


def test_several_who_may_approve_are_listed_in_the_sentence() -> None:
    stuck = quorum.reach(quorum.Rules(4, True, (A, B, C, X)), quorum.Version(A))
    assert quorum.shortfall(stuck) == (
        f"needs 4 approvals from people other than operator:1, but only operator:2,"
        f" operator:{C} and operator:{X} may approve it: reject it, or it waits until its"
        " approval window passes"
    )


def test_check_warns_when_any_edit_leaves_too_few_to_approve() -> None:
    warned = quorum.after_any_edit(pipeline(quorum=2, operators=[A, B]).approval)
    assert warned is not None and "after an edit only 1 may approve" in warned
    assert "separate_editor: false" in warned
    fine: list[dict[str, Any]] = [
        {"quorum": 2, "operators": [A, B, C]},
        {"quorum": 2, "operators": [A, B], "separate_editor": False},
        {"quorum": 2, "operators": [A, B], "escalate_to": [X], "escalate_after": "1h"},
        {"quorum": 1, "operators": [A]},  # four eyes is off at quorum 1
    ]
    for rules in fine:
        assert quorum.after_any_edit(pipeline(**rules).approval) is None, rules


async def test_after_an_edit_the_card_says_who_can_and_never_waits_for_its_author(
    store: db.Store, now: datetime
) -> None:
    alice, bob = test_review.ALICE, test_review.BOB
    p, item = pipeline(quorum=2, operators=[alice, bob]), await test_review.awaiting(store, now)
    await flow.edit(store, p, flow.Revision(item.id, 1, alice), "Alice's words", now)
    card = payloads.Card.of((await outbox.for_item(store, item.id, "card"))[-1])
    stuck = (
        f"needs 2 approvals from people other than operator:{alice}, but only operator:{bob}"
        " may approve it: reject it, or it waits until its approval window passes"
    )
    assert (card.version, card.short_of, card.buttons) == (2, stuck, "")
    vote = await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 2), bob, "approve"), now)
    assert flow.vote_words(vote, p, bob) == f"your vote is in: 1 of 2 ({stuck})"
    edits = [payloads.CardEdit.of(r) for r in await outbox.for_item(store, item.id, "card_edit")]
    assert [e.status for e in edits if e.version == 2] == [f"✅ operator:{bob} · {stuck}"]
    with pytest.raises(flow.WroteThisVersion, match="you wrote version 2"):
        await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 2), alice, "approve"), now)
    # With someone to bring in, the card offers Escalate; once brought in, they may approve.
    helped = pipeline(
        quorum=2, operators=[alice, bob], escalate_to=[test_review.CAROL], escalate_after="1h"
    )
    other = await test_review.awaiting(store, now, "g2")
    await flow.edit(store, helped, flow.Revision(other.id, 1, alice), "mine", now)
    offered = payloads.Card.of((await outbox.for_item(store, other.id, "card"))[-1])
    assert offered.buttons == payloads.ESCALATE_BUTTONS
    assert offered.short_of is not None and offered.short_of.endswith(
        "escalate it to bring in more approvers, or reject it"
    )
    assert await nudges.escalate(store, helped, Shown(other.id, 1, 1), bob, now)
    assert not await nudges.escalate(store, helped, Shown(other.id, 1, 1), bob, now)
    await flow.decide(store, helped, rule.Vote(Shown(other.id, 1, 2), bob, "approve"), now)
    carol = await flow.decide(
        store, helped, rule.Vote(Shown(other.id, 1, 2), test_review.CAROL, "approve"), now
    )
    assert carol.outcome == "approved"


async def test_at_load_a_waiting_card_too_few_may_approve_says_so_once(
    store: db.Store, now: datetime
) -> None:
    alice, bob, carol = test_review.ALICE, test_review.BOB, test_review.CAROL
    three = pipeline(quorum=2, operators=[alice, bob, carol])
    item = await test_review.awaiting(store, now)
    untouched = await test_review.awaiting(store, now, "g2")
    await flow.edit(store, three, flow.Revision(item.id, 1, alice), "Alice's words", now)
    assert await flow.recheck(store, {"news": three}, now) == 0
    # Carol leaves the approvers: only Bob may approve Alice's version now.
    two = pipeline(quorum=2, operators=[alice, bob])
    assert await flow.recheck(store, {"news": two}, now) == 1
    assert await flow.recheck(store, {"news": two}, now) == 0  # said once
    edits = [payloads.CardEdit.of(r) for r in await outbox.for_item(store, item.id, "card_edit")]
    assert [e.status for e in edits if e.version == 2] == [
        f"⚠️ needs 2 approvals from people other than operator:{alice}, but only operator:{bob}"
        " may approve it: reject it, or it waits until its approval window passes"
    ]
    assert await outbox.for_item(store, untouched.id, "card_edit") == []
