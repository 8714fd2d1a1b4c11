"""The item state machine: paired events, illegal moves, idempotency, floor, sweep, chain."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pipelines.approval import flow, rule, sla
from store import db, drafts, errors, items, outbox, payloads, sql
from store.audit import events, sealer
from store.backends import generate, migrate
from store.items import machine
from store.items.machine import State
from store.review.followups import Shown
from tests import forger, snapshot

S = State


async def _item(store: db.Store, now: datetime, source_id: str = "guid-1") -> items.Item:
    created = await store.write(
        items.create_sync, "news", "feed", source_id, {"title": "T", "text": "body"}, now
    )
    assert created is not None
    return created


async def _awaiting(store: db.Store, now: datetime, source_id: str = "guid-1") -> items.Item:
    item = await _item(store, now, source_id)
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)

    def unit(conn: sqlite3.Connection) -> items.Item:
        drafts.add_sync(conn, item.id, drafts.Body("draft text", {"drafter": "template"}), now)
        return items.transition_sync(conn, item.id, S.AWAITING_APPROVAL, "system", now)

    return await store.write(unit)


async def _event_count(store: db.Store) -> int:
    return await store.read(lambda c: c.execute("SELECT count(*) FROM events").fetchone()[0])


def _state_check(schema: str) -> str:
    items_table = schema[schema.index("CREATE TABLE items") :]
    found = re.search(r"state\s+TEXT NOT NULL (CHECK \(state IN \([^)]*\)\))", items_table)
    assert found is not None
    return found.group(1)


def test_check_constraint_in_sql_matches_the_declaration() -> None:
    # PostgreSQL's schema file is pg_dump's (ARRAY[...] form): its CHECK is pinned by the
    # newest PostgreSQL migration below, and the file by `dev.py schema --check`.
    assert _state_check(generate.SQLITE_SCHEMA.read_text()) == machine.check_constraint()


def test_migrations_give_the_declared_check(tmp_path: Path) -> None:
    """What an upgraded SQLite store holds, and PostgreSQL's newest word on the list."""
    conn = sqlite3.connect(tmp_path / "replayed.db", isolation_level=None)
    migrate.apply_pending(conn)
    (table,) = conn.execute("SELECT sql FROM sqlite_master WHERE name = 'items'").fetchone()
    assert _state_check(table) == machine.check_constraint()
    newest = [
        path.read_text()
        for path in sorted((sql.POSTGRES_DIR / "migrations").glob("*.sql"))
        if "items_state_check CHECK" in path.read_text()
    ][-1]
    found = re.search(r"items_state_check (CHECK \(state IN \([^)]*\)\))", newest)
    assert found is not None
    assert found.group(1) == machine.check_constraint()


def _check(**changed: object) -> None:
    """check_tables on the item machine's tables, with some of them replaced."""
    tables: dict[str, object] = {
        "transitions": machine.TRANSITIONS,
        "terminal": machine.TERMINAL,
        "timed": frozenset(machine.DEADLINES),
        "outcomes": machine.ON_DEADLINE,
    }
    machine.check_tables(State, **(tables | changed))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        (
            {"transitions": {s: t for s, t in machine.TRANSITIONS.items() if s != S.BREACH}},
            "states without a TRANSITIONS entry: breach",
        ),
        (
            {"transitions": machine.TRANSITIONS | {S.REJECTED: frozenset({S.NEW})}},
            "end states with moves out of them: rejected",
        ),
        (
            {"timed": frozenset({S.DRAFTING, S.DISPATCHING})},
            "outcomes of untimed ones: awaiting_approval",
        ),
        (
            {"outcomes": machine.ON_DEADLINE | {S.DRAFTING: S.EXPIRED}},
            "outcomes that are not moves in TRANSITIONS: drafting -> expired",
        ),
    ],
)
def test_a_flawed_table_is_refused_naming_the_flaw(changed: dict[str, object], named: str) -> None:
    _check()  # the shipped tables pass
    with pytest.raises(ValueError, match=re.escape(named)):
        _check(**changed)


