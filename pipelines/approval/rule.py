"""What one vote decides: the approval rule, in one place.

    verdict = rule.judge(rules, rule.Ballot("approve", 1002, approvals=(1001, 1002)))
    verdict.outcome    # "approved": the quorum is met
    verdict.to         # State.APPROVED, where the vote moves the item (None: it stays)
    verdict.reach      # who may still approve, while the item waits (quorum.Reach)

One reject vetoes; `rules.quorum` approvals approve; fewer leave the item waiting. Four
eyes (`approval.separate_editor`): whoever wrote the version (an edit) may not approve
it, and the vote is refused. A repeat vote, or one on an item decided already, changes
nothing. Pure: the store records the vote and pipelines.approval.flow moves the item.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pipelines.approval import quorum
from pipelines.approval.quorum import Reach
from store.audit import events
from store.items import Item
from store.items.machine import State
from store.review import decisions, followups

#: decide's answer: approved/rejected: the vote moved the item; pending: a vote toward
#: the quorum was recorded; unchanged: a repeat, or the item was decided already.
Outcome = Literal["approved", "rejected", "pending", "unchanged"]
#: The longest reject reason kept (characters); a longer one is cut.
MAX_REASON = 300


@dataclass(frozen=True)
class Vote:
    """One operator's decision as asked: on the version a card showed, by whom, and what
    (`rule.Vote(followups.Shown(item_id, attempt, version), 1001, "approve")`)."""

    shown: followups.Shown
    operator_id: int
    choice: decisions.Choice
    #: A reject's reason, for its event and onto the card.
    reason: str | None = None
    #: Who the events name as deciding (default: the Telegram operator `operator_id`).
    actor: str | None = None
    #: An approval asked past the version's block tells ("Approve anyway"): audited.
    anyway: bool = False

    @property
    def who(self) -> str:
        return self.actor or events.operator(self.operator_id)


@dataclass(frozen=True)
class Ballot:
    """One vote and what the store answered to it."""

    choice: decisions.Choice
    voter: int
    #: Who approved the version so far, this vote included.
    approvals: tuple[int, ...]
    #: False: nothing was recorded (the voter had voted on this version already).
    cast: bool = True
    #: False: the item is not awaiting approval (decided already); nothing was recorded.
    waiting: bool = True
    #: Who the events name as deciding (default: the Telegram operator `voter`).
    actor: str | None = None
    #: A reject's reason, for its event.
    reason: str | None = None


@dataclass(frozen=True)
class Verdict:
    outcome: Outcome | Literal["refused"]
    #: Where the vote moves the item; None: it stays where it is.
    to: State | None = None
    #: The move's reason in its event: "approved by operator:1, operator:2".
    reason: str | None = None
    #: Who may still approve, while the item waits (None: the version was not asked for).
    reach: Reach | None = None


@dataclass(frozen=True)
class Decision:
    """A vote's answer: the item as the vote left it, and the votes it counted."""

    item: Item
    outcome: Outcome
    approvals: tuple[int, ...]
    quorum: int
    #: Who may still approve the version, when the item waits (pipelines.approval.flow).
    reach: Reach | None = None


def judge(rules: quorum.Rules, ballot: Ballot, version: quorum.Version | None = None) -> Verdict:
    """What `ballot` decides under `rules`; `version` None: who wrote it was not asked
    (no one is barred, and who may still approve is not known)."""
    if not ballot.waiting:
        return _waits(rules, ballot, version, "unchanged")
    if _barred(rules, ballot, version):
        return Verdict("refused")
    if not ballot.cast:
        return _waits(rules, ballot, version, "unchanged")
    actor = ballot.actor or events.operator(ballot.voter)
    if ballot.choice == "reject":
        said = f": {ballot.reason[:MAX_REASON]}" if ballot.reason else ""
        return Verdict("rejected", State.REJECTED, f"rejected by {actor}{said}")
    if len(ballot.approvals) >= rules.quorum:
        who = ", ".join(
            actor if o == ballot.voter else decisions.voter(o) for o in ballot.approvals
        )
        return Verdict("approved", State.APPROVED, f"approved by {who}")
    return _waits(rules, ballot, version, "pending")


def asks_version(rules: quorum.Rules, ballot: Ballot) -> bool:
    """Whether the verdict needs who wrote the version: four eyes on an approval, or who
    may still approve when the item goes on waiting."""
    if ballot.choice == "approve" and rules.four_eyes and ballot.waiting:
        return True
    return judge(rules, ballot).to is None


def _barred(rules: quorum.Rules, ballot: Ballot, version: quorum.Version | None) -> bool:
    """Four eyes: the author of the version may not approve it."""
    wrote = version is not None and version.author == ballot.voter
    return ballot.choice == "approve" and rules.four_eyes and wrote


def _waits(
    rules: quorum.Rules, ballot: Ballot, version: quorum.Version | None, outcome: Outcome
) -> Verdict:
    if version is None:
        return Verdict(outcome)
    return Verdict(outcome, reach=quorum.reach(rules, version, ballot.approvals))
