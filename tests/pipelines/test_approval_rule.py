"""The approval rule as a table: one vote, the rules and who wrote the version in, the
verdict out (pipelines.approval.rule is pure, so every row is a plain call)."""

from __future__ import annotations

from datetime import timedelta

import pytest

from pipelines.approval import rule
from pipelines.approval.quorum import Rules, Version
from pipelines.approval.rule import Ballot
from pipelines.config import spec
from store.items.machine import State

ONE = Rules(quorum=1)
TWO = Rules(quorum=2, four_eyes=True, approvers=(1, 2, 3))
TWO_OPEN = Rules(quorum=2, four_eyes=False, approvers=(1, 2, 3))
ESCALATES = Rules(quorum=2, four_eyes=True, approvers=(1, 2), escalate_to=(9,))
DRAFTER = Version()
BY_1 = Version(author=1)


def yes(voter: int, *approvals: int, **kw: object) -> Ballot:
    return Ballot("approve", voter, approvals or (voter,), **kw)  # type: ignore[arg-type]


def no(voter: int, *approvals: int, **kw: object) -> Ballot:
    return Ballot("reject", voter, approvals, **kw)  # type: ignore[arg-type]


# rules, ballot, version, the event's reason (its first word: the outcome and the state)
MOVES = [
    (ONE, yes(7), None, "approved by operator:7"),
    (ONE, yes(7, actor="cli:ana"), None, "approved by cli:ana"),
    (ONE, yes(0), None, "approved by operator:0"),
    (ONE, yes(0, actor="cli:ana"), None, "approved by cli:ana"),
    (TWO, yes(2, 1, 2), DRAFTER, "approved by operator:1, operator:2"),
    (TWO, yes(1, 0, 1), DRAFTER, "approved by the terminal, operator:1"),
    (TWO, yes(2, 2, 3), BY_1, "approved by operator:2, operator:3"),
    (TWO_OPEN, yes(1, 2, 1), BY_1, "approved by operator:2, operator:1"),
    (ONE, no(8), None, "rejected by operator:8"),
    (ONE, no(8, reason="too long"), None, "rejected by operator:8: too long"),
    (TWO, no(3, 1), DRAFTER, "rejected by operator:3"),
    (TWO, no(1, 2), BY_1, "rejected by operator:1"),  # four eyes bars approvals only
    (ONE, no(8, reason="x" * 400), None, "rejected by operator:8: " + "x" * 300),
    (ONE, no(8, actor="cli:bo", reason="dup"), None, "rejected by cli:bo: dup"),
]  # fmt: skip


@pytest.mark.parametrize(("rules", "ballot", "version", "reason"), MOVES)
def test_a_vote_that_decides_moves_the_item(
    rules: Rules, ballot: Ballot, version: Version | None, reason: str
) -> None:
    outcome = reason.split()[0]
    verdict = rule.judge(rules, ballot, version)
    assert (verdict.outcome, verdict.to, verdict.reason, verdict.reach) == (
        outcome, State(outcome), reason, None
    )  # fmt: skip
    assert not rule.asks_version(rules, ballot) or (rules.four_eyes and ballot.choice == "approve")


# rules, ballot, version, outcome, who may still approve (None: not asked), short
WAITS = [
    (TWO, yes(1), DRAFTER, "pending", (2, 3), False),
    (TWO, yes(2, 1, 2), DRAFTER, "approved", None, None),
    (TWO, yes(2), BY_1, "pending", (3,), False),
    (TWO, yes(1, cast=False), DRAFTER, "unchanged", (2, 3), False),  # a repeat
    (TWO, yes(1, cast=False, waiting=False), DRAFTER, "unchanged", (2, 3), False),  # decided
    (TWO, no(2, 1, cast=False, waiting=False), DRAFTER, "unchanged", (2, 3), False),
    (TWO, yes(1), None, "pending", None, None),  # a bare vote: who wrote it not asked
    (ONE, yes(7, cast=False), None, "unchanged", None, None),
    (Rules(quorum=3, four_eyes=True, approvers=(1, 2, 3)), yes(2), BY_1, "pending", (3,), True),
    (ESCALATES, yes(2), BY_1, "pending", (), True),
    (ESCALATES, yes(2), Version(author=1, escalated=True), "pending", (9,), False),
    (Rules(quorum=2), yes(5), DRAFTER, "pending", None, False),  # approvers not known: anyone
]  # fmt: skip


