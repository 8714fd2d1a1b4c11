"""Reminders, escalation and digests for drafts awaiting approval.

    report = await nudges.sweep(store, pipelines, now)     # one pass (tests)
    RuntimeConfig(..., workers=(nudges.worker,))           # the bot: a pass every CHECK_EVERY_S

Per pipeline (`approval:` in its YAML):
- `remind_after`: once an item has waited that long, the approvers get one reminder,
  a reply to its card (no new card);
- `escalate_after` with `escalate_to`: once it has waited that long, those operators get
  the card and may decide on it from then on;
- `digest` (a cron expression): at each slot, one message lists what waits, with
  "Approve all" / "Reject all" bound to the listed versions (no card per item).

A reminder and an escalation are each recorded once per item attempt, with an event,
in one unit with the message they queue; a digest once per slot (its outbox key).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from pipelines.approval import flow
from pipelines.config import spec
from pipelines.ground import waiting
from pipelines.operations import review
from pipelines.service import seams
from store import backend, drafts, errors, items, outbox, payloads, units
from store.audit import events
from store.db import Store
from store.items.machine import State
from store.review import followups

log = logging.getLogger(__name__)

#: How often the bot looks for reminders, escalations and digests due (seconds).
CHECK_EVERY_S = 30.0
#: Waiting items looked at per pipeline and pass (the longest-waiting first).
BATCH = 200
#: A digest slot older than this when first seen (the bot was down) is skipped.
DIGEST_GRACE = timedelta(hours=1)


@dataclass
class Report:
    reminded: list[int] = field(default_factory=list)
    escalated: list[int] = field(default_factory=list)
    digests: list[str] = field(default_factory=list)


async def sweep(store: Store, pipelines: Mapping[str, spec.Pipeline], now: datetime) -> Report:
    """Send what is due now; a second pass at the same moment sends nothing.

    A pipeline whose pass fails is logged and skipped: the others still get theirs.
    """
    report = Report()
    for pipeline in pipelines.values():
        try:
            await _pipeline(store, pipeline, now, report)
        except errors.Closed:
            raise
        except Exception:
            log.exception(
                "reminders and digests of %s failed; trying again next pass", pipeline.name
            )
    return report


async def _pipeline(store: Store, pipeline: spec.Pipeline, now: datetime, report: Report) -> None:
    rules = pipeline.approval
    if rules.remind_after is not None or rules.escalate_after is not None:
        # The longest-waiting first: they are the ones a reminder is for.
        waiting = await items.in_state(store, State.AWAITING_APPROVAL, pipeline.name, BATCH)
        # Read first, so a pass writes only for what is due and not yet sent.
        sent_before = await followups.nudges_of(store, [item.id for item in waiting])
        kinds: tuple[tuple[followups.NudgeKind, timedelta | None, list[int]], ...] = (
            ("remind", rules.remind_after, report.reminded),
            ("escalate", rules.escalate_after, report.escalated),
        )
        for item in waiting:
            for kind, after, sent in kinds:
                due = after is not None and now - item.last_transition_at >= after
                due = due and (item.id, item.attempt, kind) not in sent_before
                if due and await _send(store, pipeline, item, kind, now):
                    sent.append(item.id)
    if rules.digest is not None and await _digest(store, pipeline, now):
        report.digests.append(pipeline.name)


async def _send(
    store: Store,
    pipeline: spec.Pipeline,
    item: items.Item,
    kind: followups.NudgeKind,
    now: datetime,
) -> bool:
    return await store.write(_nudge, pipeline, item.id, item.attempt, kind, now)


async def escalate(
    store: Store, pipeline: spec.Pipeline, shown: followups.Shown, operator_id: int, now: datetime
) -> bool:
    """Bring in `escalate_to` now, at an approver's tap on the card `shown` (a card too few
    may approve offers it); False when its attempt was escalated already or is no longer
    waiting."""
    item_id, attempt = shown.item_id, shown.attempt
    if not pipeline.approval.escalate_to:
        raise errors.Conflict(f"{pipeline.name} has no approval.escalate_to to bring in")

    def unit(conn: backend.Conn) -> bool:
        flow.check_operator(pipeline, operator_id, conn, (item_id, attempt))
        by = events.operator(operator_id)
        return _nudge(conn, pipeline, item_id, attempt, "escalate", now, by=by)

    return await store.write(unit)


def _nudge(
    conn: backend.Conn,
    pipeline: spec.Pipeline,
    item_id: int,
    attempt: int,
    kind: followups.NudgeKind,
    now: datetime,
    *,
    by: str | None = None,
) -> bool:
    """One reminder or escalation, due after a wait (the sweep) or asked for (`by`)."""
    item = items.lock_sync(conn, item_id)  # re-read: it may have been decided meanwhile
    if item.state != State.AWAITING_APPROVAL or item.attempt != attempt:
        return False
    if not followups.nudge_sync(conn, item_id, attempt, kind, now):
        return False
    wait = units.duration(now - item.last_transition_at)
    if kind == "remind":
        reason = f"reminded the approvers after {wait}"
        text = f"🔔 Reminder: item {item_id} ({pipeline.name}) has waited {wait} for a decision"
        reminder = payloads.Alert(
            "info",
            text,
            item_id,
            pipeline=pipeline.name,
            attempt=attempt,
            reply_to_version=item.version,
        )
        outbox.enqueue_sync(
            conn,
            "alert",
            outbox.OPERATORS,
            reminder.to_json(),
            now,
            item_id=item_id,
            dedupe_key=f"remind:{item_id}:{attempt}",
        )
    else:
        who = ", ".join(map(str, pipeline.approval.escalate_to))
        reason = f"escalated to {who} " + (f"by {by}" if by else f"after {wait}")
        draft = drafts.get_sync(conn, item_id, item.version)
        note = f"🔺 escalated to you: waiting for a decision for {wait}"
        card = flow.Card(draft, note, chats=pipeline.approval.escalate_to)
        flow.queue_card(conn, pipeline, item, card, now)
    events.append(
        conn,
        "item",
        item_id,
        item.state,
        item.state,
        by or "sweep",
        now,
        attempt=attempt,
        reason=reason,
    )
    return True


def _last_slot(pipeline: spec.Pipeline, now: datetime) -> datetime | None:
    """The digest's latest cron slot at or before `now`, if within DIGEST_GRACE."""
    digest = pipeline.approval.digest
    assert digest is not None and digest.cron is not None
    from croniter import croniter

    slot: datetime = croniter(digest.cron, now + timedelta(seconds=1)).get_prev(datetime)
    slot = slot.astimezone(UTC)
    return slot if now - slot <= DIGEST_GRACE else None


