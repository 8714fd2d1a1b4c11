"""The slot machine's declaration: one list of states for code and both schemas, its
tables sound, and its rules as pure functions."""

from __future__ import annotations

import re
import sqlite3
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import get_args

import pytest

from store import errors, sql
from store.audit import events
from store.backends import generate, migrate
from store.queue import machine
from store.queue.machine import Seen, SlotState

S = SlotState
T0 = datetime(2026, 12, 1, 8, 0, tzinfo=UTC)
LATER = T0 + machine.FLOOR


def _slots_check(text: str) -> str:
    table = text[text.index("CREATE TABLE slots") :]
    found = re.search(r"(CHECK \(state IN \([^)]*\)\))", table)
    assert found is not None
    return found.group(1)


def _listed(clause: str) -> list[str]:
    return re.findall(r"'([a-z_]+)'", clause)


def test_the_sqlite_schema_carries_the_declared_states() -> None:
    assert _slots_check(generate.SQLITE_SCHEMA.read_text()) == machine.check_constraint()


def test_an_upgraded_sqlite_store_carries_the_declared_states(tmp_path: Path) -> None:
    conn = sqlite3.connect(tmp_path / "replayed.db", isolation_level=None)
    migrate.apply_pending(conn)
    (table,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'slots'").fetchone()
    assert _slots_check(table) == machine.check_constraint()
    (entities,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'events'").fetchone()
    assert "'slot'" in entities


def test_the_newest_postgres_word_on_the_states_is_the_declared_one() -> None:
    newest = [
        path.read_text()
        for path in sorted((sql.POSTGRES_DIR / "migrations").glob("*.sql"))
        if "slots_state_check CHECK" in path.read_text()
    ][-1]
    found = re.search(r"slots_state_check (CHECK \(state IN \([^)]*\)\))", newest)
    assert found is not None
    assert found.group(1) == machine.check_constraint()
    # pg_dump's form of the live schema: the same states, in ARRAY[...] form.
    dumped = generate.POSTGRES_SCHEMA.read_text()
    line = next(x for x in dumped.splitlines() if "slots_state_check" in x)
    assert _listed(line) == [s.value for s in machine.STATES]


def test_the_holding_index_lists_the_holding_states() -> None:
    schema = generate.SQLITE_SCHEMA.read_text()
    index = schema[schema.index("CREATE UNIQUE INDEX slots_by_item") :].split(";")[0]
    assert set(_listed(index)) == {s.value for s in machine.HOLDING}
    transient = schema[schema.index("CREATE INDEX slots_transient") :].split(";")[0]
    assert set(_listed(transient)) == {s.value for s in machine.TRANSIENT}


def test_every_entity_of_the_code_is_in_the_events_check() -> None:
    schema = generate.SQLITE_SCHEMA.read_text()
    events_table = schema[schema.index("CREATE TABLE events") :]
    found = re.search(r"CHECK \(entity IN \(([^)]*)\)\)", events_table)
    assert found is not None
    assert _listed(found.group(0)) == list(get_args(events.Entity))


def test_every_move_has_a_kind_and_every_kind_a_use() -> None:
    used = {kind for moves in machine.MOVES.values() for kind in moves.values()}
    assert used | machine.HOLDINGS | {"opened"} == set(machine.KINDS)
    assert set(machine.TRANSITIONS) == set(machine.STATES)


def _seen(state: SlotState, item: int | None = 1, at: datetime = T0) -> Seen:
    return Seen(9, state, item, at)


@pytest.mark.parametrize(
    ("state", "to"),
    [
        (source, target)
        for source in S
        for target in S
        if target != source and target not in machine.TRANSITIONS[source]
    ],
)
def test_a_move_outside_the_table_raises_naming_the_allowed(state: S, to: S) -> None:
    with pytest.raises(errors.IllegalTransition, match=f"from {state} to {to}"):
        machine.judge(_seen(state), to, 1, LATER)


def test_the_same_state_with_the_same_item_is_a_no_op() -> None:
    for state in S:
        assert machine.judge(_seen(state), state, 1, T0) == "no-op"


def test_the_same_state_with_another_item_is_a_conflict_unless_it_ended() -> None:
    for state in set(S) - machine.TERMINAL:
        with pytest.raises(machine.SlotConflict, match="not item 2"):
            machine.judge(_seen(state), state, 2, LATER)
    for state in machine.TERMINAL:
        assert machine.judge(_seen(state), state, 2, LATER) == "no-op"


def test_the_floor_says_when_the_slot_may_move() -> None:
    with pytest.raises(machine.Floored) as refused:
        machine.judge(_seen(S.OPEN), S.FIRING, 1, LATER - timedelta(milliseconds=1))
    assert refused.value.may_move_at == LATER
    assert LATER.isoformat() in str(refused.value)
    assert machine.judge(_seen(S.OPEN), S.FIRING, 1, LATER) == "move"


def test_the_item_a_move_carries_is_checked() -> None:
    with pytest.raises(errors.IllegalTransition, match="without an item"):
        machine.judge(_seen(S.OPEN, None), S.FIRING, None, LATER)
    with pytest.raises(machine.SlotConflict, match="it fires, not empty"):
        machine.judge(_seen(S.OPEN, 1), S.FIRED, None, LATER)
    with pytest.raises(machine.SlotConflict, match="holds item 1, not item 2"):
        machine.judge(_seen(S.OPEN, 1), S.FIRING, 2, LATER)
    with pytest.raises(machine.SlotConflict, match="the item that failed"):
        machine.judge(_seen(S.SUBSTITUTING, 1), S.FIRING, 1, LATER)
    assert machine.judge(_seen(S.SUBSTITUTING, 1), S.FIRING, 2, LATER) == "move"
    assert machine.judge(_seen(S.OPEN, None), S.FIRED, None, LATER) == "move"


def test_holdings_change_only_an_open_slot_holding_what_was_seen() -> None:
    assert machine.judge_holding(_seen(S.OPEN, None), None, 3) == "move"
    assert machine.judge_holding(_seen(S.OPEN, 3), None, 3) == "no-op"
    with pytest.raises(machine.SlotConflict, match="holds item 1, not item 2"):
        machine.judge_holding(_seen(S.OPEN, 1), 2, None)
    with pytest.raises(errors.IllegalTransition, match="only an open slot"):
        machine.judge_holding(_seen(S.FIRING, 1), 1, None)


def test_only_a_transient_slot_past_its_time_is_stuck() -> None:
    past = T0 + machine.STUCK_AFTER + timedelta(seconds=1)
    assert {s for s in S if machine.stuck(_seen(s), past)} == machine.TRANSIENT
    assert not any(machine.stuck(_seen(s), T0 + machine.STUCK_AFTER) for s in S)


def test_a_reason_reads_back_as_written() -> None:
    for text in (machine.reason("fired", 4), machine.reason("sla_breach", None, "a: b")):
        kind, item, detail = machine.parse_reason(text)
        assert machine.reason(kind, item, detail) == text
    with pytest.raises(ValueError, match="not a slot event's reason"):
        machine.parse_reason("bogus item 3")
