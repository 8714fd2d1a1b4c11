"""The card follows its item to the end: where a dispatch went, why it failed (with a
Retry button), a retry, and a fresh copy of a card whose message is gone.

Each function queues outbox rows inside the caller's unit, with the transition they
report, so a card never says "sent" about a dispatch that did not commit:

    edit = card_trail.dispatched_row(conn, item, detail, external_id)  # 📤 sent: ...
    items.apply(conn, [items.Move(item, State.DISPATCHED, ..., effects=[edit])])  # (with the move)
    card_trail.failed_sync(conn, item, reason, now)                # ⚠️ not sent: ... [Retry]
    item = await card_trail.retry(store, pipeline, shown, operator_id, now)  # Retry's tap
    await card_trail.show_again(store, item_id, chat_id, now)      # a fresh card to one chat
    await card_trail.resend_open(store, now)                       # every open card, anew

Status lines name people as `operator:<id>`; the bot shows their names when it sends. A
card sent again answers its earlier copy in each chat, and that copy is edited to say
so, without buttons (`again_of` on the card, `again_as` on the edit; bot.chat.edits).
"""

from __future__ import annotations

from datetime import datetime

from pipelines.approval import flow
from pipelines.config import spec
from store import backend, errors, items, outbox, payloads
from store.audit import events
from store.db import Store
from store.items import Item
from store.items.machine import State
from store.review import followups, redispatch

#: The target of a card sent to one chat only: "chat:<id>".
CHAT_TARGET = "chat:"
#: Open cards sent again at most, oldest first (a resend is for a chat that lost them).
RESEND_LIMIT = 100


def _previous_status(conn: backend.Conn, item: Item) -> str:
    """The newest status line the card showed for this version (who approved it)."""
    for row in outbox.for_item_sync(conn, item.id, "card_edit"):
        shown = (row.payload.get("attempt"), row.payload.get("version"))
        if shown == (item.attempt, item.version) and row.payload.get("status"):
            return str(row.payload["status"]).split("\n")[0]
    return ""


def _edit_row(
    conn: backend.Conn, item: Item, state: State, line: str, buttons: str = ""
) -> outbox.Queued:
    before = _previous_status(conn, item)
    status = f"{before}\n{line}" if before else line
    edit = payloads.CardEdit(item.id, item.attempt, item.version, state.value, status, (), buttons)
    return outbox.Queued(item.id, "card_edit", outbox.OPERATORS, edit.to_json())


def sent_line(detail: str, external_id: str | None = None) -> str:
    """ "📤 sent: webhook host answered 200 · id abc", "📤 sent to ana@example.org via ..."."""
    if detail == "no dispatch target":
        return "🏁 done: this pipeline sends nothing"
    line = f"📤 {detail}" if detail.startswith("sent ") else f"📤 sent: {detail}"
    if external_id and external_id not in detail:
        line += f" · id {external_id}"  # the receiver's id for it, or the mail's Message-ID
    return line


def dispatched_row(
    conn: backend.Conn, item: Item, detail: str, external_id: str | None
) -> outbox.Queued:
    """The card's edit saying where the draft went, to queue with the item's move to
    dispatched."""
    return _edit_row(conn, item, State.DISPATCHED, sent_line(detail, external_id))


def failed_sync(conn: backend.Conn, item: Item, reason: str, now: datetime) -> None:
    """The card shows the error, with a Retry button."""
    edit = _edit_row(conn, item, State.FAILED, f"⚠️ not sent: {reason}", payloads.RETRY_BUTTONS)
    outbox.put_sync(conn, edit, now)