async def _digest(store: Store, pipeline: spec.Pipeline, now: datetime) -> bool:
    slot = _last_slot(pipeline, now)
    if slot is None:
        return False
    key = f"digest:{pipeline.name}:{slot.isoformat()}"
    if await outbox.queued(store, key):
        return False
    listed = await review.offer(store, pipeline.name, now)
    if not listed.items:
        return False
    lines = [f"📋 {pipeline.name}: {len(listed.items)} awaiting approval"]
    lines += [
        f"• item {item.id} v{item.version}: {str(item.payload.get('title') or item.source_id)[:80]}"
        f" · waiting {units.duration(now - item.last_transition_at)}"
        for item in listed.items
    ]
    digest = payloads.Alert(
        "info",
        "\n".join(lines),
        pipeline=pipeline.name,
        offer=listed.offer.id,
        count=len(listed.items),
    )
    payload = digest.to_json()

    def unit(conn: backend.Conn) -> bool:
        queued = outbox.enqueue_sync(conn, "alert", outbox.OPERATORS, payload, now, dedupe_key=key)
        return queued is not None

    return await store.write(unit)


async def worker(runtime: seams.Piped, stop: asyncio.Event) -> None:
    """A pass every CHECK_EVERY_S until `stop` (a RuntimeConfig worker)."""
    while not stop.is_set():
        await sweep(runtime.store, runtime.pipelines, runtime.now())
        await waiting.wait_any((stop,), CHECK_EVERY_S)
