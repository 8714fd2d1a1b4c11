"""The write units that move an item through drafting, each one transaction with its
event: into drafting, and out of it to approval (the draft and its card), skipped (the
triage's verdict) or failed (the item's own fault, with its alert).

    moved = await store.write(moves.start_drafting, waiting, now)
    reached = await store.write(moves.to_approval, pipeline, item, result, duplicate, now)
"""

from __future__ import annotations

import logging
from datetime import datetime

from pipelines.approval import flow
from pipelines.config import spec
from pipelines.drafting import drafters
from pipelines.text import similarity
from store import backend, drafts, items, outbox, payloads
from store.backends import text as store_text
from store.intake import seen
from store.items import Item
from store.items.machine import State

log = logging.getLogger(__name__)


def start_drafting(conn: backend.Conn, waiting: list[Item], now: datetime) -> list[Item]:
    """Move waiting items to drafting in one transaction; skip those that must wait.

    Those still where they were read move together; each of the rest is answered by
    the move, which says why it waits (or finds it in drafting already, as it is)."""
    asked = [items.Move(item, State.DRAFTING, "system", now, any_version=True) for item in waiting]
    moved = []
    for answer in items.apply(conn, asked):
        if isinstance(answer, items.Moved):
            moved.append(answer.item)
            continue
        if answer.why == "repeat" and answer.item:  # in drafting already: taken as it is
            moved.append(answer.item)
        elif answer.why == "gone":
            raise answer.error()
        else:  # refused before anything is written, so skipping leaves the unit clean
            log.info("item %s not drafted now: %s", answer.move.seen.id, answer.detail)
    return moved


def to_approval(
    conn: backend.Conn,
    pipeline: spec.Pipeline,
    item: Item,
    result: drafters.DraftResult,
    duplicate: similarity.Earlier | None,
    now: datetime,
) -> bool:
    """Store the draft, move to awaiting_approval and queue the card: one transaction.
    False, writing nothing, when the item left this attempt's drafting meanwhile (a
    worker that read it before another worker's late reply reached approval).

    An item still as it was read moves to its next version in one statement, and the
    draft is stored under that version; any other is locked and answered by the move."""
    window = pipeline.approval.window
    image, digest = _image(item, result), pipeline.approval.digest
    body = drafts.Body(result.text, result.provenance, result.cost_micros, image, result.tells)
    draft = drafts.unstored(item.id, item.version + 1, body, now)
    # The card goes with the move (else the pipeline's digest lists the item).
    shows = flow.Card(draft, result.note, duplicate)
    card = () if digest else [flow.card_row(conn, pipeline, item, shows)]
    move = items.Move(
        item, State.AWAITING_APPROVAL, "system", now, deadline=window, effects=card,
        new_version=True,
    )  # fmt: skip
    [answer] = items.apply(conn, [move])
    if isinstance(answer, items.Refused):
        if answer.why in ("throttled", "gone"):
            raise answer.error()
        return False  # it left this attempt's drafting (or this version) meanwhile
    drafts.insert_sync(conn, item.id, answer.item.version, body, now)
    if pipeline.dedup.mark_at == "success":
        seen.mark_seen_sync(conn, pipeline.name, item.scope, [item.source_id], now)
    return True


def skip(conn: backend.Conn, item: Item, verdict: str, now: datetime) -> None:
    """The triage's verdict ends the item skipped; the event gives score and reason."""
    reason = store_text.clean(verdict)[:2000]
    skipped = items.Move(item, State.SKIPPED, "system", now, reason=reason, any_version=True)
    items.apply_one(conn, skipped)


def fail(conn: backend.Conn, item: Item, exc: drafters.DraftFailed, now: datetime) -> None:
    """The item's own fault ends it failed, with one alert saying why."""
    reason = store_text.clean(f"{exc.reason}: {exc}")[:2000]
    failed = items.Move(item, State.FAILED, "system", now, reason=reason, any_version=True)
    items.apply_one(conn, failed)
    text = f"❌ item {item.id} ({item.pipeline}) failed while drafting: {reason}"
    if exc.raw is not None:
        text += f"\nraw output: {store_text.clean(exc.raw[:1000])}"
    key = f"draft-failed:{item.id}:{item.attempt}"
    outbox.alert_sync(
        conn, payloads.Alert(text=text, item_id=item.id, pipeline=item.pipeline), now, key=key
    )


def _image(item: Item, result: drafters.DraftResult) -> str | None:
    """The draft's image: the feed's, else one its drafting found (the article page's)."""
    image = item.payload.get("image_url")
    return str(image) if image else result.image_url
