"""Random interleavings of the claim lifecycle against a real store, reopened at random.

One event loop per state machine drives the async store; the clock starts late on
the last day of a month, so day and month periods roll over during a run. After
every step the money invariants are checked on every budget row ever opened.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from store import db, errors, items, ledger
from store.audit import events
from store.ledger import budgets
from store.ledger.machine import ClaimState as S
from store.ledger.prices import Usage

T = TypeVar("T")
OP = events.operator(7)
USAGE = Usage(10, 20)
LIMITS = (("global", "day", 6_000), ("global", "month", 20_000), ("news", "month", 4_000))


@dataclass
class Model:
    """What the test expects of one claim."""

    id: int
    key: str
    request: tuple[str, int | None, int]
    state: S
    reserved: int
    lease_until: datetime
    item_id: int | None
    actual: int | None = None
    usage: Usage | None = None


class LedgerMachine(RuleBasedStateMachine):
    def __init__(self, config: db.StoreConfig) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.config = config
        self.now = datetime(2026, 11, 30, 22, 30, tzinfo=UTC)
        self.store = self.run(db.open(self.config))
        self.claims: dict[int, Model] = {}
        self.by_key: dict[str, Model] = {}
        for scope, period, limit in LIMITS:
            self.run(
                ledger.set_budget(self.store, ledger.Limit(scope, period, limit), OP, self.now)
            )
        item = self.run(
            self.store.write(items.create_sync, "news", "feed", "g1", {"t": 1}, self.now)
        )
        assert item is not None
        self.item = item

    def run(self, awaitable: Coroutine[Any, Any, T]) -> T:
        return self.loop.run_until_complete(awaitable)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()

    def pick(self, index: int) -> Model:
        return list(self.claims.values())[index % len(self.claims)]

    def dump(self) -> list[list[tuple[object, ...]]]:
        def query(conn: sqlite3.Connection) -> list[list[tuple[object, ...]]]:
            tables = ("budgets", "claims", "claim_holds", "events", "outbox")
            return [sorted(map(tuple, conn.execute(f"SELECT * FROM {t}"))) for t in tables]

        return self.run(self.store.read(query))

    # --- rules ------------------------------------------------------------------------

    @initialize()
    def first_claim(self) -> None:
        """Every other rule picks an existing claim, so there is always one."""
        self.begin(key=0, pipeline="news", with_item=True, variant=0, worst=500, lease_s=600)
        assert self.claims

    @rule(
        key=st.integers(0, 9),
        pipeline=st.sampled_from(["news", "digest"]),
        with_item=st.booleans(),
        variant=st.integers(0, 1),
        worst=st.integers(0, 2_500),
        lease_s=st.integers(1, 900),
    )
    def begin(
        self, key: int, pipeline: str, with_item: bool, variant: int, worst: int, lease_s: int
    ) -> None:
        name = f"k{key}"
        item_id = self.item.id if with_item else None
        request = (pipeline, item_id, variant)
        before = self.dump()
        try:
            work = self.run(
                ledger.begin(
                    self.store,
                    ledger.Call(
                        name,
                        "drafts.create",
                        {"variant": variant},
                        worst,
                        pipeline,
                        item_id,
                        timedelta(seconds=lease_s),
                    ),
                    self.now,
                )
            )
        except errors.Conflict:
            assert name in self.by_key and self.by_key[name].request != request
            assert self.dump() == before
            return
        except errors.BudgetExceeded:
            assert name not in self.by_key
            assert self.dump() == before
            return
        if name in self.by_key:
            known = self.by_key[name]
            assert known.request == request
            assert (work.id, work.replayed, work.state) == (known.id, True, known.state)
            assert self.dump() == before
            return
        assert not work.replayed and work.id not in self.claims and work.state == S.RESERVED
        model = Model(work.id, name, request, S.RESERVED, worst, work.lease_until, item_id)
        self.claims[work.id] = self.by_key[name] = model

    @rule(index=st.integers(0, 99))
    def start_provider(self, index: int) -> None:
        model = self.pick(index)
        before = self.dump()
        try:
            claim = self.run(ledger.start_provider(self.store, model.id, self.now))
        except errors.LeaseExpired:
            assert model.state == S.RESERVED and self.now >= model.lease_until
            assert self.dump() == before
            return
        except errors.IllegalTransition:
            assert model.state != S.RESERVED
            assert self.dump() == before
            return
        assert model.state == S.RESERVED and self.now < model.lease_until
        assert claim.state == S.STARTED
        model.state = S.STARTED

    @rule(index=st.integers(0, 99), share=st.integers(0, 100), wrong_hash=st.booleans())
    def complete(self, index: int, share: int, wrong_hash: bool) -> None:
        model = self.pick(index)
        actual = model.reserved * share // 100
        passed = "not-the-hash" if wrong_hash else self.item.content_hash
        try:
            result = self.run(
                ledger.complete(
                    self.store,
                    model.id,
                    ledger.Actual(actual, f"req-{model.id}", USAGE),
                    passed,
                    self.now,
                )
            )
        except errors.Conflict:
            if model.state == S.STARTED:  # the item changed under the claim
                assert wrong_hash and model.item_id is not None
                model.state = S.UNCERTAIN
            else:
                assert model.state == S.SETTLED
                assert (model.actual, model.usage) != (actual, USAGE)
            return
        except errors.IllegalTransition:
            assert model.state not in (S.STARTED, S.SETTLED)
            return
        if model.state == S.SETTLED:
            assert result.replayed and (model.actual, model.usage) == (actual, USAGE)
            return
        assert model.state == S.STARTED and not result.replayed
        assert not (wrong_hash and model.item_id is not None)
        model.state, model.actual, model.usage = S.SETTLED, actual, USAGE

    @rule(index=st.integers(0, 99))
    def fail(self, index: int) -> None:
        model = self.pick(index)
        try:
            claim = self.run(ledger.fail(self.store, model.id, "provider error", self.now))
        except errors.Conflict:
            assert model.state == S.SETTLED
            return
        expected = {S.RESERVED: S.RELEASED, S.STARTED: S.UNCERTAIN}.get(model.state, model.state)
        assert claim.state == expected
        model.state = expected

    @rule(batch=st.integers(1, 4))
    def recover(self, batch: int) -> None:
        due = sorted(
            (m for m in self.claims.values() if m.state in (S.RESERVED, S.STARTED)),
            key=lambda m: (m.lease_until, m.id),
        )
        due = [m for m in due if m.lease_until <= self.now][:batch]
        moved = self.run(ledger.recover(self.store, self.now, batch))
        assert [c.id for c in moved] == [m.id for m in due]
        for model, claim in zip(due, moved, strict=True):
            model.state = S.RELEASED if model.state == S.RESERVED else S.UNCERTAIN
            assert claim.state == model.state

    @rule(index=st.integers(0, 99), share=st.integers(0, 100))
    def reconcile(self, index: int, share: int) -> None:
        model = self.pick(index)
        actual = model.reserved * share // 100
        try:
            result = self.run(
                ledger.reconcile(
                    self.store, model.id, ledger.Actual(actual, "invoice line"), OP, self.now
                )
            )
        except errors.Conflict:
            assert model.state == S.SETTLED and model.actual != actual
            return
        except errors.IllegalTransition:
            assert model.state not in (S.UNCERTAIN, S.SETTLED)
            return
        if model.state == S.SETTLED:
            assert result.replayed and model.actual == actual
            return
        assert model.state == S.UNCERTAIN
        model.state, model.actual, model.usage = S.SETTLED, actual, None

    @rule(seconds=st.integers(0, 600))
    def tick(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @rule()
    def reopen(self) -> None:
        self.run(self.store.close())
        self.store = self.run(db.open(self.config))

    # --- invariants ---------------------------------------------------------------------

    @invariant()
    def money_adds_up(self) -> None:
        def query(
            conn: sqlite3.Connection,
        ) -> tuple[list[budgets.Budget], dict[tuple[object, ...], tuple[int, int]]]:
            cursor = conn.execute(
                "SELECT b.scope, b.period, b.period_start, b.limit_micros,"
                " CAST(coalesce(sum(s.spent_micros), 0) AS BIGINT) AS spent_micros,"
                " CAST(coalesce(sum(s.held_micros), 0) AS BIGINT) AS held_micros,"
                " b.granted_micros - CAST(coalesce(sum(s.granted_micros), 0) AS BIGINT)"
                "  AS ungranted_drift,"
                " b.limit_micros - b.granted_micros AS ungranted"
                " FROM budgets b LEFT JOIN budget_slots s ON s.scope = b.scope"
                "  AND s.period = b.period AND s.period_start = b.period_start"
                " GROUP BY b.scope, b.period, b.period_start, b.limit_micros, b.granted_micros"
            )
            found = cursor.fetchall()
            # The slots' escrow: the row counts exactly what it granted them, within its limit.
            assert all(r["ungranted_drift"] == 0 and r["ungranted"] >= 0 for r in found), found
            rows = [budgets.Budget.from_row(r) for r in found]
            sums = {
                tuple(r[:3]): (r[3], r[4])
                for r in conn.execute(
                    "SELECT h.scope, h.period, h.period_start,"
                    " coalesce(sum(CASE WHEN c.state IN ('reserved', 'started', 'uncertain')"
                    "  THEN h.micros END), 0),"
                    " coalesce(sum(CASE WHEN c.state = 'settled' THEN c.actual_micros END), 0)"
                    " FROM claim_holds h JOIN claims c ON c.id = h.claim_id"
                    " GROUP BY h.scope, h.period, h.period_start"
                )
            }
            return rows, sums

        rows, sums = self.run(self.store.read(query))
        for row in rows:
            assert row.spent_micros + row.held_micros <= row.limit_micros, row
            assert row.spent_micros + row.held_micros + row.remaining_micros == row.limit_micros
            key = (row.scope, row.period, int(row.period_start.timestamp() * 1000))
            assert (row.held_micros, row.spent_micros) == sums.get(key, (0, 0)), row

    @invariant()
    def settled_once_and_never_released_after_start(self) -> None:
        def query(conn: sqlite3.Connection) -> list[tuple[int, str, str | None, int, int]]:
            return conn.execute(
                "SELECT c.id, c.state, c.evidence,"
                " (SELECT count(*) FROM events e WHERE e.entity = 'claim'"
                "   AND e.entity_id = CAST(c.id AS TEXT) AND e.to_state = 'settled'),"
                " (SELECT count(*) FROM events e WHERE e.entity = 'claim'"
                "   AND e.entity_id = CAST(c.id AS TEXT) AND e.to_state = 'started')"
                " FROM claims c"
            ).fetchall()

        for claim_id, state, evidence, settles, starts in self.run(self.store.read(query)):
            assert settles == (1 if state == "settled" else 0), claim_id
            assert starts <= 1, claim_id
            if starts:  # the call may have been charged: only evidence ends the hold
                assert state in ("started", "uncertain", "settled"), (claim_id, state)
                assert state != "settled" or evidence
            assert state == self.claims[claim_id].state
            event(f"a claim reached {state}")


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=30,
    deadline=None,
    # No explain phase: its tracer makes each step of a failing run very slow.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow],
)


def test_the_ledger_keeps_its_invariants(
    fresh_store_config: Callable[[], db.StoreConfig], dialect: str
) -> None:
    # Fewer runs on PostgreSQL: each commits to a server's disk; the rules are the same.
    runs = settings(SETTINGS, max_examples=10) if dialect == "postgres" else SETTINGS
    run_state_machine_as_test(lambda: LedgerMachine(fresh_store_config()), settings=runs)
