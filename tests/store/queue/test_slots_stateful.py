"""Random interleavings of slot moves against a real store, checked against a model.

The model restates the seed's rules on its own (ALLOWED is written out here, not read
from the machine): a move outside the table raises, the same state with the same item
is a no-op and with another a conflict, an end state takes any repeat, two transitions
of a slot are at least 5 s apart. After every step each slot's row must be the model's,
and its events must tell its whole life: one per change, each leaving where the one
before arrived, transitions at least the floor apart, no slot fired twice.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TypeVar

from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    rule,
    run_state_machine_as_test,
)

from store import db, errors
from store.audit import events
from store.queue import holdings, machine, slots
from tests.store.queue.conftest import HOUR, T0, new_items

T = TypeVar("T")
FLOOR = timedelta(seconds=5)
STUCK = timedelta(minutes=15)
STATES = ("open", "firing", "substituting", "fired", "expired", "breach")
ENDS = {"fired", "expired", "breach"}
ALLOWED = {
    ("open", "firing"),
    ("open", "fired"),
    ("open", "expired"),
    ("firing", "fired"),
    ("firing", "substituting"),
    ("firing", "breach"),
    ("substituting", "firing"),
    ("substituting", "fired"),
    ("substituting", "breach"),
}
OP = events.operator(7)


@dataclass
class Model:
    """What the test expects of one slot."""

    id: int
    at: datetime
    state: str = "open"
    item: int | None = None
    attempt: int = 0
    changed_at: datetime = T0
    events: int = 1  # its opening


def expect(m: Model, to: str, item: int | None, now: datetime) -> str:
    """The seed's verdict on a move: move, no-op, illegal, conflict or floored."""
    if to == m.state:
        return "no-op" if m.state in ENDS or item == m.item else "conflict"
    if (m.state, to) not in ALLOWED:
        return "illegal"
    if to == "fired" and m.state != "firing":  # fired empty: nothing queued, or left
        if item is not None:
            return "illegal"
        if m.state == "open" and m.item is not None:
            return "conflict"
    elif to == "firing" and item is None:
        return "illegal"
    elif item == m.item if m.state == "substituting" and to == "firing" else item != m.item:
        return "conflict"
    return "floored" if now < m.changed_at + FLOOR else "move"


ERRORS: dict[type[Exception], str] = {
    machine.Floored: "floored",
    machine.SlotConflict: "conflict",
    errors.IllegalTransition: "illegal",
}


@dataclass
class Queue:
    slots: list[Model] = field(default_factory=list)
    items: list[int] = field(default_factory=list)

    def open_after(self, at: datetime) -> list[Model]:
        return [m for m in self.slots if m.state == "open" and m.at >= at]

    def held(self) -> set[int]:
        return {m.item for m in self.slots if m.item is not None and m.state in STATES[:3]}

    def lay_out(self, over: list[Model], queue: list[int | None]) -> None:
        for m, item in zip(over, queue, strict=True):
            if m.item != item:
                m.item, m.events = item, m.events + 1

    def close_up(self, gap: Model) -> None:
        over = self.open_after(gap.at)
        queue: list[int | None] = [m.item for m in over if m.item is not None]
        self.lay_out(over, queue + [None] * (len(over) - len(queue)))


