"""The invariants that a one-line change to the store could break without another test noticing.

Each test names the invariant it pins: the hash chain covers each link, an edit of an
old version is refused with nothing written, a claim settles at most once even when a
second writer races the first, and every automatic actor's move writes its one event.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from pipelines.approval import sla
from store import backend, db, drafts, errors, items, ledger
from store.audit import events, sealer
from store.items.machine import State
from store.ledger import claims
from store.ledger import settle as ledger_settle
from store.ledger.machine import ClaimState
from store.ledger.prices import Usage
from tests import forger, snapshot

FIELDS = {
    "id": 2,
    "entity": "item",
    "entity_id": "7",
    "from_state": "new",
    "to_state": "drafting",
    "actor": "sweep",
    "attempt": 1,
    "reason": None,
    "at": 1764504000000,
    "prev_hash": "ab" * 32,
}


# --- the hash chain ---------------------------------------------------------------------------


def test_an_event_hash_is_a_known_answer_over_its_fields_and_prev_hash() -> None:
    assert (
        events.compute_hash(FIELDS)
        == "aaf46eadf5b6de839e96c8b969dc085edc5d62d9b2882237a0e9595ce9fad702"
    )
    # The same figure from the documented encoding, computed here without the project's code.
    body = json.dumps([*(FIELDS[k] for k in FIELDS if k != "prev_hash"), FIELDS["prev_hash"]])
    assert (
        events.compute_hash(FIELDS) == hashlib.sha256(body.replace(", ", ",").encode()).hexdigest()
    )


@pytest.mark.parametrize("field", sorted(FIELDS))
def test_every_field_of_an_event_changes_its_hash(field: str) -> None:
    changed = dict(FIELDS)
    value = FIELDS[field]
    changed[field] = value + 1 if isinstance(value, int) else "cd" * 32 if value else "x"
    assert events.compute_hash(changed) != events.compute_hash(FIELDS)


async def _chain(store: db.Store, now: datetime, count: int) -> None:
    for n in range(count):
        await store.write(items.create_sync, "news", "feed", f"guid-{n}", {"n": n}, now)
    await sealer.seal(store)


def _forge(raw: backend.Conn, event_id: int, **changes: object) -> str:
    """Change an event's fields and give it the hash they call for; returns that hash.
    Its link is the previous event's hash unless `prev_hash` is among the changes."""
    row = dict(raw.execute("SELECT * FROM events WHERE id = ?", (event_id,)).fetchone())
    previous = raw.execute("SELECT hash FROM events WHERE id = ?", (event_id - 1,)).fetchone()
    row |= {"prev_hash": previous[0] if previous else events.GENESIS} | changes
    row["hash"] = events.compute_hash(row)
    names = [*changes, "hash"]
    assignments = ", ".join(f"{name} = :{name}" for name in names)
    raw.execute(f"UPDATE events SET {assignments} WHERE id = :id", row)
    return str(row["hash"])


def _rewrite(store: db.Store, event_id: int, *, fix_next_link: bool) -> None:
    """Edit one event behind the program's back, as someone covering their tracks would:
    its hash recomputed over the edit and the hash it chains to, and, with
    `fix_next_link`, the next event pointed at the forged hash."""
    with forger.raw(store, triggers=False) as raw:
        forged = _forge(raw, event_id, actor="operator:666")
        if fix_next_link:
            raw.execute("UPDATE events SET prev_hash = ? WHERE id = ?", (forged, event_id + 1))


def _relink(store: db.Store, event_id: int, prev_hash: str) -> None:
    """Point one event at another predecessor and recompute its hash to match: only the
    link check can tell."""
    with forger.raw(store, triggers=False) as raw:
        _forge(raw, event_id, prev_hash=prev_hash)


EDITED = "its contents do not match its hash (edited after it was written)"


async def test_a_rewritten_event_with_its_own_hash_recomputed_breaks_the_next_link(
    store: db.Store, data_dir: Path, now: datetime
) -> None:
    """Event N forged with a consistent hash: N+1's hash covers N's real hash, so N+1 breaks."""
    await _chain(store, now, 5)
    assert await events.verify_chain(store) == events.ChainReport(5, None)
    _rewrite(store, 3, fix_next_link=False)
    assert await events.verify_chain(store) == events.ChainReport(3, events.BrokenLink(4, EDITED))


