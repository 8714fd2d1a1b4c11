"""Random sequences of transitions, replays, sweeps, edits and concurrent decisions.

After every step: every state is one the CHECK allows; the number of events
equals the number of state changes (creations and edits included); each item's
events link from/to into exactly its history; the hash chain verifies.
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import sqlite3
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from pipelines.approval import flow, sla
from pipelines.approval.rule import Decision, Vote
from store import db, drafts, errors, items
from store.audit import events
from store.items import machine
from store.items.machine import State
from store.review.followups import Shown
from tests import snapshot

ACTORS = st.sampled_from(["system", "scheduler", "sweep", "cli", "operator:1", "operator:2"])


class ItemMachine(RuleBasedStateMachine):
    def __init__(self, config: db.StoreConfig) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.config = dataclasses.replace(config, synchronous="NORMAL")
        self.store = self.run(db.open(self.config))
        self.now = datetime(2026, 11, 30, tzinfo=UTC)
        self.ids: list[int] = []
        self.expected_events = 0
        self.seen: dict[int, tuple[str, int, int]] = {}

    def run(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()

    def _snapshot(self) -> dict[int, tuple[str, int, int]]:
        def query(conn: sqlite3.Connection) -> dict[int, tuple[str, int, int]]:
            rows = conn.execute("SELECT id, state, attempt, version FROM items")
            return {row[0]: (row[1], row[2], row[3]) for row in rows}

        return dict(self.run(self.store.read(query)))

    def _tables(self) -> snapshot.Tables:
        return dict(self.run(snapshot.tables(self.store)))

    def _account(self, edits: int = 0) -> None:
        """Count the state changes the last step made, against the previous snapshot."""
        after = self._snapshot()
        for item_id, (state, attempt, _) in after.items():
            before = self.seen.get(item_id)
            if before is None or (before[0], before[1]) != (state, attempt):
                self.expected_events += 1
        self.expected_events += edits
        self.seen = after

    @rule(seconds=st.integers(0, 400))
    def tick(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)

    @initialize()
    def first_items(self) -> None:
        for _ in range(3):
            self.create()

    @rule()
    def create(self) -> None:
        item = self.run(
            self.store.write(
                items.create_sync, "p", "s", f"src-{len(self.ids)}", {"n": len(self.ids)}, self.now
            )
        )
        assert item is not None
        self.ids.append(item.id)
        self._account()

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), actor=ACTORS)
    def move(self, data: st.DataObject, actor: str) -> None:
        item_id = data.draw(st.sampled_from(self.ids))
        current = self.seen[item_id]
        # Mostly moves the table allows, sometimes any state (which must raise and write nothing).
        allowed = sorted(machine.TRANSITIONS[State(current[0])])
        to = data.draw(st.sampled_from(allowed * 3 + list(State)))
        before = self._tables()
        try:
            if to == State.AWAITING_APPROVAL and current[0] == State.DRAFTING:

                def unit(conn: sqlite3.Connection) -> None:
                    drafts.add_sync(
                        conn,
                        item_id,
                        drafts.Body(f"draft at {self.now}", {"drafter": "template"}),
                        self.now,
                    )
                    items.transition_sync(conn, item_id, to, actor, self.now)

                self.run(self.store.write(unit))
            else:
                self.run(self.store.write(items.transition_sync, item_id, to, actor, self.now))
        except errors.IllegalTransition:
            # Refused only when the table forbids the move, and then nothing was written.
            assert to != current[0] and to not in machine.TRANSITIONS[State(current[0])]
            assert self._tables() == before
        except items.Throttled:
            assert actor in events.AUTOMATIC_ACTORS and to != current[0]
            assert self._tables() == before
        else:
            assert to == current[0] or to in machine.TRANSITIONS[State(current[0])]
        self._account()

    @precondition(lambda self: self.ids)
    @rule(data=st.data(), force=st.booleans(), actor=ACTORS)
    def replay(self, data: st.DataObject, force: bool, actor: str) -> None:
        ended = [i for i in self.ids if State(self.seen[i][0]) in machine.TERMINAL]
        item_id = data.draw(st.sampled_from(ended or self.ids))
        state = State(self.seen[item_id][0])
        replayable = state in machine.DROPPED or (force and state == State.DISPATCHED)
        before = self._tables()
        try:
            self.run(
                self.store.write(items.replay_sync, item_id, actor, self.now, "replay", force=force)
            )
        except errors.IllegalTransition:
            assert not replayable and self._tables() == before
        except items.Throttled:
            assert replayable and actor in events.AUTOMATIC_ACTORS
            assert self._tables() == before
        else:
            assert replayable
        self._account()

    @rule(minutes=st.integers(0, 60 * 30))
    def sweep(self, minutes: int) -> None:
        self.now += timedelta(minutes=minutes)
        self.run(sla.sweep(self.store, self.now))
        self._account()

    @precondition(lambda self: self.ids)
    @rule(
        data=st.data(),
        voters=st.lists(st.tuples(st.integers(1, 4), st.booleans()), min_size=1, max_size=6),
    )
    def concurrent_decisions(self, data: st.DataObject, voters: list[tuple[int, bool]]) -> None:
        item_id = data.draw(st.sampled_from(self.ids))
        _, attempt, version = self.seen[item_id]

        async def all_at_once() -> list[Any]:
            calls = [
                self.store.write(
                    flow.decide_sync,
                    Vote(Shown(item_id, attempt, version), op, "approve" if yes else "reject"),
                    self.now,
                    quorum=2,
                )
                for op, yes in voters
            ]
            return await asyncio.gather(*calls, return_exceptions=True)

        results = self.run(all_at_once())
        moved = [
            r for r in results if isinstance(r, Decision) and r.outcome in ("approved", "rejected")
        ]
        assert len(moved) <= 1
        for result in results:
            assert isinstance(result, Decision | errors.Conflict), result
        self._account()

    @precondition(lambda self: self.ids)
    @rule(data=st.data())
    def edit(self, data: st.DataObject) -> None:
        item_id = data.draw(st.sampled_from(self.ids))
        state, _, version = self.seen[item_id]
        edits = 0
        before = self._tables()
        try:
            self.run(
                self.store.write(
                    drafts.edit_sync, drafts.Edit(item_id, version, 3), "edited", self.now
                )
            )
            edits = 1
        except (errors.IllegalTransition, errors.Conflict):
            assert state != State.AWAITING_APPROVAL
            assert self._tables() == before
        self._account(edits)

    @rule()
    def reopen(self) -> None:
        self.run(self.store.close())
        self.store = self.run(db.open(self.config))

    @invariant()
    def states_are_declared(self) -> None:
        assert {state for state, _, _ in self.seen.values()} <= {s.value for s in machine.STATES}

    @invariant()
    def one_event_per_state_change(self) -> None:
        count = self.run(
            self.store.read(lambda c: c.execute("SELECT count(*) FROM events").fetchone()[0])
        )
        assert count == self.expected_events

    @invariant()
    def events_trace_each_history(self) -> None:
        for item_id, (state, attempt, _) in self.seen.items():
            history = self.run(events.for_entity(self.store, "item", item_id))
            assert history[0].from_state is None and history[0].to_state == State.NEW
            for previous, event in itertools.pairwise(history):
                assert event.from_state == previous.to_state
                if event.from_state != event.to_state:
                    assert event.to_state == State.NEW or machine.allowed(
                        State(event.from_state), State(event.to_state)
                    )
            assert history[-1].to_state == state
            assert history[-1].attempt == attempt

    @invariant()
    def chain_verifies(self) -> None:
        assert self.run(events.verify_chain(self.store)).ok


SETTINGS = settings(
    max_examples=40,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_items_keep_the_machine_s_rules(
    fresh_store_config: Callable[[], db.StoreConfig], dialect: str
) -> None:
    # Fewer runs on PostgreSQL: each commits to a server's disk; the rules are the same.
    runs = settings(SETTINGS, max_examples=10) if dialect == "postgres" else SETTINGS
    run_state_machine_as_test(lambda: ItemMachine(fresh_store_config()), settings=runs)
