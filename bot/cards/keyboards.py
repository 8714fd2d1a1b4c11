"""The buttons of decisions beyond one tap: reject reasons, Undo and Redraft under a
decided card, and "Approve all" / "Reject all" under a list (each behind a confirmation).

Every button is a tagged bot.ground.callbacks.Button naming the item version (or the list) it
acts on; bot.cards.review_handlers answers them.
"""

from __future__ import annotations

from telegram import InlineKeyboardButton, InlineKeyboardMarkup

from bot.ground import callbacks
from pipelines.config import spec
from pipelines.operations import review
from store import payloads
from store.review import followups


def _button(key: bytes, label: str, action: callbacks.Action, *ids: int) -> InlineKeyboardButton:
    item_id, attempt, version, *rest = ids
    data = callbacks.encode(key, callbacks.Button(action, item_id, attempt, version, *rest))
    return InlineKeyboardButton(label, callback_data=data)


def reasons_keyboard(
    key: bytes, pipeline: spec.Pipeline, ids: followups.Shown
) -> InlineKeyboardMarkup:
    """Reject's second step: the pipeline's reasons, "other…" (typed) and back."""
    presets = [
        _button(key, f"❌ {reason}", "why", *ids, index)
        for index, reason in enumerate(pipeline.approval.reject_reasons)
    ]
    rows = [presets[i : i + 2] for i in range(0, len(presets), 2)]
    rows.append([_button(key, "✍️ other…", "other", *ids), _button(key, "← back", "back", *ids)])
    return InlineKeyboardMarkup(rows)


def decided_keyboard(
    key: bytes, edit: payloads.CardEdit, pipeline: spec.Pipeline | None
) -> InlineKeyboardMarkup | None:
    """Under a decided card: Undo while its window lasts, Redraft once it is dropped."""
    ids = (edit.item_id, edit.attempt, edit.version)
    row = []
    if edit.undo_until:
        row.append(_button(key, "↩️ Undo", "undo", *ids))
    redraftable = edit.state in review.REDRAFTABLE
    if redraftable and pipeline is not None and pipeline.draft.drafter == "llm":
        row.append(_button(key, "🔄 Redraft", "redraft", *ids))
    return InlineKeyboardMarkup([row]) if row else None


def listed_keyboard(key: bytes, offer_id: int, count: int) -> InlineKeyboardMarkup:
    """Under a list of waiting items: decide on all of them, behind a confirmation."""
    return InlineKeyboardMarkup(
        [
            [
                _button(key, f"✅ Approve {_all(count)}", "all_approve", offer_id, 1, count),
                _button(key, f"❌ Reject {_all(count)}", "all_reject", offer_id, 1, count),
            ]
        ]
    )


def _all(count: int) -> str:
    return f"all {count}" if count > 1 else "it"


def confirm_keyboard(key: bytes, offer_id: int, count: int, choice: str) -> InlineKeyboardMarkup:
    action: callbacks.Action = "yes_approve" if choice == "approve" else "yes_reject"
    verb = "✅ Yes, approve" if choice == "approve" else "❌ Yes, reject"
    label = f"{verb} {_all(count).removeprefix('all ')}"
    ids = (offer_id, 1, count)
    return InlineKeyboardMarkup(
        [[_button(key, label, action, *ids), _button(key, "Cancel", "cancel", *ids)]]
    )