@pytest.mark.parametrize(("rules", "ballot", "version", "outcome", "waiting", "short"), WAITS)
def test_a_vote_that_leaves_the_item_waiting_says_who_may_still_approve(
    rules: Rules, ballot: Ballot, version: Version | None, outcome: str,
    waiting: tuple[int, ...] | None, short: bool | None,
) -> None:  # fmt: skip
    verdict = rule.judge(rules, ballot, version)
    assert verdict.outcome == outcome
    if outcome == "approved":
        return
    assert (verdict.to, verdict.reason) == (None, None)
    found = verdict.reach
    if version is None:
        assert found is None
        return
    assert found is not None
    assert (found.waiting, found.short, found.voted) == (waiting, short, ballot.approvals)


# rules, ballot, version: refused by four eyes
REFUSED = [
    (TWO, yes(1), BY_1),
    (TWO, yes(1, 2, 1), BY_1),  # even when it would meet the quorum
    (TWO, yes(1, cast=False), BY_1),  # a repeat by the author: still refused
    (Rules(quorum=1, four_eyes=True), yes(1), BY_1),
    (ESCALATES, yes(1), Version(author=1, escalated=True)),
]  # fmt: skip


@pytest.mark.parametrize(("rules", "ballot", "version"), REFUSED)
def test_four_eyes_refuses_the_author_of_the_version(
    rules: Rules, ballot: Ballot, version: Version
) -> None:
    assert rule.judge(rules, ballot, version) == rule.Verdict("refused")
    assert rule.asks_version(rules, ballot)


# rules, ballot, version: not refused
NOT_REFUSED = [
    (TWO_OPEN, yes(1), BY_1),  # four eyes off
    (TWO, yes(2), BY_1),  # someone else
    (TWO, yes(1), DRAFTER),  # a drafter wrote it
    (TWO, no(1), BY_1),  # a reject by the author
    (TWO, yes(1, cast=False, waiting=False), BY_1),  # decided already: nothing to refuse
    (TWO, yes(1), None),  # not asked (a bare vote)
]  # fmt: skip


@pytest.mark.parametrize(("rules", "ballot", "version"), NOT_REFUSED)
def test_four_eyes_lets_everyone_else_vote(rules: Rules, ballot: Ballot, version: Version) -> None:
    assert rule.judge(rules, ballot, version).outcome != "refused"


# rules, ballot, whether the verdict needs who wrote the version
ASKS = [
    (ONE, yes(7), False),
    (ONE, no(7), False),
    (TWO_OPEN, yes(1), True),  # pending: who may still approve
    (TWO_OPEN, yes(2, 1, 2), False),
    (TWO, yes(2, 1, 2), True),  # four eyes
    (TWO, no(2, 1), False),
    (ONE, yes(7, cast=False), True),  # a repeat waits
    (TWO, yes(7, cast=False, waiting=False), True),  # decided: the card's words still ask
]  # fmt: skip


@pytest.mark.parametrize(("rules", "ballot", "asks"), ASKS)
def test_who_wrote_the_version_is_asked_only_when_it_matters(
    rules: Rules, ballot: Ballot, asks: bool
) -> None:
    assert rule.asks_version(rules, ballot) is asks


def test_the_rules_of_a_pipeline_are_its_approval_config() -> None:
    config = spec.ApprovalConfig(
        operators=[1, 2], quorum=2, escalate_to=[9], escalate_after=timedelta(hours=1)
    )
    assert Rules.of(config) == Rules(2, True, (1, 2), (9,))
    assert Rules.of(spec.ApprovalConfig(quorum=2, separate_editor=False)).four_eyes is False