async def retry(
    store: Store, pipeline: spec.Pipeline, shown: followups.Shown, operator_id: int, now: datetime
) -> Item:
    """Dispatch again with the same idempotency key (same attempt and version)."""
    flow.check_operator(pipeline, operator_id)
    actor = events.operator(operator_id)
    item_id, attempt, version = shown

    def unit(conn: backend.Conn) -> Item:
        item = redispatch.retry_sync(conn, shown, actor, now)
        tries = len(outbox.for_item_sync(conn, item_id, "dispatch"))
        payload = payloads.Dispatch(item_id, attempt, version, pipeline.name).to_json()
        key = f"dispatch:{item_id}:{attempt}:{version}:{tries}"
        outbox.enqueue_sync(
            conn, "dispatch", pipeline.name, payload, now, item_id=item_id, dedupe_key=key
        )
        line = f"🔁 retry by {actor} at {now:%H:%M} UTC"
        outbox.put_sync(conn, _edit_row(conn, item, State.APPROVED, line), now)
        return item

    return await store.write(unit)


def _copy(item: Item, copied: outbox.Row, target: str, key: str) -> outbox.Queued:
    """`copied` as a new card for `target`, saying which card it copies."""
    # The card row does not repeat its draft: readers join the draft's text.
    payload = {k: v for k, v in copied.payload.items() if k != "text"} | {"again_of": copied.id}
    return outbox.Queued(item.id, "card", target, payload, key)


def _again_sync(conn: backend.Conn, item: Item, copy: outbox.Queued, now: datetime) -> int | None:
    """Queue `copy` (a `_copy`) and, with it, the edit that points its earlier copies at
    the new one: one unit, so a crash keeps both or neither, and the edit waits in the
    outbox until the new card is sent (bot.chat.edits)."""
    payload, target = copy.payload, copy.target
    card = outbox.put_sync(conn, copy, now)
    if card is not None:
        edit = payloads.CardEdit(
            item.id,
            item.attempt,
            int(payload["version"]),
            item.state.value,
            pipeline=str(payload.get("pipeline") or ""),
            again_as=card,
        )
        outbox.enqueue_sync(
            conn,
            "card_edit",
            target,
            edit.to_json(),
            now,
            item_id=item.id,
            dedupe_key=f"again:{card}",
        )
    return card


async def show_again(store: Store, item_id: int, chat_id: int, now: datetime) -> int | None:
    """Queue a fresh copy of the item's card for one chat; None if it no longer waits."""

    def unit(conn: backend.Conn) -> int | None:
        item = items.get_sync(conn, item_id)
        if item.state != State.AWAITING_APPROVAL:
            raise errors.Conflict(f"item {item_id} is {item.state}: nothing waits for a decision")
        shown = [
            row
            for row in outbox.for_item_sync(conn, item_id, "card")
            if (row.payload.get("attempt"), row.payload.get("version"))
            == (item.attempt, item.version)
        ]
        if not shown:
            return None
        # The first card of the version: a later copy may be an escalation's, for others.
        key = f"card:{item_id}:{item.attempt}:{item.version}:{chat_id}:{len(shown)}"
        copy = _copy(item, shown[-1], f"{CHAT_TARGET}{chat_id}", key)
        return _again_sync(conn, item, copy, now)

    return await store.write(unit)


async def resend_open(store: Store, now: datetime) -> list[int]:
    """Queue each awaiting item's newest card again, as a new message, for a chat that
    lost the old one; its decision then edits the new copy, and the old copies point to
    it. Returns the items resent."""

    def unit(conn: backend.Conn) -> list[int]:
        resent = []
        for item in items.in_state_sync(conn, State.AWAITING_APPROVAL, limit=RESEND_LIMIT):
            cards = outbox.for_item_sync(conn, item.id, "card")
            if not cards:
                continue
            newest = cards[0]
            if newest.state != "sent":
                continue  # still on its way (or given up on, with an alert): not lost
            key = f"card:{item.id}:{item.attempt}:{newest.payload.get('version')}:again:{newest.id}"
            if _again_sync(conn, item, _copy(item, newest, outbox.OPERATORS, key), now) is not None:
                resent.append(item.id)
        return resent

    return await store.write(unit)