def test_every_flaw_of_a_table_is_named_at_once() -> None:
    transitions = {s: t for s, t in machine.TRANSITIONS.items() if s not in (S.NEW, S.DRAFTING)}
    with pytest.raises(ValueError) as refused:
        _check(
            transitions=transitions | {S.FAILED: frozenset({S.NEW})},
            outcomes=machine.ON_DEADLINE | {S.DISPATCHING: S.NEW},
        )
    assert str(refused.value) == (
        "states without a TRANSITIONS entry: drafting, new; "
        "end states with moves out of them: failed; "
        "outcomes that are not moves in TRANSITIONS: drafting -> breach, dispatching -> new"
    )


async def test_the_live_schema_rejects_an_undeclared_state(store: db.Store, now: datetime) -> None:
    item = await _item(store, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.ConstraintViolation):
        await store.write(
            lambda c: c.execute("UPDATE items SET state = 'limbo' WHERE id = ?", (item.id,))
        )
    assert await snapshot.tables(store) == unchanged


async def test_a_transition_writes_exactly_one_event(store: db.Store, now: datetime) -> None:
    item = await _item(store, now)
    moved = await store.write(
        items.transition_sync, item.id, S.DRAFTING, "system", now, reason="drafting"
    )
    assert moved.state == S.DRAFTING
    assert moved.deadline == now + timedelta(minutes=15)
    history = await events.for_entity(store, "item", item.id)
    assert [(e.from_state, e.to_state, e.actor) for e in history] == [
        (None, "new", "system"),
        ("new", "drafting", "system"),
    ]


async def test_an_illegal_transition_raises_and_writes_nothing(
    store: db.Store, now: datetime
) -> None:
    item = await _item(store, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match="from new: drafting, failed"):
        await store.write(items.transition_sync, item.id, S.DISPATCHED, "system", now)
    assert await snapshot.tables(store) == unchanged
    assert (await items.get(store, item.id)).state == S.NEW


async def test_reasserting_the_same_work_is_a_no_op(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    before = await snapshot.tables(store)
    again = await store.write(
        items.transition_sync, item.id, S.AWAITING_APPROVAL, "system", now, expect_version=1
    )
    assert again.state == S.AWAITING_APPROVAL
    assert await snapshot.tables(store) == before


async def test_reasserting_with_different_work_is_a_conflict(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="already awaiting_approval with version 1"):
        await store.write(
            items.transition_sync, item.id, S.AWAITING_APPROVAL, "system", now, expect_version=2
        )
    assert await snapshot.tables(store) == before


async def test_terminal_states_accept_repeats_silently(store: db.Store, now: datetime) -> None:
    item = await _item(store, now)
    await store.write(items.transition_sync, item.id, S.FAILED, "system", now, reason="boom")
    before = await snapshot.tables(store)
    repeat = await store.write(
        items.transition_sync, item.id, S.FAILED, "system", now, reason="again", expect_attempt=7
    )
    assert repeat.state == S.FAILED and repeat.reason == "boom"
    assert await snapshot.tables(store) == before


async def test_a_stale_version_moves_nothing(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="is at version 1 attempt 1; this request is for ver"):
        await store.write(
            items.transition_sync, item.id, S.APPROVED, "operator:1", now, expect_version=0
        )
    assert await snapshot.tables(store) == before


async def test_the_floor_stops_an_automatic_loop_but_not_operators(
    store: db.Store, now: datetime
) -> None:
    item = await _item(store, now)
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)
    await store.write(items.transition_sync, item.id, S.FAILED, "system", now)
    await store.write(items.replay_sync, item.id, "operator:5", now, "try again")
    unchanged = await snapshot.tables(store)
    with pytest.raises(items.Throttled):
        await store.write(
            items.transition_sync, item.id, S.DRAFTING, "system", now + timedelta(seconds=2)
        )
    assert await snapshot.tables(store) == unchanged
    assert (await items.get(store, item.id)).state == S.NEW
    later = await store.write(
        items.transition_sync, item.id, S.DRAFTING, "system", now + timedelta(seconds=5)
    )
    assert later.state == S.DRAFTING and later.attempt == 2
    # Operators are never floored.
    await store.write(
        items.transition_sync, item.id, S.FAILED, "operator:5", now + timedelta(seconds=5)
    )
    await store.write(items.replay_sync, item.id, "operator:5", now + timedelta(seconds=5), "again")


