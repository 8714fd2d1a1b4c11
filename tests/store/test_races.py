"""The invariants under several writers at once, each race forced to happen.

Each test runs units side by side on the store's own lanes (PostgreSQL runs a few at
once; SQLite's one writer runs them in turn, so there they pass by construction).
A `Meeting` holds every unit after a chosen statement until all have reached it, so
without its fix each race happens every time instead of now and then; a unit that a
row lock keeps from arriving is waited for only MEETING_S.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
from collections.abc import AsyncIterator, Callable
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import pytest

from pipelines.approval import flow, rule
from pipelines.config import spec
from pipelines.runs import trigger
from store import backend, db, drafts, errors, items, ledger
from store.audit import events, sealer
from store.intake import seen, tokens
from store.items.machine import State
from store.ledger import budgets, claims
from store.review.followups import Shown
from tests import snapshot

T = TypeVar("T")

#: How long a unit waits at the meeting for the others (a locked-out one never comes).
MEETING_S = 1.0
#: Writers side by side in these tests (PostgreSQL lanes).
WRITERS = 8


@pytest.fixture
async def store(store_config: db.StoreConfig) -> AsyncIterator[db.Store]:
    opened = await db.open(dataclasses.replace(store_config, writers=WRITERS))
    try:
        yield opened
    finally:
        await opened.close()


class Meeting:
    """Units that wait for each other, each after running the query named `after` (or
    the one `holding` names for it)."""

    def __init__(self, units: int, after: str = "") -> None:
        self._barrier = threading.Barrier(units)
        self._after = after

    def holding(
        self, unit: Callable[[backend.Conn], T], after: str = ""
    ) -> Callable[[backend.Conn], T]:
        return lambda conn: unit(_Pausing(conn, self, after or self._after))

    def reached(self) -> None:
        with contextlib.suppress(threading.BrokenBarrierError):
            self._barrier.wait(MEETING_S)


class _Pausing:
    """The unit's connection, stopping at the meeting after the named query (once)."""

    def __init__(self, conn: backend.Conn, meeting: Meeting, after: str) -> None:
        self._conn = conn
        self._meeting = meeting
        self._after = after

    def execute(self, query: str, parameters: Any = ()) -> backend.Cursor:
        cursor = self._conn.execute(query, parameters)
        if getattr(query, "name", None) == self._after:
            self._meeting.reached()
        return cursor

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


class _Held:
    """The store as a caller that writes through it sees it, every unit held at `meeting`."""

    def __init__(self, store: db.Store, meeting: Meeting) -> None:
        self._store = store
        self._meeting = meeting

    async def write(self, unit: Callable[[backend.Conn], T]) -> T:
        return await self._store.write(self._meeting.holding(unit))


async def _awaiting(store: db.Store, now: datetime) -> items.Item:
    created = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": "T"}, now)
    assert created is not None
    await store.write(items.transition_sync, created.id, State.DRAFTING, "system", now)

    def unit(conn: backend.Conn) -> items.Item:
        drafts.add_sync(conn, created.id, drafts.Body("draft text", {"drafter": "template"}), now)
        return items.transition_sync(conn, created.id, State.AWAITING_APPROVAL, "system", now)

    return await store.write(unit)


async def test_a_two_of_two_quorum_decided_at_once_is_approved(
    store: db.Store, now: datetime
) -> None:
    """Both operators vote at the same moment: the second decision must see the first
    vote (the item row is locked before the count), or the item waits forever."""
    item = await _awaiting(store, now)
    meeting = Meeting(2, after="vote")

    def deciding(operator: int) -> Callable[[backend.Conn], rule.Decision]:
        return meeting.holding(
            lambda conn: flow.decide_sync(
                conn, rule.Vote(Shown(item.id, 1, 1), operator, "approve"), now, quorum=2
            )
        )

    results = await asyncio.gather(store.write(deciding(1)), store.write(deciding(2)))
    assert sorted(r.outcome for r in results) == ["approved", "pending"]
    assert (await items.get(store, item.id)).state == State.APPROVED
    assert (await events.verify_chain(store)).ok


