"""The item state machine, declared once.

    new ──► drafting ──► awaiting_approval ──► approved ──► dispatching ──► dispatched
     │          │               │    │                          │
     └──────────┴─► failed      │    └─► rejected / expired     └─► failed
                │               │
                └─► breach ◄────┘ (drafting, dispatching: stuck past the SLA)

    new ──► filtered (the pipeline's filter dropped it: the event names the rule)
    drafting ──► skipped (the pipeline's triage scored it below its threshold: the event
                          gives the score and the model's reason)

    dropped (rejected, expired, failed, breach, filtered, skipped) ──replay──► new (attempt + 1)
    dispatched ──replay(force)──► new

States carry `#:` comments; TRANSITIONS is the one table of allowed moves. The
SQL CHECK on items.state is written in the migrations; `check_constraint()` builds
it from STATES, and tests/store/test_machine.py fails if the migration's text
differs from that. A new dropped state (a triage's `skipped`, say) is one member here,
its move in TRANSITIONS, its place in TERMINAL and DROPPED, and a migration that
widens the CHECK.

Where the states differ from the plain life of an item, and why:
- awaiting_approval past its window becomes `expired` (the approval window
  passed), not `breach`: an operator not answering is a different story from
  work stuck inside gatehouse, and /replay should say which.
- `approved` and `dispatching` may fail (dispatch error after retries).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import timedelta
from enum import StrEnum
from typing import TypeVar

E = TypeVar("E", bound=StrEnum)


class State(StrEnum):
    NEW = "new"  #: fetched and recorded; waiting for its draft
    DRAFTING = "drafting"  #: a drafter is working on it (transient)
    AWAITING_APPROVAL = "awaiting_approval"  #: a card waits for operators (transient)
    APPROVED = "approved"  #: operators approved this draft version; dispatch is queued
    DISPATCHING = "dispatching"  #: the dispatcher is delivering it (transient)
    DISPATCHED = "dispatched"  #: delivered; terminal (replay only with force)
    REJECTED = "rejected"  #: an operator rejected it; dropped
    EXPIRED = "expired"  #: nobody decided within the approval window; dropped
    FAILED = "failed"  #: drafting or dispatch failed for good; dropped
    BREACH = "breach"  #: stuck in a transient state past its SLA; dropped
    FILTERED = "filtered"  #: the pipeline's filter dropped it, never drafted; dropped
    SKIPPED = "skipped"  #: the pipeline's triage scored it below its threshold; dropped


S = State

STATES: tuple[State, ...] = tuple(State)

TRANSITIONS: dict[State, frozenset[State]] = {
    S.NEW: frozenset({S.DRAFTING, S.FAILED, S.FILTERED}),
    S.DRAFTING: frozenset({S.AWAITING_APPROVAL, S.FAILED, S.BREACH, S.SKIPPED}),
    S.AWAITING_APPROVAL: frozenset({S.APPROVED, S.REJECTED, S.EXPIRED, S.FAILED}),
    S.APPROVED: frozenset({S.DISPATCHING, S.FAILED}),
    S.DISPATCHING: frozenset({S.DISPATCHED, S.FAILED, S.BREACH}),
    S.DISPATCHED: frozenset(),
    S.REJECTED: frozenset(),
    S.EXPIRED: frozenset(),
    S.FAILED: frozenset(),
    S.BREACH: frozenset(),
    S.FILTERED: frozenset(),
    S.SKIPPED: frozenset(),
}

#: End states: a repeat of the same state is silently accepted; only replay leaves them.
TERMINAL: frozenset[State] = frozenset(
    {S.DISPATCHED, S.REJECTED, S.EXPIRED, S.FAILED, S.BREACH, S.FILTERED, S.SKIPPED}
)

#: Dropped states: what /replay brings back without force.
DROPPED: frozenset[State] = frozenset(
    {S.REJECTED, S.EXPIRED, S.FAILED, S.BREACH, S.FILTERED, S.SKIPPED}
)

#: Decisions an operator may take back within the pipeline's undo window: back to
#: awaiting_approval, same attempt and version. Outside TRANSITIONS, as replay is, so
#: rejected stays an end state for everything else.
UNDOABLE: frozenset[State] = frozenset({S.APPROVED, S.REJECTED})

#: Transient states and their default deadlines (awaiting_approval: per pipeline).
DEADLINES: dict[State, timedelta] = {
    S.DRAFTING: timedelta(minutes=15),
    S.AWAITING_APPROVAL: timedelta(hours=24),
    S.DISPATCHING: timedelta(minutes=15),
}

#: Where the SLA sweep moves an item whose deadline passed.
ON_DEADLINE: dict[State, State] = {
    S.DRAFTING: S.BREACH,
    S.AWAITING_APPROVAL: S.EXPIRED,
    S.DISPATCHING: S.BREACH,
}

#: Share of a deadline after which one warning alert is queued.
WARN_AT = 0.8
#: ...or earlier, so that it comes at least this long before the deadline: a short
#: window's warning at 80 % would leave seconds, too few for a person to read and act.
#: 40 s leaves 30 s to act after a sweep's pass and the message's delivery.
WARN_LEAD = timedelta(seconds=40)

#: Minimum time between automatic entries into the same state by one item, so a
#: crash loop cannot write an event storm; operator actions are not floored.
FLOOR = timedelta(seconds=5)


def allowed(source: State, target: State) -> bool:
    return target in TRANSITIONS[source]


def check_constraint(column: str = "state") -> str:
    """The CHECK clause that the items table must carry, built from STATES."""
    listed = ", ".join(f"'{state.value}'" for state in STATES)
    return f"CHECK ({column} IN ({listed}))"


def check_tables(
    states: type[E],
    transitions: Mapping[E, frozenset[E]],
    terminal: frozenset[E],
    timed: frozenset[E],
    outcomes: Mapping[E, E],
) -> None:
    """Raise ValueError naming every flaw in a state machine's tables; `outcomes` says
    where each `timed` state goes when its time is up (a deadline, a lease). Each machine
    runs it on its own tables at import: a state added without its moves, or an end
    state given some, never loads."""
    flaws = []
    if missing := set(states) - set(transitions):
        flaws.append(f"states without a TRANSITIONS entry: {_names(missing)}")
    if moving := {state for state in terminal if transitions.get(state)}:
        flaws.append(f"end states with moves out of them: {_names(moving)}")
    if unmatched := timed ^ set(outcomes):
        flaws.append(
            f"timed states without an outcome, or outcomes of untimed ones: {_names(unmatched)}"
        )
    if illegal := [f"{a} -> {b}" for a, b in outcomes.items() if b not in transitions.get(a, ())]:
        flaws.append(f"outcomes that are not moves in TRANSITIONS: {', '.join(illegal)}")
    if flaws:
        raise ValueError("; ".join(flaws))


def _names(states: Iterable[StrEnum]) -> str:
    return ", ".join(sorted(states))


check_tables(State, TRANSITIONS, TERMINAL, frozenset(DEADLINES), ON_DEADLINE)