async def test_the_floor_counts_the_units_own_earlier_moves(store: db.Store, now: datetime) -> None:
    """An automatic loop inside one unit is floored too. PostgreSQL links a unit's events
    at commit, so the floor must look at the ones still waiting there as well."""
    item = await _item(store, now)
    unchanged = await snapshot.tables(store)

    def loop(conn: sqlite3.Connection) -> None:
        items.transition_sync(conn, item.id, S.DRAFTING, "system", now)
        items.transition_sync(conn, item.id, S.FAILED, "system", now)
        items.replay_sync(conn, item.id, "operator:5", now, "try again")
        items.transition_sync(conn, item.id, S.DRAFTING, "system", now + timedelta(seconds=2))

    with pytest.raises(items.Throttled) as floored:
        await store.write(loop)
    assert str(floored.value) == (
        f"item {item.id} entered drafting automatically at {now.isoformat()}; "
        f"automatic re-entry waits {machine.FLOOR.total_seconds():g} s"
    )
    assert await snapshot.tables(store) == unchanged


async def test_a_move_of_an_unknown_item_says_which(store: db.Store, now: datetime) -> None:
    with pytest.raises(errors.NotFound) as missing:
        await store.write(items.transition_sync, 4242, S.DRAFTING, "system", now)
    assert str(missing.value) == "no item 4242"


def test_actors_are_checked_and_a_bad_one_is_named_with_the_valid_forms() -> None:
    assert events.cli("ana") == "cli:ana" and events.operator(7) == "operator:7"
    with pytest.raises(ValueError) as refused:
        events.cli("ana smith")
    assert str(refused.value) == (
        "unknown actor 'cli:ana smith'; valid: system, scheduler, sweep, cli, "
        "operator:<telegram id>, cli:<unix user>"
    )


async def test_replay_only_from_dropped_or_forced(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match="not dropped"):
        await store.write(items.replay_sync, item.id, "cli", now, "why not")
    assert await snapshot.tables(store) == unchanged
    await store.write(flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 42, "reject"), now)
    replayed = await store.write(items.replay_sync, item.id, "operator:42", now, "second look")
    assert (replayed.state, replayed.attempt) == (S.NEW, 2)
    last = (await events.for_entity(store, "item", item.id))[-1]
    assert (last.from_state, last.to_state, last.actor, last.attempt) == (
        "rejected",
        "new",
        "operator:42",
        2,
    )


async def test_replay_of_dispatched_needs_force(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    await store.write(flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 42, "approve"), now)
    for state in (S.DISPATCHING, S.DISPATCHED):
        await store.write(items.transition_sync, item.id, state, "system", now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match=r"gatehouse replay \d+ --force"):
        await store.write(items.replay_sync, item.id, "cli", now, "resend")
    assert await snapshot.tables(store) == unchanged
    assert (
        await store.write(items.replay_sync, item.id, "cli", now, "resend", force=True)
    ).attempt == 2


async def test_fifty_concurrent_decisions_one_winner_one_event(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    before = await _event_count(store)
    results = await asyncio.gather(
        *(
            store.write(
                flow.decide_sync,
                rule.Vote(Shown(item.id, 1, 1), 1000 + n, "approve" if n % 3 else "reject"),
                now,
            )
            for n in range(50)
        )
    )
    winners = [r for r in results if r.outcome in ("approved", "rejected")]
    assert len(winners) == 1
    assert all(r.outcome == "unchanged" for r in results if r not in winners)
    assert await _event_count(store) == before + 1
    assert (await items.get(store, item.id)).state == winners[0].item.state


async def test_quorum_counts_distinct_operators_and_one_reject_vetoes(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    first = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 1, "approve"), now, quorum=2
    )
    assert (first.outcome, first.approvals) == ("pending", (1,))
    repeat = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 1, "approve"), now, quorum=2
    )
    assert repeat.outcome == "unchanged"
    second = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 2, "approve"), now, quorum=2
    )
    assert (second.outcome, second.item.state) == ("approved", S.APPROVED)
    assert second.item.reason == "approved by operator:1, operator:2"

    other = await _awaiting(store, now, "guid-2")
    await store.write(
        flow.decide_sync, rule.Vote(Shown(other.id, 1, 1), 1, "approve"), now, quorum=2
    )
    veto = await store.write(
        flow.decide_sync, rule.Vote(Shown(other.id, 1, 1), 2, "reject"), now, quorum=2
    )
    assert (veto.outcome, veto.item.state) == ("rejected", S.REJECTED)