async def test_fixing_the_next_link_too_breaks_that_event_s_own_hash(
    store: db.Store, data_dir: Path, now: datetime
) -> None:
    """prev_hash is inside each hash: relinking event N+1 changes what its hash must be."""
    await _chain(store, now, 5)
    _rewrite(store, 3, fix_next_link=True)
    assert await events.verify_chain(store) == events.ChainReport(3, events.BrokenLink(4, EDITED))


async def test_an_event_pointed_at_another_predecessor_breaks_the_link(
    store: db.Store, data_dir: Path, now: datetime
) -> None:
    """An event whose own hash is consistent but whose link is not: the link check names it."""
    await _chain(store, now, 5)
    _relink(store, 4, "0" * 64)
    assert await events.verify_chain(store) == events.ChainReport(
        3, events.BrokenLink(4, "its prev_hash does not match the previous event's hash")
    )


async def test_verify_walks_the_chain_in_batches(store: db.Store, now: datetime) -> None:
    await _chain(store, now, 7)
    assert await store.read(lambda c: events.verify_sync(c, batch=2)) == events.ChainReport(7, None)
    assert await store.read(lambda c: events.verify_sync(c, batch=7)) == events.ChainReport(7, None)


async def test_appended_events_link_to_their_predecessor(store: db.Store, now: datetime) -> None:
    await _chain(store, now, 3)
    chain = [e for n in range(1, 4) for e in await events.for_entity(store, "item", n)]
    assert [e.prev_hash for e in chain] == [events.GENESIS, chain[0].hash, chain[1].hash]
    assert [e.id for e in chain] == [1, 2, 3]


# --- one event per automatic move -------------------------------------------------------------


@pytest.mark.parametrize("actor", ["system", "scheduler", "sweep", "cli", "operator:5"])
async def test_every_actor_s_move_writes_exactly_one_event(
    store: db.Store, now: datetime, actor: str
) -> None:
    item = await store.write(items.create_sync, "news", "feed", "guid", {"t": 1}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, actor, now)
    await store.write(items.transition_sync, item.id, State.FAILED, actor, now, reason="boom")
    replayed = await store.write(
        items.replay_sync, item.id, actor, now + timedelta(seconds=10), "again"
    )
    history = [
        (e.from_state, e.to_state, e.actor, e.attempt)
        for e in await events.for_entity(store, "item", item.id)
    ]
    assert history == [
        (None, "new", "system", 1),
        ("new", "drafting", actor, 1),
        ("drafting", "failed", actor, 1),
        ("failed", "new", actor, 2),
    ]
    assert replayed.attempt == 2
    assert (await events.verify_chain(store)).ok


async def test_the_sweep_s_breach_and_expiry_each_write_one_event(
    store: db.Store, now: datetime
) -> None:
    stuck = await store.write(items.create_sync, "news", "feed", "stuck", {"t": 1}, now)
    waiting = await store.write(items.create_sync, "news", "feed", "waiting", {"t": 2}, now)
    assert stuck is not None and waiting is not None
    await store.write(items.transition_sync, stuck.id, State.DRAFTING, "system", now)
    await store.write(items.transition_sync, waiting.id, State.DRAFTING, "system", now)

    def to_approval(conn: sqlite3.Connection) -> None:
        drafts.add_sync(conn, waiting.id, drafts.Body("text", {"drafter": "template"}), now)
        items.transition_sync(
            conn, waiting.id, State.AWAITING_APPROVAL, "system", now, deadline=timedelta(hours=1)
        )

    await store.write(to_approval)
    report = await sla.sweep(store, now + timedelta(hours=2))
    assert sorted(report.moved) == [stuck.id, waiting.id]
    for item_id, before, after in (
        (stuck.id, "drafting", "breach"),
        (waiting.id, "awaiting_approval", "expired"),
    ):
        last = (await events.for_entity(store, "item", item_id))[-1]
        assert (last.from_state, last.to_state, last.actor) == (before, after, "sweep")
        assert (
            len(await events.for_entity(store, "item", item_id)) == 4 if after == "expired" else 3
        )
    assert (await events.verify_chain(store)).ok


# --- an edit applies only to the version it was shown -----------------------------------------


async def _awaiting(store: db.Store, now: datetime) -> items.Item:
    item = await store.write(items.create_sync, "news", "feed", "guid", {"t": 1}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)

    def unit(conn: sqlite3.Connection) -> items.Item:
        drafts.add_sync(conn, item.id, drafts.Body("draft text", {"drafter": "template"}), now)
        return items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)

    return await store.write(unit)


