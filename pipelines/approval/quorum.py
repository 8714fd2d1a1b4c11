"""Who may still approve the version a card shows, and whether they are enough.

    reach = quorum.of(pipeline.approval, author=1001, voted=(1002,), escalated=False)
    reach.short        # fewer people may approve this version than the quorum needs
    reach.waiting      # whom the card may say it waits for (never someone barred)
    quorum.reach(quorum.Rules(2, four_eyes=True, approvers=(1001, 1002)), quorum.Version(1001))
    quorum.shortfall(reach)   # "needs 2 approvals from people other than operator:1001; ..."

The one place that decides it, for the card, the vote (rule.judge) and `gatehouse check`. Four eyes
(`approval.separate_editor`, on by default from quorum 2): whoever wrote a version (an
edit) may not approve it. The people who may approve are the pipeline's approvers
(`approval.operators`, else every bot operator) and, once the item was escalated,
`escalate_to`. The terminal (`gatehouse approve`) is not counted as a person here.
Pure: no store, no clock.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from store.review import decisions

if TYPE_CHECKING:
    from pipelines.config import spec


@dataclass(frozen=True)
class Reach:
    quorum: int
    #: Who may approve the version (voted or not); None: not known (any bot operator).
    may: tuple[int, ...] | None
    #: Who may not approve it: its author under four eyes.
    barred: tuple[int, ...]
    #: Who approved it so far.
    voted: tuple[int, ...]
    #: Whether bringing in `escalate_to` now would add someone who may approve.
    can_escalate: bool

    @property
    def waiting(self) -> tuple[int, ...] | None:
        """Who may still approve and has not: the only people a card may wait for."""
        return None if self.may is None else tuple(o for o in self.may if o not in self.voted)

    @property
    def short(self) -> bool:
        """Fewer votes are possible than the quorum needs (so the item can only expire)."""
        if self.may is None:
            return False
        return len(set(self.may) | set(self.voted)) < self.quorum


@dataclass(frozen=True)
class Rules:
    """A pipeline's approval rule as plain values (`Rules.of(pipeline.approval)`)."""

    quorum: int = 1
    four_eyes: bool = False
    #: Who may approve; empty: not known (any bot operator).
    approvers: tuple[int, ...] = ()
    escalate_to: tuple[int, ...] = ()

    @classmethod
    def of(cls, config: spec.ApprovalConfig) -> Rules:
        return cls(
            config.quorum, config.four_eyes, tuple(config.approvers), tuple(config.escalate_to)
        )


@dataclass(frozen=True)
class Version:
    """Who wrote the version voted on, and whether its item was escalated."""

    #: The operator who wrote it (an edit); None: a drafter did.
    author: int | None = None
    escalated: bool = False


def reach(rules: Rules, version: Version, voted: Sequence[int] = ()) -> Reach:
    """Who may approve `version` under `rules`, `voted` having approved it so far;
    `rules.approvers` empty means not known (anyone may)."""
    author, escalate_to = version.author, rules.escalate_to
    barred = (author,) if rules.four_eyes and author is not None else ()
    people = [*rules.approvers, *(escalate_to if version.escalated else ())]
    able = tuple(dict.fromkeys(o for o in people if o not in barred))
    may = able if rules.approvers else None
    brought = [o for o in escalate_to if o not in barred and o not in (may or ())]
    return Reach(rules.quorum, may, barred, tuple(voted), bool(brought) and not version.escalated)


def of(
    rules: spec.ApprovalConfig,
    *,
    author: int | None = None,
    voted: Sequence[int] = (),
    escalated: bool = False,
) -> Reach:
    """The rule for one pipeline's version: `author` wrote it (None: a drafter did)."""
    return reach(Rules.of(rules), Version(author, escalated), voted)


def names(people: Sequence[int]) -> str:
    """People as events name them: "operator:1001, the terminal" (the bot shows names)."""
    return ", ".join(decisions.voter(o) for o in people)


def shortfall(found: Reach) -> str:
    """What a card says when too few may approve, in one sentence of what can be done:
    "needs 2 approvals from people other than operator:1001, but only operator:1002 may
    approve it: escalate it to bring in more approvers, or reject it"."""
    others = f" from people other than {names(found.barred)}" if found.barred else ""
    able = sorted(set(found.may or ()) | set(found.voted))
    who = f"but only {_listed(able)} may approve it" if able else "and no one else may approve it"
    if found.can_escalate:
        then = "escalate it to bring in more approvers, or reject it"
    else:
        then = "reject it, or it waits until its approval window passes"
    need = f"{found.quorum} approval" + ("s" if found.quorum != 1 else "")
    return f"needs {need}{others}, {who}: {then}"


def _listed(people: Sequence[int]) -> str:
    """ "operator:1", "operator:1 and operator:2", "operator:1, operator:2 and operator:3"."""
    said = [decisions.voter(o) for o in people]
    return said[0] if len(said) == 1 else f"{', '.join(said[:-1])} and {said[-1]}"


def after_any_edit(rules: spec.ApprovalConfig) -> str | None:
    """`gatehouse check`'s warning when an approver's edit leaves too few who may approve
    the edited version, even after escalation; None when every edit can be approved."""
    for author in rules.approvers:
        found = of(rules, author=author, escalated=True)
        if found.short:
            return (
                f"approval: quorum {rules.quorum} of {len(rules.approvers)} approvers with four "
                f"eyes on: after an edit only {len(found.may or ())} may approve the edited "
                "version (its author may not), so it waits until it expires; add an approver "
                "or escalate_to, lower the quorum, or set separate_editor: false"
            )
    return None