async def test_an_edit_makes_older_cards_stale(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    draft = await store.write(drafts.edit_sync, drafts.Edit(item.id, 1, 7), "better words", now)
    assert (draft.version, draft.provenance) == (2, {"operator": 7, "edit_of": 1})
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="shows version 1"):
        await store.write(flow.decide_sync, rule.Vote(Shown(item.id, 1, 1), 7, "approve"), now)
    assert await snapshot.tables(store) == unchanged
    decided = await store.write(
        flow.decide_sync, rule.Vote(Shown(item.id, 1, 2), 7, "approve"), now
    )
    assert decided.outcome == "approved"
    history = await events.for_entity(store, "item", item.id)
    assert history[-2].reason == "edited: version 1 -> 2" and history[-2].actor == "operator:7"


async def test_sla_sweep_warns_once_then_breaches_once(store: db.Store, now: datetime) -> None:
    item = await _item(store, now)
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)
    assert await sla.sweep(store, now + timedelta(minutes=11)) == sla.SweepReport((), ())
    assert (await sla.sweep(store, now + timedelta(minutes=12))).warned == (item.id,)
    assert await sla.sweep(store, now + timedelta(minutes=13)) == sla.SweepReport((), ())
    report = await sla.sweep(store, now + timedelta(minutes=16))
    assert report.moved == (item.id,)
    breached = await items.get(store, item.id)
    assert breached.state == S.BREACH
    assert breached.reason == "stuck in drafting since 2026-11-30 12:00 UTC"
    unchanged = await snapshot.tables(store)
    assert await sla.sweep(store, now + timedelta(minutes=30)) == sla.SweepReport((), ())
    assert await snapshot.tables(store) == unchanged
    alerts = await outbox.due(store, now + timedelta(hours=1), ["alert"])
    assert [a.payload["level"] for a in alerts] == ["warning", "error"]
    assert (
        alerts[0]
        .payload["text"]
        .endswith("is still drafting, 3 min left before it counts as stuck")
    )
    assert "stuck in drafting" in alerts[1].payload["text"]
    assert alerts[1].payload["buttons"] == payloads.REPLAY_BUTTONS  # a breach offers Replay


async def test_a_warning_less_than_a_minute_ahead_counts_seconds(
    store: db.Store, now: datetime
) -> None:
    item = await _item(store, now)
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)
    deadline = now + machine.DEADLINES[S.DRAFTING]
    assert (await sla.sweep(store, deadline - timedelta(seconds=40))).warned == (item.id,)
    [alert] = await outbox.due(store, deadline, ["alert"])
    assert alert.payload["text"].endswith("40 s left before it counts as stuck")


async def test_awaiting_approval_expires_after_its_window(store: db.Store, now: datetime) -> None:
    item = await _item(store, now)
    await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)

    def unit(conn: sqlite3.Connection) -> items.Item:
        drafts.add_sync(conn, item.id, drafts.Body("text", {"drafter": "template"}), now)
        return items.transition_sync(
            conn, item.id, S.AWAITING_APPROVAL, "system", now, deadline=timedelta(hours=2)
        )

    waiting = await store.write(unit)
    assert waiting.deadline == now + timedelta(hours=2)
    report = await sla.sweep(store, now + timedelta(hours=3))
    assert report.moved == (item.id,)
    assert (await items.get(store, item.id)).state == S.EXPIRED
    (edit,) = await outbox.for_item(store, item.id, "card_edit")
    assert edit.payload["state"] == "expired"
    assert edit.payload["status"].startswith("⌛ expired at 2026-11-30 15:00 UTC: nobody decided")
    assert edit.payload["buttons"] == payloads.REPLAY_BUTTONS


async def test_sweep_warning_not_starved_by_an_earlier_deadline(
    store: db.Store, now: datetime
) -> None:
    long_wait = await _awaiting(store, now, "long")  # 24 h window, warns at 19.2 h
    short = await _item(store, now + timedelta(hours=19, minutes=10), "short")
    await store.write(
        items.transition_sync, short.id, S.DRAFTING, "system", now + timedelta(hours=19, minutes=10)
    )
    report = await sla.sweep(store, now + timedelta(hours=19, minutes=15))
    assert report.warned == (long_wait.id,)


