"""The SLA sweep: warn at 80% of a transient state's deadline (and at least
`machine.WARN_LEAD` before it), act once it passes.

    report = await sla.sweep(store, now)

Past its deadline an item in drafting or dispatching moves to breach with the
reason "stuck in <state> since <time>"; one awaiting approval expires, and its card
says so and offers Replay. A warning about a waiting item is a reply to its card with
Approve, Reject and Extend; a breach's alert offers Replay. Each warning and each
breach queues one alert (deduplicated by key), so running the sweep again changes
nothing. The store finds what is due and moves it; when to warn,
what to do and what to say is decided here.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import datetime

from store import backend, clock, items, outbox, payloads, units
from store.db import Store
from store.items import Item, machine

#: Items looked at per sweep transaction, so one sweep never holds the writer long.
BATCH = 200


@dataclass(frozen=True)
class SweepReport:
    warned: tuple[int, ...]
    moved: tuple[int, ...]


def _since(item: Item) -> str:
    return units.when(item.last_transition_at)


def _warn_at(item: Item) -> datetime:
    """At 80 % of the stay, or earlier: at least WARN_LEAD before the deadline."""
    assert item.deadline is not None
    share = item.last_transition_at + (item.deadline - item.last_transition_at) * machine.WARN_AT
    return min(share, item.deadline - machine.WARN_LEAD)


def _entry_key(item: Item) -> str:
    # One key per stay in a state and deadline: a later stay (after a replay) or an
    # extended window warns again.
    stay = f"{item.id}:{item.attempt}:{item.state}:{clock.to_ms(item.last_transition_at)}"
    return f"{stay}:{clock.to_ms(item.deadline) if item.deadline else ''}"


def _sweep_items(conn: backend.Conn, item_ids: list[int], now: datetime) -> SweepReport:
    warned: list[int] = []
    moved: list[int] = []
    for item_id in item_ids:
        item = items.lock_sync(conn, item_id)  # re-read: it may have moved since the query
        if item.deadline is None or now < _warn_at(item):
            continue
        if now >= item.deadline:
            _act(conn, item, now)
            moved.append(item.id)
        elif _warn(conn, item, now):
            warned.append(item.id)
    return SweepReport(tuple(warned), tuple(moved))


def _left(item: Item, now: datetime) -> str:
    assert item.deadline is not None
    return units.duration(item.deadline - now)


def _warn(conn: backend.Conn, item: Item, now: datetime) -> bool:
    key = f"sla-warning:{_entry_key(item)}"
    # A waiting item's warning goes to the people who decide, as a reply to their card,
    # with what they can do now; others' to the alerts chat, as a reply where it can.
    waiting = item.state == machine.State.AWAITING_APPROVAL
    if waiting:
        text = f"is waiting for approval, {_left(item, now)} left"
    else:
        text = f"is still {item.state}, {_left(item, now)} left before it counts as stuck"
    warning = payloads.Alert(
        "warning",
        f"⏳ item {item.id} ({item.pipeline}) {text}",
        item.id,
        pipeline=item.pipeline,
        attempt=item.attempt,
        reply_to_version=item.version,
        buttons=payloads.DECIDE_BUTTONS if waiting else "",
    )
    target = outbox.OPERATORS if waiting else outbox.ALERTS
    row = outbox.enqueue_sync(
        conn, "alert", target, warning.to_json(), now, item_id=item.id, dedupe_key=key
    )
    return row is not None


def _act(conn: backend.Conn, item: Item, now: datetime) -> None:
    target = machine.ON_DEADLINE[item.state]
    if target == machine.State.EXPIRED:
        reason = (
            f"expired: nobody decided within the approval window (waiting since {_since(item)})"
        )
    else:
        reason = f"stuck in {item.state} since {_since(item)}"
    key = f"sla-{target}:{_entry_key(item)}"
    due = items.Move(item, target, "sweep", now, reason, any_version=True)
    moved = items.apply_one(conn, due)
    if item.state == machine.State.AWAITING_APPROVAL:
        # Its card still shows Approve and Reject: it says it expired, and offers Replay.
        edit = payloads.CardEdit(
            item.id,
            item.attempt,
            item.version,
            moved.state.value,
            f"⌛ expired at {units.when(now)}: nobody decided within the approval "
            f"window (waiting since {_since(item)})",
            buttons=payloads.REPLAY_BUTTONS,
            pipeline=item.pipeline,
        )
        outbox.enqueue_sync(
            conn, "card_edit", outbox.OPERATORS, edit.to_json(), now, item_id=item.id
        )
    alert = payloads.Alert(
        "error",
        f"🚨 item {item.id} ({item.pipeline}): {reason}",
        item.id,
        pipeline=item.pipeline,
        attempt=item.attempt,
        reply_to_version=item.version,
        buttons=payloads.REPLAY_BUTTONS,
    )
    outbox.enqueue_sync(
        conn, "alert", outbox.ALERTS, alert.to_json(), now, item_id=item.id, dedupe_key=key
    )


async def sweep(store: Store, now: datetime) -> SweepReport:
    """Find what is due on a read connection, then act in bounded write transactions."""
    due = await store.read(lambda conn: [item.id for item in items.sla_due_sync(conn, now)])
    warned: list[int] = []
    moved: list[int] = []
    for start in range(0, len(due), BATCH):
        chunk = due[start : start + BATCH]
        report = await store.write(functools.partial(_sweep_items, item_ids=chunk, now=now))
        warned += report.warned
        moved += report.moved
    return SweepReport(tuple(warned), tuple(moved))