async def test_concurrent_holds_never_pass_the_limit(store: db.Store, now: datetime) -> None:
    """Every caller reads the budget with room left before any holds: only a check made
    in the holding UPDATE itself keeps the total within the limit."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000), "cli", now)
    meeting = Meeting(WRITERS, after="add_hold")  # each slot found short of room

    def beginning(n: int) -> Callable[[backend.Conn], claims.Work]:
        return meeting.holding(
            lambda conn: claims.begin_sync(
                conn,
                claims.Call(f"k{n}", "drafts.create", {"n": n}, 300, "news", None, timedelta(1)),
                now,
            )
        )

    results = await asyncio.gather(
        *(store.write(beginning(n)) for n in range(WRITERS)), return_exceptions=True
    )
    granted = [r for r in results if isinstance(r, claims.Work)]
    refused = [r for r in results if isinstance(r, errors.BudgetExceeded)]
    assert (len(granted), len(refused)) == (3, WRITERS - 3), results
    [row] = await store.read(lambda conn: budgets.current_sync(conn, now))
    assert (row.held_micros, row.spent_micros) == (900, 0)


async def test_a_limit_lowered_while_a_hold_commits_never_falls_below_use(
    store: db.Store, now: datetime
) -> None:
    """The operator lowers the limit to what is held now while a caller holds more: the
    new limit must be checked against the row as the hold left it, not as first read."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 1_000), "cli", now)
    for n in range(3):
        await store.write(_beginning(n, 300, now))
    meeting = Meeting(2)

    def lowering(conn: backend.Conn) -> budgets.Budget:
        return budgets.set_budget_sync(conn, budgets.Limit("global", "day", 920), "cli", now)

    results = await asyncio.gather(
        store.write(meeting.holding(lowering, after="lock_budget")),
        store.write(meeting.holding(_beginning(9, 100, now), after="add_hold")),
        return_exceptions=True,
    )
    refused = [r for r in results if isinstance(r, errors.Conflict | errors.BudgetExceeded)]
    assert len(refused) == 1, results
    [row] = await store.read(lambda conn: budgets.current_sync(conn, now))
    assert row.spent_micros + row.held_micros <= row.limit_micros, row


def _beginning(n: int, micros: int, now: datetime) -> Callable[[backend.Conn], claims.Work]:
    return lambda conn: claims.begin_sync(
        conn,
        claims.Call(f"k{n}", "drafts.create", {"n": n}, micros, "news", None, timedelta(1)),
        now,
    )


async def test_one_key_begun_at_once_makes_one_claim(store: db.Store, now: datetime) -> None:
    """Every caller looks the key up before any inserts: the losers must get the winner's
    claim back as a replay, not a unique-constraint error."""
    await ledger.set_budget(store, ledger.Limit("global", "day", 10_000), "cli", now)
    meeting = Meeting(4, after="by_idem")

    def beginning(conn: backend.Conn) -> claims.Work:
        return claims.begin_sync(
            conn,
            claims.Call("same", "drafts.create", {"n": 1}, 300, "news", None, timedelta(1)),
            now,
        )

    results = await asyncio.gather(*(store.write(meeting.holding(beginning)) for _ in range(4)))
    assert len({r.id for r in results}) == 1
    assert sorted(r.replayed for r in results) == [False, True, True, True]
    [row] = await store.read(lambda conn: budgets.current_sync(conn, now))
    assert row.held_micros == 300


async def test_events_appended_at_once_make_one_unbroken_chain(
    store: db.Store, now: datetime
) -> None:
    """Units that each append several events, all past their first append together: they
    share no chain head, and the sealer then makes one unbroken chain of them all."""
    meeting = Meeting(WRITERS, after="move")
    created = [
        await store.write(items.create_sync, "news", "feed", f"guid-{n}", {"n": n}, now)
        for n in range(WRITERS)
    ]

    def moving(item_id: int) -> Callable[[backend.Conn], None]:
        def unit(conn: backend.Conn) -> None:
            items.transition_sync(conn, item_id, State.DRAFTING, "system", now)
            items.transition_sync(conn, item_id, State.FAILED, "system", now, reason="x")

        return meeting.holding(unit)

    await asyncio.gather(*(store.write(moving(i.id)) for i in created if i is not None))
    assert (await events.verify_chain(store)).pending == 3 * WRITERS
    await sealer.seal(store)
    report = await events.verify_chain(store)
    assert report.ok, report.broken
    assert (report.checked, report.pending) == (3 * WRITERS, 0)  # created, drafting, failed


async def test_two_sealers_at_once_seal_one_unforked_chain(store: db.Store, now: datetime) -> None:
    """A deposed leader's sealer and the new one's, both past reading the head: the
    second seals after the first, from the head the first left, not beside it."""
    for n in range(7):
        await store.write(items.create_sync, "news", "feed", f"guid-{n}", {"n": n}, now)
    assert await sealer.seal(store, limit=1) == 1  # a head to lock
    meeting = Meeting(2, after="sealed_head")
    sealing = meeting.holding(lambda conn: sealer.seal_sync(conn, 3))
    assert await asyncio.gather(store.write(sealing), store.write(sealing)) == [3, 3]
    report = await events.verify_chain(store)
    assert (report.ok, report.checked, report.pending) == (True, 7, 0), report.broken