async def test_events_are_append_only(store: db.Store, now: datetime) -> None:
    await _item(store, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.StoreError, match="append-only"):
        await store.write(lambda c: c.execute("UPDATE events SET reason = 'x'"))
    assert await snapshot.tables(store) == unchanged
    with pytest.raises(errors.StoreError, match="append-only"):
        await store.write(lambda c: c.execute("DELETE FROM events"))
    assert await snapshot.tables(store) == unchanged


async def test_verify_chain_names_the_edited_row(
    store: db.Store, data_dir: Path, now: datetime
) -> None:
    for n in range(5):
        item = await _item(store, now, f"guid-{n}")
        await store.write(items.transition_sync, item.id, S.DRAFTING, "system", now)
    await sealer.seal(store)
    assert (await events.verify_chain(store)).ok
    with forger.raw(store, triggers=False) as raw:
        raw.execute("UPDATE events SET actor = 'operator:666' WHERE id = 6")
    report = await events.verify_chain(store)
    assert report.broken is not None
    assert report.broken.event_id == 6
    assert "edited" in str(report.broken)
    assert report.checked == 5


async def test_verify_chain_finds_a_deleted_row(
    store: db.Store, data_dir: Path, now: datetime
) -> None:
    for n in range(3):
        await _item(store, now, f"guid-{n}")
    await sealer.seal(store)
    with forger.raw(store, triggers=False) as raw:
        raw.execute("DELETE FROM events WHERE id = 2")
    report = await events.verify_chain(store)
    assert report.broken is not None and report.broken.event_id == 3
    assert "event 2 is missing" in str(report.broken)


async def test_bad_actor_is_refused(store: db.Store, now: datetime) -> None:
    item = await _item(store, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(ValueError, match="unknown actor"):
        await store.write(items.transition_sync, item.id, S.DRAFTING, "operator:bob", now)
    assert await snapshot.tables(store) == unchanged
    assert (await items.get(store, item.id)).state == S.NEW


async def test_rows_that_belong_with_a_transition_commit_with_it(
    store: db.Store, now: datetime
) -> None:
    item = await _item(store, now)

    def unit(conn: sqlite3.Connection) -> None:
        items.transition_sync(conn, item.id, S.DRAFTING, "system", now)
        outbox.enqueue_sync(conn, "alert", outbox.ALERTS, {"text": "x"}, now, item_id=item.id)
        raise RuntimeError("crash before commit")

    unchanged = await snapshot.tables(store)
    with pytest.raises(RuntimeError):
        await store.write(unit)
    assert await snapshot.tables(store) == unchanged
    assert (await items.get(store, item.id)).state == S.NEW
    assert await outbox.for_item(store, item.id, "alert") == []
    assert len(await events.for_entity(store, "item", item.id)) == 1


async def test_a_chunk_moved_together_writes_each_items_event_from_its_own_state(
    store: db.Store, now: datetime
) -> None:
    fetched = {f"chunk-{n}": {"title": f"T{n}"} for n in range(3)}
    made = await store.write(items.create_many_sync, "news", "s", fetched, now)
    asked = [items.Move(item, State.DRAFTING, "system", now) for item in made]
    drafting = [answer.item for answer in await store.write(items.apply, asked)]
    assert [item.id for item in drafting] == [item.id for item in made]
    window = timedelta(hours=1)
    to = State.AWAITING_APPROVAL
    asked = [items.Move(item, to, "system", now, deadline=window) for item in drafting[:2]]
    waiting = await store.write(items.apply, asked)
    assert [type(answer) for answer in waiting] == [items.Moved] * 2
    for item, path in zip(made, (3, 3, 2), strict=True):
        history = await events.for_entity(store, "item", item.id)
        steps = [(e.from_state, e.to_state, e.attempt) for e in history]
        expected = [(None, "new", 1), ("new", "drafting", 1), ("drafting", "awaiting_approval", 1)]
        assert steps == expected[:path]


async def test_an_entity_that_never_entered_a_state_automatically_has_no_last_entry(
    store: db.Store, now: datetime
) -> None:
    item = await store.write(items.create_sync, "news", "s", "never-drafted", {"title": "T"}, now)
    assert item is not None
    found = await store.read(events.last_automatic_entry, "item", item.id, State.DRAFTING)
    assert found is None
    assert await store.read(events.last_automatic_entry, "item", item.id, State.NEW) == now
