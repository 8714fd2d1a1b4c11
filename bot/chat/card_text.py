"""An approval card's text, as Telegram HTML: the card, its parts, the line it gains when decided.

Pure, as render is: every fetched or generated text goes through `render.esc`.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from bot.chat.render import esc, usd, when
from pipelines.text import telegram as telegram_text
from pipelines.text import validation

#: The longest title a card shows (characters).
TITLE_SHOWN = 1_000
#: Room kept free on a card's last part for the decision line added when it is edited.
DECISION_ROOM = 300


def card(item_id: int, payload: dict[str, Any]) -> str:
    """An approval card from a `card` outbox row's payload."""
    lines = [f"📝 <b>{esc(payload.get('pipeline', '?'))}</b> · item {item_id}"]
    # Cleaned as drafts are (items stored before titles were cleaned at load keep their
    # zero-width characters), so a title and a draft that opens with it compare equal.
    title = validation.clean(str(payload.get("title") or ""), TITLE_SHOWN)
    link = payload.get("link")
    # Every version's card has the same lines: the source as a link of its own, then the
    # title, unless the draft opens with it (the template drafter's shape): said once.
    if link:
        lines.append(f'🔗 <a href="{esc(link)}">source</a>')
    if title and not str(payload.get("text", "")).lstrip().startswith(title):
        lines.append(esc(title))
    if payload.get("duplicate_of") is not None:
        reason = payload.get("duplicate_reason") or "similar text"
        lines.append(f"⚠️ possible duplicate of item {esc(payload['duplicate_of'])}: {esc(reason)}")
    lines.append("")
    lines.extend(esc(payload.get("text", "")).split("\n"))
    if payload.get("tells"):  # the version's tells (pipelines.voice), under its text
        lines.append(esc(payload["tells"]))
    lines.append("")
    meta = [
        f"version {esc(payload.get('version', '?'))}",
        f"attempt {esc(payload.get('attempt', '?'))}",
        f"drafter {esc(payload.get('drafter', '?'))}",
        f"cost {usd(payload.get('cost_micros'))}",
    ]
    lines.append("<i>" + " · ".join(meta) + "</i>")
    if payload.get("note"):
        lines.append(f"<i>{esc(payload['note'])}</i>")
    if payload.get("short_of"):
        lines.append(f"⚠️ {esc(payload['short_of'])}")
    return "\n".join(lines)


def card_parts(item_id: int, payload: dict[str, Any]) -> list[str]:
    return telegram_text.split(card(item_id, payload), telegram_text.MAX_MESSAGE - DECISION_ROOM)


def decision_line(edit: dict[str, Any], at: datetime) -> str:
    """The line a decided card gains, from a `card_edit` payload (its status line if any)."""
    if edit.get("status"):
        return esc(edit["status"])
    who = ", ".join(str(x) for x in edit.get("decided_by") or []) or "?"
    state = str(edit.get("state", ""))
    if state == "rejected":
        return f"❌ rejected by {esc(who)} at {when(at)}"
    if state == "awaiting_approval":
        return f"⏳ votes so far: {esc(who)}"
    return f"✅ approved by {esc(who)} at {when(at)}"


#: The line an earlier copy of a card sent again gains (with its buttons gone).
SENT_AGAIN = "⤵️ sent again below: this copy is no longer live"


def decided_card(last_part: str, edit: dict[str, Any], at: datetime) -> str:
    return f"{last_part}\n\n{decision_line(edit, at)}"