async def test_a_stale_edit_is_refused_and_writes_nothing(store: db.Store, now: datetime) -> None:
    item = await _awaiting(store, now)
    await store.write(drafts.edit_sync, drafts.Edit(item.id, 1, 7), "second words", now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="is at version 2; the edit was for version 1"):
        await store.write(
            drafts.edit_sync, drafts.Edit(item.id, 1, 8), "late words from an old card", now
        )
    assert await snapshot.tables(store) == before


async def test_an_edit_outside_approval_or_empty_is_refused_and_writes_nothing(
    store: db.Store, now: datetime
) -> None:
    item = await _awaiting(store, now)
    before = await snapshot.tables(store)
    with pytest.raises(ValueError, match="replacement text is empty"):
        await store.write(drafts.edit_sync, drafts.Edit(item.id, 1, 7), "  \n", now)
    assert await snapshot.tables(store) == before
    await store.write(items.transition_sync, item.id, State.REJECTED, "operator:7", now)
    before = await snapshot.tables(store)
    with pytest.raises(errors.IllegalTransition, match="only drafts awaiting approval"):
        await store.write(drafts.edit_sync, drafts.Edit(item.id, 1, 7), "words", now)
    assert await snapshot.tables(store) == before
    with pytest.raises(errors.NotFound, match="no draft version 9"):
        await drafts.get(store, item.id, 9)


# --- a claim settles at most once, even against a second writer ---------------------------------


async def test_a_second_writer_settling_a_claim_it_read_before_the_first_is_refused(
    store: db.Store, data_dir: Path, now: datetime
) -> None:
    """The compare-and-set guard on the settle UPDATE, with two connections racing.

    The second settler read the claim while it was still started; the first then
    settled it. The second one's UPDATE must match no row, so the holds are not
    turned into spend twice and no second event is written.
    """
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), "cli", now)
    work = await ledger.begin(
        store,
        ledger.Call("k1", "drafts.create", {"p": 1}, 1_000, "news", None, timedelta(minutes=5)),
        now,
    )
    await ledger.start_provider(store, work.id, now)
    seen_by_second = await store.read(lambda c: claims.get_sync(c, work.id))
    assert seen_by_second.state == ClaimState.STARTED
    await ledger.complete(store, work.id, ledger.Actual(700, "req-1", Usage(10, 10)), None, now)
    before = await snapshot.tables(store)

    with forger.raw(store) as second:
        second.execute("BEGIN")
        with pytest.raises(errors.Conflict, match="changed underneath its settlement"):
            late = ledger_settle.Actual(900, "req-2", Usage(10, 10))
            ledger_settle._settle(second, seen_by_second, late, "system", now)
        second.execute("ROLLBACK")
    assert await snapshot.tables(store) == before
    settled = await store.read(lambda c: claims.get_sync(c, work.id))
    assert (settled.state, settled.actual_micros, settled.evidence) == (
        ClaimState.SETTLED,
        700,
        "req-1",
    )


async def test_an_appended_event_reads_back_field_for_field(store: db.Store, now: datetime) -> None:
    def unit(conn: backend.Conn) -> None:
        events.append(conn, "budget", "global/day", None, "limit:5", "cli", now)
        events.append(
            conn, "claim", 9, "started", "settled", "system", now, attempt=3, reason="paid"
        )

    await store.write(unit)
    (unsealed,) = await events.for_entity(store, "claim", 9)
    assert (unsealed.seq, unsealed.prev_hash, unsealed.hash) == (None, None, None)
    assert await sealer.seal(store) == 2
    (budget,) = await events.for_entity(store, "budget", "global/day")
    (claim,) = await events.for_entity(store, "claim", 9)
    assert budget == events.Event(
        1, "budget", "global/day", None, "limit:5", "cli", 0, None, now, 1, events.GENESIS,
        budget.hash,
    )  # fmt: skip
    assert claim == events.Event(
        2, "claim", "9", "started", "settled", "system", 3, "paid", now, 2, budget.hash, claim.hash
    )
    fields = {k: v for k, v in vars(claim).items() if k not in ("hash", "seq")}
    fields["at"] = int(now.timestamp() * 1000)
    assert claim.hash == events.compute_hash(fields)