class SlotMachine(RuleBasedStateMachine):
    def __init__(self, config: db.StoreConfig) -> None:
        super().__init__()
        self.loop = asyncio.new_event_loop()
        self.now = T0
        self.store = self.run(db.open(config))
        times = [T0 + HOUR * n for n in range(6)]
        opened = self.run(slots.open_window(self.store, "city", times, T0))
        self.q = Queue([Model(s.id, s.slot_at) for s in opened])
        self.q.items = self.run(self.store.write(new_items, 8, T0))

    def run(self, awaitable: Awaitable[T]) -> T:
        return self.loop.run_until_complete(awaitable)

    def teardown(self) -> None:
        self.run(self.store.close())
        self.loop.close()

    def verdict(self, call: Callable[[], Awaitable[T]]) -> tuple[str, T | None]:
        try:
            return "made", self.run(call())
        except tuple(ERRORS) as refused:
            return ERRORS[type(refused)], None

    def pick(self, n: int, *states: str) -> Model:
        """The n-th slot in one of `states` (so the rules reach deep states), else of all."""
        found = [m for m in self.q.slots if m.state in states] or self.q.slots
        return found[n % len(found)]

    def moved(self, m: Model, to: str, item: int | None) -> None:
        if to == "firing":
            m.attempt += 1
        m.state, m.item, m.changed_at, m.events = to, item, self.now, m.events + 1

    # --- rules --------------------------------------------------------------------

    @initialize()
    def queue_five(self) -> None:
        """A queue to start from, the floor after the opening passed: the rules then
        reach firing and substituting within a few steps."""
        for n in range(5):
            self.assign(n)
        self.now += FLOOR

    @rule(step=st.sampled_from([0, 1, 4, 4, 5, 5, 6, 60, 15 * 60, 16 * 60]))
    def wait(self, step: int) -> None:
        self.now += timedelta(seconds=step)

    @rule(n=st.integers(0, 7))
    def assign(self, n: int) -> None:
        item = self.q.items[n]
        placed = self.run(holdings.assign(self.store, "city", item, "system", self.now))
        if item in self.q.held():
            assert placed is not None and placed.item_id == item
            return
        holding = [m for m in self.q.slots if m.state == "open" and m.item is not None]
        after = max((m.at for m in holding), default=None)
        free = [
            m
            for m in self.q.open_after(self.now)
            if m.item is None and (after is None or m.at > after)
        ]
        assert (placed.id if placed else None) == (free[0].id if free else None)
        if free:
            free[0].item, free[0].events = item, free[0].events + 1

    @rule(
        n=st.integers(0, 5),
        to=st.sampled_from(STATES),
        pick=st.sampled_from(["held", "none", "fresh"]),
    )
    def transition(self, n: int, to: str, pick: str) -> None:
        m = self.q.slots[n]
        fresh = [i for i in self.q.items if i not in self.q.held()]
        item = {"held": m.item, "none": None, "fresh": fresh[0] if fresh else m.item}[pick]
        expected = expect(m, to, item, self.now)
        state = machine.SlotState(to)
        got, _ = self.verdict(
            lambda: slots.transition(self.store, m.id, state, item, "system", self.now)
        )
        assert got == ("made" if expected in ("move", "no-op") else expected), (m, to, item)
        event(f"transition: {expected}")
        if expected == "move":
            self.moved(m, to, item)

    @rule(n=st.integers(0, 5))
    def fire(self, n: int) -> None:
        held = [m for m in self.q.slots if m.state == "open" and m.item is not None]
        m = held[n % len(held)] if held and n < 4 else self.q.slots[n]
        to = "firing" if m.item is not None else "fired"
        got, fired = self.verdict(lambda: slots.fire(self.store, m.id, "scheduler", self.now))
        if m.state != "open":
            assert (got, fired) == ("made", None)
            return
        assert got == expect(m, to, m.item, self.now).replace("move", "made")
        if got == "made":
            self.moved(m, to, m.item)

    @rule(n=st.integers(0, 5), ok=st.booleans())
    def answer(self, n: int, ok: bool) -> None:
        """The destination's answer to a firing slot: delivered, or failed for good."""
        m = self.pick(n, "firing")
        item = m.item if m.item is not None else self.q.items[0]
        to = "fired" if ok else "substituting"
        expected = expect(m, to, item, self.now)
        if ok:
            got, _ = self.verdict(lambda: slots.deliver(self.store, m.id, item, "system", self.now))
        else:
            got, _ = self.verdict(
                lambda: slots.fail(self.store, m.id, item, "system", self.now, "gone")
            )
        assert got == expected.replace("move", "made").replace("no-op", "made"), (m, to)
        event(f"answer {to}: {expected}")
        if expected == "move":
            self.moved(m, to, item)

    @rule(n=st.integers(0, 5))
    def fail_then_walk(self, n: int) -> None:
        """A failure and, the floor later, its walk: the two rarely meet by chance."""
        self.answer(n, ok=False)
        self.now += FLOOR
        self.substitute(n)

    @rule(a=st.integers(0, 5), b=st.integers(0, 5), stale=st.booleans())
    def swap(self, a: int, b: int, stale: bool) -> None:
        first, second = self.q.slots[a], self.q.slots[b]
        seen = (first.item, second.item if not stale else first.item)
        got, _ = self.verdict(
            lambda: holdings.swap(self.store, first.id, second.id, seen, OP, self.now)
        )
        if first.state != "open" or second.state != "open":
            assert got == "illegal"
        elif (first.item, second.item) == (seen[1], seen[0]):
            assert got == "made"  # already as asked: nothing to change
        elif stale:
            assert got == "conflict"
        else:
            assert got == "made"
            event("swapped")
            self.q.lay_out([first, second], [seen[1], seen[0]])

    @rule(n=st.integers(0, 7), now_=st.booleans())
    def pull(self, n: int, now_: bool) -> None:
        item = self.q.items[n]
        call = holdings.post_now if now_ else holdings.pull
        got, _ = self.verdict(lambda: call(self.store, item, OP, self.now))
        m = next((m for m in self.q.slots if m.item == item and m.state in STATES[:3]), None)
        if m is None or m.state == "open":
            assert got == "made"
        else:
            assert got == "illegal"
        if m is not None and m.state == "open":
            event("pulled")
            m.item, m.events = None, m.events + 1
            self.q.close_up(m)

    @rule(n=st.integers(0, 5))
    def substitute(self, n: int) -> None:
        m = self.pick(n, "substituting")
        got, _ = self.verdict(lambda: holdings.substitute(self.store, m.id, "system", self.now))
        if m.state in ENDS:
            assert got == "made"
        elif m.state != "substituting":
            assert got == "illegal"
        elif self.now < m.changed_at + FLOOR:
            assert got == "floored"
        else:
            assert got == "made"
            queued = next(
                (s for s in self.q.open_after(m.at) if s.item is not None and s is not m), None
            )
            event(f"walk: {'fired empty' if queued is None else 'substituted'}")
            if queued is None:
                self.moved(m, "fired", None)
                return
            item, queued.item, queued.events = queued.item, None, queued.events + 1
            self.moved(m, "firing", item)
            self.q.close_up(queued)

    @rule(n=st.integers(0, 5))
    def expire(self, n: int) -> None:
        m = self.q.slots[n]
        got, gone = self.verdict(lambda: holdings.expire(self.store, m.id, "scheduler", self.now))
        if m.state == "expired":
            assert got == "made"
            return
        assert got == expect(m, "expired", m.item, self.now).replace("move", "made")
        if got != "made":
            return
        item = m.item
        self.moved(m, "expired", item)
        if item is not None:
            over = [s for s in self.q.open_after(m.at) if s is not m]
            queue: list[int | None] = [item, *(s.item for s in over if s.item is not None)]
            self.q.lay_out(over, (queue + [None] * len(over))[: len(over)])
            assert gone is not None and gone.unplaced == (
                queue[len(over)] if len(queue) > len(over) else None
            )

    @rule()
    def sweep(self) -> None:
        breached = self.run(slots.sweep(self.store, self.now))
        stuck = [
            m
            for m in self.q.slots
            if m.state in ("firing", "substituting") and self.now - m.changed_at > STUCK
        ]
        assert sorted(s.id for s in breached) == sorted(m.id for m in stuck)
        for m in stuck:
            self.moved(m, "breach", m.item)
            event("a slot breached")

    # --- invariants ---------------------------------------------------------------

    @invariant()
    def rows_are_the_model(self) -> None:
        rows = self.run(self.store.read(slots.upcoming_sync, "city", T0))
        got = [(s.id, str(s.state), s.item_id, s.attempt, s.changed_at) for s in rows]
        assert got == [(m.id, m.state, m.item, m.attempt, m.changed_at) for m in self.q.slots]

    @invariant()
    def events_tell_each_slot_life(self) -> None:
        for m in self.q.slots:
            told = self.run(events.for_entity(self.store, "slot", m.id))
            assert len(told) == m.events, m
            assert told[-1].to_state == m.state
            changes = [e for e in told if e.from_state != e.to_state]
            for before, after in itertools.pairwise(told):
                assert after.from_state == before.to_state
            for before, after in itertools.pairwise(changes):
                assert after.at - before.at >= FLOOR
            kinds = [machine.parse_reason(e.reason or "")[0] for e in told]
            assert kinds.count("fired") + kinds.count("slot_substituted") == m.attempt


SETTINGS = settings(
    max_examples=60,
    stateful_step_count=50,
    deadline=None,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink],
    suppress_health_check=[HealthCheck.too_slow],
)


def test_slots_keep_the_seed_rules(
    fresh_store_config: Callable[[], db.StoreConfig], dialect: str
) -> None:
    runs = settings(SETTINGS, max_examples=10) if dialect == "postgres" else SETTINGS
    run_state_machine_as_test(lambda: SlotMachine(fresh_store_config()), settings=runs)
