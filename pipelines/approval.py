"""The approval step: cards in the outbox, operator decisions and edits.

The Telegram handlers and the CLI both call these; each call is one transaction
holding the vote or the new draft, the transition it causes, and the outbox rows
(card edit, new card, dispatch) that must follow it.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from pipelines import config
from pipelines.text import similarity, validation
from store import backend, decisions, drafts, errors, events, items, outbox, payloads
from store.db import Store
from store.drafts import Draft
from store.items import Item
from store.machine import State


class NotAllowed(errors.Refused):
    """This operator may not decide on this pipeline's drafts."""


def queue_card(
    conn: backend.Conn,
    pipeline: config.Pipeline,
    item: Item,
    draft: Draft,
    now: datetime,
    *,
    note: str | None = None,
    duplicate: similarity.Earlier | None = None,
) -> int | None:
    """Queue the approval card for one draft version (at most once per version)."""
    payload: dict[str, Any] = {
        "pipeline": pipeline.name,
        "title": item.payload.get("title", ""),
        "link": item.payload.get("link"),
        # No "text": readers of the card join its draft row (store.outbox).
        "attempt": item.attempt,
        "version": draft.version,
        "drafter": draft.provenance.get(
            "drafter", "operator" if "operator" in draft.provenance else "?"
        ),
        "cost_micros": draft.cost_micros,
        "note": note,
        "quorum": pipeline.approval.quorum,
        "duplicate_of": duplicate.item_id if duplicate else None,
        "duplicate_reason": "similar to an item approved recently" if duplicate else None,
    }
    key = f"card:{item.id}:{item.attempt}:{draft.version}"
    return outbox.enqueue_sync(
        conn, "card", outbox.OPERATORS, payload, now, item_id=item.id, dedupe_key=key
    )


def _status_line(decision: decisions.Decision, operator_id: int, choice: str, now: datetime) -> str:
    at = now.strftime("%Y-%m-%d %H:%M UTC")
    if decision.outcome == "approved":
        who = ", ".join(events.operator(o) for o in decision.approvals)
        return f"✅ approved by {who} at {at}"
    if decision.outcome == "rejected":
        return f"❌ rejected by {events.operator(operator_id)} at {at}"
    return f"⏳ {len(decision.approvals)}/{decision.quorum} approvals"


def check_operator(pipeline: config.Pipeline, operator_id: int) -> None:
    allowed = pipeline.approval.operators
    if allowed and operator_id not in allowed:
        raise NotAllowed(f"operator {operator_id} is not among {pipeline.name}'s approvers")


async def decide(
    store: Store,
    pipeline: config.Pipeline,
    item_id: int,
    attempt: int,
    version: int,
    operator_id: int,
    choice: decisions.Choice,
    now: datetime,
) -> decisions.Decision:
    """Record one operator's decision on the version their card showed."""
    check_operator(pipeline, operator_id)

    def unit(conn: backend.Conn) -> decisions.Decision:
        decision = decisions.decide_sync(
            conn,
            item_id,
            attempt,
            version,
            operator_id,
            choice,
            now,
            quorum=pipeline.approval.quorum,
        )
        if decision.outcome == "unchanged":
            return decision
        edit = payloads.CardEdit(
            item_id,
            attempt,
            version,
            decision.item.state.value,
            _status_line(decision, operator_id, choice, now),
            decision.approvals if choice == "approve" else (operator_id,),
        )
        outbox.enqueue_sync(
            conn, "card_edit", outbox.OPERATORS, edit.to_json(), now, item_id=item_id
        )
        if decision.outcome == "approved":
            dispatch = payloads.Dispatch(item_id, attempt, version, pipeline.name)
            key = f"dispatch:{item_id}:{attempt}:{version}"
            outbox.enqueue_sync(
                conn,
                "dispatch",
                pipeline.name,
                dispatch.to_json(),
                now,
                item_id=item_id,
                dedupe_key=key,
            )
        return decision

    return await store.write(unit)


async def edit(
    store: Store,
    pipeline: config.Pipeline,
    item_id: int,
    shown_version: int,
    text: str,
    operator_id: int,
    now: datetime,
) -> Draft:
    """An operator's replacement text: validated like any draft, then a new card."""
    check_operator(pipeline, operator_id)
    validation.validate(text, pipeline.draft.output_schema)
    actor = events.operator(operator_id)

    def unit(conn: backend.Conn) -> Draft:
        draft = drafts.edit_sync(conn, item_id, shown_version, text, operator_id, now)
        item = items.get_sync(conn, item_id)
        old = payloads.CardEdit(
            item_id,
            item.attempt,
            shown_version,
            State.AWAITING_APPROVAL.value,
            f"✏️ edited by {actor}: see version {draft.version} below",
        )
        outbox.enqueue_sync(
            conn, "card_edit", outbox.OPERATORS, old.to_json(), now, item_id=item_id
        )
        queue_card(conn, pipeline, item, draft, now, note=f"edited by {actor}")
        return draft

    return await store.write(unit)
