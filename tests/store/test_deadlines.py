"""Deadlines an operator can act on: the SLA warning about a waiting item, Extend, expiry."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

import pytest

from pipelines.approval import sla
from store import backend, db, drafts, errors, items, outbox, payloads
from store.audit import events
from store.items.machine import State
from store.review import deadlines
from store.review.followups import Shown
from tests import snapshot

WINDOW = timedelta(hours=2)


async def _waiting(store: db.Store, now: datetime) -> items.Item:
    item = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": "T"}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)

    def unit(conn: backend.Conn) -> items.Item:
        drafts.add_sync(conn, item.id, drafts.Body("draft text", {"drafter": "template"}), now)
        return items.transition_sync(
            conn, item.id, State.AWAITING_APPROVAL, "system", now, deadline=WINDOW
        )

    return await store.write(unit)


def _extend(
    item: items.Item, now: datetime, *, most: int = 1, version: int | None = None
) -> Callable[[backend.Conn], items.Item]:
    def unit(conn: backend.Conn) -> items.Item:
        shown = Shown(item.id, item.attempt, version or item.version)
        return deadlines.extend_sync(
            conn, shown, deadlines.Extension(WINDOW, most), "operator:7", now
        )

    return unit


async def test_a_warning_about_a_waiting_item_answers_its_card_with_what_to_do(
    store: db.Store, now: datetime
) -> None:
    item = await _waiting(store, now)
    assert (await sla.sweep(store, now + timedelta(minutes=100))).warned == (item.id,)
    [warning] = await outbox.due(store, now + timedelta(hours=1, minutes=40), ["alert"])
    assert warning.target == outbox.OPERATORS  # where the cards are, not the alerts chat
    alert = payloads.Alert.of(warning)
    assert alert.text == f"⏳ item {item.id} (news) is waiting for approval, 20 min left"
    assert (alert.pipeline, alert.attempt, alert.reply_to_version) == ("news", 1, 1)
    assert alert.buttons == payloads.DECIDE_BUTTONS


async def test_extend_moves_the_deadline_once_and_says_so_in_an_event(
    store: db.Store, now: datetime
) -> None:
    item = await _waiting(store, now)
    later = now + timedelta(minutes=100)
    extended = await store.write(_extend(item, later))
    assert extended.deadline == now + 2 * WINDOW
    assert (await items.get(store, item.id)).deadline == now + 2 * WINDOW
    [event] = (await events.for_entity(store, "item", item.id))[-1:]
    assert (event.from_state, event.to_state, event.actor) == (
        State.AWAITING_APPROVAL, State.AWAITING_APPROVAL, "operator:7",
    )  # fmt: skip
    assert event.reason == "window extended by 2 h, until 2026-11-30 16:00 UTC"

    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.Refused, match="extended once already; its pipeline allows 1"):
        await store.write(_extend(item, later))
    assert await snapshot.tables(store) == unchanged
    # Configured for more, the same item may be extended again.
    again = await store.write(_extend(item, later, most=2))
    assert again.deadline == now + 3 * WINDOW


async def test_extend_is_refused_for_a_card_out_of_date(store: db.Store, now: datetime) -> None:
    item = await _waiting(store, now)
    unchanged = await snapshot.tables(store)
    with pytest.raises(errors.Conflict, match="out of date"):
        await store.write(_extend(item, now, version=2))
    await store.write(items.transition_sync, item.id, State.APPROVED, "operator:7", now)
    with pytest.raises(errors.Conflict, match="out of date: item 1 is approved"):
        await store.write(_extend(item, now))
    assert len(await events.for_entity(store, "item", item.id)) == len(unchanged["events"]) + 1


async def test_an_extended_window_warns_again_before_its_new_deadline(
    store: db.Store, now: datetime
) -> None:
    item = await _waiting(store, now)
    assert (await sla.sweep(store, now + timedelta(minutes=100))).warned == (item.id,)
    await store.write(_extend(item, now + timedelta(minutes=100)))
    assert await sla.sweep(store, now + timedelta(hours=2, minutes=30)) == sla.SweepReport((), ())
    # 80 % of the stay from its start to the new deadline (4 h): 3 h 12 min.
    report = await sla.sweep(store, now + timedelta(hours=3, minutes=15))
    assert report.warned == (item.id,)
    assert (await items.get(store, item.id)).state == State.AWAITING_APPROVAL


async def test_an_expired_card_says_so_and_offers_replay(store: db.Store, now: datetime) -> None:
    item = await _waiting(store, now)
    assert (await sla.sweep(store, now + WINDOW)).moved == (item.id,)
    expired = await items.get(store, item.id)
    assert expired.state == State.EXPIRED
    [edit] = await outbox.for_item(store, item.id, "card_edit")
    assert edit.payload["status"] == (
        "⌛ expired at 2026-11-30 14:00 UTC: nobody decided within the approval window "
        "(waiting since 2026-11-30 12:00 UTC)"
    )
    assert edit.payload["buttons"] == payloads.REPLAY_BUTTONS
    [alert] = [row for row in await outbox.for_item(store, item.id, "alert")]
    assert payloads.Alert.of(alert).buttons == payloads.REPLAY_BUTTONS


@pytest.mark.parametrize(
    ("window", "said"),
    [(timedelta(seconds=40), "40 s"), (timedelta(seconds=150), "2 min 30 s")],
)
async def test_a_short_window_is_extended_by_what_it_is(
    store: db.Store, now: datetime, window: timedelta, said: str
) -> None:
    item = await _waiting(store, now)
    await store.write(
        lambda conn: deadlines.extend_sync(
            conn,
            Shown(item.id, item.attempt, item.version),
            deadlines.Extension(window, 1),
            "operator:7",
            now,
        )
    )
    [event] = (await events.for_entity(store, "item", item.id))[-1:]
    assert event.reason is not None and event.reason.startswith(f"window extended by {said},")


async def test_a_short_window_warns_early_enough_for_a_person_to_act(
    store: db.Store, now: datetime
) -> None:
    item = await store.write(items.create_sync, "news", "feed", "guid-1", {"title": "T"}, now)
    assert item is not None
    await store.write(items.transition_sync, item.id, State.DRAFTING, "system", now)

    def unit(conn: backend.Conn) -> items.Item:
        drafts.add_sync(conn, item.id, drafts.Body("draft text", {"drafter": "template"}), now)
        return items.transition_sync(
            conn, item.id, State.AWAITING_APPROVAL, "system", now, deadline=timedelta(seconds=60)
        )

    await store.write(unit)
    # 80 % of a minute would leave 12 s; the warning comes WARN_LEAD (40 s) ahead instead.
    assert (await sla.sweep(store, now + timedelta(seconds=19))).warned == ()
    assert (await sla.sweep(store, now + timedelta(seconds=20))).warned == (item.id,)
    [warning] = await outbox.due(store, now + timedelta(seconds=20), ["alert"])
    assert payloads.Alert.of(warning).text.endswith("is waiting for approval, 40 s left")