async def test_ids_marked_seen_at_once_are_new_to_exactly_one_writer(
    store: db.Store, now: datetime
) -> None:
    """Fetches of overlapping feeds at once: each id is new for exactly one of them."""
    ids = [f"id-{n}" for n in range(40)]
    meeting = Meeting(4, after="filter_unseen")

    def marking(offset: int) -> Callable[[backend.Conn], list[str]]:
        def unit(conn: backend.Conn) -> list[str]:
            mine = ids[offset:] + ids[:offset]
            unseen = seen.filter_unseen_sync(conn, "news", "feed", mine)
            return seen.mark_seen_sync(conn, "news", "feed", unseen, now)

        return meeting.holding(unit)

    results = await asyncio.gather(*(store.write(marking(10 * n)) for n in range(4)))
    new = [item_id for result in results for item_id in result]
    assert sorted(new) == sorted(ids)


async def test_a_unit_waiting_for_a_row_does_not_hold_up_the_chain(
    store: db.Store, now: datetime, caplog: pytest.LogCaptureFixture
) -> None:
    """A appends an event; B then locks an item, appends and commits, while A waits for
    that item. Were the chain's lock taken at A's append, B's append would wait for A
    and A for B: a deadlock, which PostgreSQL breaks after a second by failing one."""
    first, second = [
        await store.write(items.create_sync, "news", "feed", f"guid-{n}", {"n": n}, now)
        for n in (1, 2)
    ]
    assert first is not None and second is not None
    a_appended, both_appended = threading.Event(), threading.Barrier(2)

    def a(conn: backend.Conn) -> None:
        items.transition_sync(conn, first.id, State.DRAFTING, "system", now)
        a_appended.set()
        with contextlib.suppress(threading.BrokenBarrierError):
            both_appended.wait(MEETING_S)
        items.lock_sync(conn, second.id)

    def b(conn: backend.Conn) -> None:
        a_appended.wait(MEETING_S)
        items.transition_sync(conn, second.id, State.DRAFTING, "system", now)
        with contextlib.suppress(threading.BrokenBarrierError):
            both_appended.wait(MEETING_S)

    with caplog.at_level("INFO", logger="store.backends.pg"):
        await asyncio.gather(store.write(a), store.write(b))
    assert [r.message for r in caplog.records if "running it again" in r.message] == []
    assert (await events.verify_chain(store)).ok


NEWS = spec.Pipeline.model_validate(
    {
        "name": "news",
        "schedule": "1h",
        "sources": [{"type": "rss", "url": "http://127.0.0.1:9/feed.xml", "scope": "s"}],
        "dispatch": {"type": "file", "path": "/tmp/never-written"},
    }
)


@pytest.mark.parametrize("second_hash", ["same", "other"])
async def test_one_idempotency_key_sent_twice_at_once_does_the_work_once(
    store: db.Store, now: datetime, second_hash: str
) -> None:
    """Both requests look the key up before either keeps an answer: the later insert
    must meet the first one's row and answer as a retry would (a conflict for another
    request), its own work undone, not fail on the key's unique constraint."""
    caller = await tokens.create(store, "ci", tokens.digest(tokens.new_token()), "cli", now)
    held = cast(db.Store, _Held(store, Meeting(2, after="remembered")))

    async def handing(n: int, request_hash: str) -> tokens.Answer:
        item = trigger.ItemIn(id=f"guid-{n}", title=f"item {n}")
        request = trigger.Request(caller, "k-1", request_hash, now)
        return await trigger.hand_over(held, {"news": NEWS}, request, "news", item)

    results = await asyncio.gather(
        handing(1, "same"), handing(2, second_hash), return_exceptions=True
    )
    answers = [r for r in results if isinstance(r, tokens.Answer)]
    assert len({a.body["item"] for a in answers}) == 1, results
    if second_hash == "other":
        assert sum(isinstance(r, trigger.Conflict) for r in results) == 1, results
    else:
        assert len(answers) == 2, results
    tables = await snapshot.tables(store)
    assert (len(tables["items"]), len(tables["api_requests"])) == (1, 1)
    assert (await events.verify_chain(store)).ok
