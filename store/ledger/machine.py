"""The budget claim state machine, declared once.

    begin ──► reserved ──start_provider──► started ──complete──► settled
       │         │                            │                     ▲
       │         └─fail / lease expired──►    └─fail / lease expired│
       │           released                     / content changed   │
       │                                        ──► uncertain ──reconcile (evidence)
       └─(no budget configured)──► unbudgeted

What each state promises about money:
- reserved: the worst case is held in every configured budget row; no provider
  call is authorized yet, so failing here releases the hold.
- started: start_provider authorized exactly one call; it may have been charged,
  so from here a hold is only ever released by a settlement with evidence.
- uncertain: the call may have been charged but nobody knows the figure; the hold
  stays until an operator reconciles it with evidence.
- settled / released / unbudgeted: end states; a claim settles at most once.

States carry `#:` comments; TRANSITIONS is the one table of allowed moves. The SQL
CHECK on claims.state is written in the migrations; `check_constraint()` builds it
from STATES, and tests/store/test_ledger.py fails if the migration's text differs.

Where the states differ from the plain life of a claim (reserved, started, completed,
failed, uncertain, settled), and why:
- `completed` and `settled` are one state: complete() settles in the same
  transaction, so there is no moment where a claim is completed but unsettled.
- `failed` is split by what it means for the hold: `released` (failed before
  start_provider: nothing can have been charged) and `uncertain` (after it).
- `unbudgeted`: begin found no budget for the pipeline nor globally; the work
  exists so a replay finds it, but it holds nothing and never calls a provider.
"""

from __future__ import annotations

from enum import StrEnum

from store.items.machine import check_tables


class ClaimState(StrEnum):
    RESERVED = "reserved"  #: worst case held; waiting for start_provider within the lease
    STARTED = "started"  #: start_provider authorized the one provider call (hold kept)
    SETTLED = "settled"  #: actual cost spent, hold released; terminal, exactly once
    RELEASED = "released"  #: failed or lease expired before start; hold released; terminal
    UNCERTAIN = "uncertain"  #: may have been charged; hold kept until reconciled with evidence
    UNBUDGETED = "unbudgeted"  #: no budget configured: nothing held, provider not allowed; terminal


C = ClaimState

STATES: tuple[ClaimState, ...] = tuple(ClaimState)

TRANSITIONS: dict[ClaimState, frozenset[ClaimState]] = {
    C.RESERVED: frozenset({C.STARTED, C.RELEASED}),
    C.STARTED: frozenset({C.SETTLED, C.UNCERTAIN}),
    C.UNCERTAIN: frozenset({C.SETTLED}),
    C.SETTLED: frozenset(),
    C.RELEASED: frozenset(),
    C.UNBUDGETED: frozenset(),
}

#: End states: repeats of the call that reached them are no-ops.
TERMINAL: frozenset[ClaimState] = frozenset({C.SETTLED, C.RELEASED, C.UNBUDGETED})

#: States with a lease that recover() enforces.
LEASED: frozenset[ClaimState] = frozenset({C.RESERVED, C.STARTED})

#: Where fail() and an expired lease take a claim: the one place this is decided.
ON_FAIL: dict[ClaimState, ClaimState] = {
    C.RESERVED: C.RELEASED,
    C.STARTED: C.UNCERTAIN,
}


def allowed(source: ClaimState, target: ClaimState) -> bool:
    return target in TRANSITIONS[source]


def check_constraint(column: str = "state") -> str:
    """The CHECK clause that the claims table must carry, built from STATES."""
    listed = ", ".join(f"'{state.value}'" for state in STATES)
    return f"CHECK ({column} IN ({listed}))"


check_tables(ClaimState, TRANSITIONS, TERMINAL, LEASED, ON_FAIL)
