"""The write units that move an item through drafting, each one transaction with its
event: into drafting, and out of it to approval (the draft and its card), skipped (the
triage's verdict) or failed (the item's own fault, with its alert).

    moved = await store.write(moves.start_drafting, waiting, now)
    reached = await store.write(moves.to_approval, pipeline, item, result, duplicate, now)
"""

from __future__ import annotations

import dataclasses
import logging
from datetime import datetime, timedelta

from pipelines.approval import flow
from pipelines.config import spec
from pipelines.drafting import drafters
from pipelines.text import similarity
from store import backend, drafts, errors, items, outbox
from store.backends import text as store_text
from store.intake import seen
from store.items import Item
from store.machine import State

log = logging.getLogger(__name__)


def start_drafting(conn: backend.Conn, waiting: list[Item], now: datetime) -> list[Item]:
    """Move waiting items to drafting in one transaction; skip those that must wait.

    Those still where they were read move together in one statement; each of the rest
    is tried alone, which says why it waits (or finds it in drafting already)."""
    together = {i.id: i for i in items.move_many_sync(conn, waiting, State.DRAFTING, "system", now)}
    moved = []
    for item in waiting:
        if item.id in together:
            moved.append(together[item.id])
            continue
        try:
            moved.append(
                items.transition_sync(
                    conn, item.id, State.DRAFTING, "system", now, expect_attempt=item.attempt
                )
            )
        except (items.Throttled, errors.Conflict, errors.IllegalTransition) as exc:
            # Checked before anything is written, so skipping leaves the unit clean.
            log.info("item %s not drafted now: %s", item.id, exc)
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
    draft is stored under that version; any other is locked and decided on."""
    window = pipeline.approval.window
    image, digest = _image(item, result), pipeline.approval.digest
    draft = drafts.unstored(
        item.id, item.version + 1, result.text, result.provenance, now,
        cost_micros=result.cost_micros, image_url=image,
    )  # fmt: skip
    # The card goes with the move (else the pipeline's digest lists the item).
    card = () if digest else [flow.card_row(conn, pipeline, item, draft, note=result.note,
                                            duplicate=duplicate)]  # fmt: skip
    quick = items.move_many_sync(
        conn, [item], State.AWAITING_APPROVAL, "system", now, deadline=window, new_version=True,
        queue=card,
    )  # fmt: skip
    if quick:
        drafts.insert_sync(
            conn, item.id, draft.version, result.text, result.provenance, now,
            cost_micros=result.cost_micros, image_url=image,
        )  # fmt: skip
    else:
        found = _locked_to_approval(conn, item, result, window, now)
        if found is None:
            return False
        moved, stored = found
        if digest is None:
            flow.queue_card(conn, pipeline, moved, stored, now, note=result.note,
                            duplicate=duplicate)  # fmt: skip
    if pipeline.dedup.mark_at == "success":
        seen.mark_seen_sync(conn, pipeline.name, item.scope, [item.source_id], now)
    return True


def _locked_to_approval(
    conn: backend.Conn,
    item: Item,
    result: drafters.DraftResult,
    window: timedelta,
    now: datetime,
) -> tuple[Item, drafts.Draft] | None:
    """`to_approval` for an item no longer as it was read: locked, and drafted and moved
    only if still in this attempt's drafting (None, writing nothing, if not); the move
    says why it cannot be made."""
    current = items.lock_sync(conn, item.id)
    if current.state != State.DRAFTING or current.attempt != item.attempt:
        return None
    draft = drafts.add_sync(
        conn, item.id, result.text, result.provenance, now, cost_micros=result.cost_micros,
        image_url=_image(item, result), locked=current,
    )  # fmt: skip
    # The row locked above, at the version the draft just set: not read a third time.
    drafted = dataclasses.replace(current, version=draft.version)
    moved = items.transition_sync(
        conn, item.id, State.AWAITING_APPROVAL, "system", now, deadline=window,
        expect_attempt=item.attempt, locked=drafted,
    )  # fmt: skip
    return moved, draft


def skip(conn: backend.Conn, item: Item, verdict: str, now: datetime) -> None:
    """The triage's verdict ends the item skipped; the event gives score and reason."""
    reason = store_text.clean(verdict)[:2000]
    items.transition_sync(
        conn, item.id, State.SKIPPED, "system", now, reason=reason, expect_attempt=item.attempt
    )


def fail(conn: backend.Conn, item: Item, exc: drafters.DraftFailed, now: datetime) -> None:
    """The item's own fault ends it failed, with one alert saying why."""
    reason = store_text.clean(f"{exc.reason}: {exc}")[:2000]
    items.transition_sync(
        conn, item.id, State.FAILED, "system", now, reason=reason, expect_attempt=item.attempt
    )
    text = f"❌ item {item.id} ({item.pipeline}) failed while drafting: {reason}"
    if exc.raw is not None:
        text += f"\nraw output: {store_text.clean(exc.raw[:1000])}"
    key = f"draft-failed:{item.id}:{item.attempt}"
    outbox.alert_sync(conn, text, now, key=key, item_id=item.id, pipeline=item.pipeline)


def _image(item: Item, result: drafters.DraftResult) -> str | None:
    """The draft's image: the feed's, else one its drafting found (the article page's)."""
    image = item.payload.get("image_url")
    return str(image) if image else result.image_url
