"""/skipped and /filtered: what a pipeline dropped before drafting, listed in chat.

The same reads as `gatehouse skipped` and `gatehouse filtered` (pipelines.operations);
/skipped's buttons (one per entry, 🔁 1, 🔁 2, ...) each bring an entry to a card; after
a tap the list is edited (`replayed_on_list`): the entry struck through and marked with
where its card goes, its button marked, the other buttons kept.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime

from telegram import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.constants import ParseMode

from bot.chat import kit, render
from bot.ground import callbacks
from pipelines import operations
from pipelines.config import spec
from store import items
from store.items.machine import State

#: Skipped entries /skipped shows, newest first (a keyboard of one button each).
SKIPPED_SHOWN = 20
#: Filtered entries /filtered shows, newest first.
FILTERED_SHOWN = 20
#: Buttons per keyboard row: five fit a phone's width.
PER_ROW = 5
#: What a replayed entry's button says beside its number.
REPLAYED_MARK = "✓ replayed"


@kit.command
async def skipped(update: Update, context: kit.Context, d: kit.Deps, now: datetime) -> None:
    """The entries a pipeline's triage skipped, with a button each that replays it."""
    name = kit.pipeline_arg(context, "skipped")
    found = await operations.skipped(d.store, name, SKIPPED_SHOWN + 1)
    shown = found[:SKIPPED_SHOWN]
    text = render.skipped(name, shown, now, more=len(found) > SKIPPED_SHOWN)
    await kit.reply(update, text, skipped_keyboard(d.key, shown))


@kit.command
async def filtered(update: Update, context: kit.Context, d: kit.Deps, now: datetime) -> None:
    """The entries a pipeline's filter dropped, each with its rule (/replay brings one back)."""
    name = kit.pipeline_arg(context, "filtered")
    found = await operations.filtered(d.store, name, FILTERED_SHOWN + 1)
    shown = found[:FILTERED_SHOWN]
    await kit.reply(update, render.filtered(name, shown, now, len(found) > FILTERED_SHOWN))


def skipped_keyboard(key: bytes, shown: list[items.Item]) -> InlineKeyboardMarkup | None:
    """🔁 n under the list, one per entry in its order."""

    def button(n: int, item: items.Item) -> InlineKeyboardButton:
        tapped = callbacks.Button("replay", item.id, item.attempt, item.version)
        return InlineKeyboardButton(f"🔁 {n}", callback_data=callbacks.encode(key, tapped))

    keys = [button(n, item) for n, item in enumerate(shown, 1)]
    rows = [keys[i : i + PER_ROW] for i in range(0, len(keys), PER_ROW)]
    return InlineKeyboardMarkup(rows) if rows else None


def card_goes(pipeline: spec.Pipeline, private: bool) -> str:
    """Where a replayed entry's card comes, as the list that brought it back says it."""
    if pipeline.approval.chat is not None:
        return "its card comes to the pipeline's group once drafted"
    if private:
        return "its card comes here once drafted"
    return "its card comes to each approver's private chat once drafted"


async def replayed_on_list(query: CallbackQuery, d: kit.Deps, now: datetime, where: str) -> bool:
    """Edit a /skipped list after one of its entries was replayed: that entry struck
    through with where its card goes, its button marked, every other button kept.
    False when the tapped message is no such list (a card, an alert): nothing edited."""
    message = query.message
    markup = getattr(message, "reply_markup", None)
    keys = [key for row in markup.inline_keyboard for key in row] if markup else []
    if not keys or not all(_numbered(key) for key in keys):
        return False
    try:
        tapped = [callbacks.decode(d.key, str(key.callback_data)) for key in keys]
    except callbacks.InvalidButton:
        return False
    listed = [await items.get(d.store, button.item_id) for button in tapped]
    # An entry leaves `skipped` only by a replay (the state is otherwise terminal).
    gone = {item.id: where for item in listed if item.state != State.SKIPPED}
    more = "older ones:" in (getattr(message, "text", None) or "")
    text = render.skipped(listed[0].pipeline, listed, now, more, gone)
    await query.edit_message_text(
        text, parse_mode=ParseMode.HTML, reply_markup=marked(keys, listed, gone)
    )
    return True


def marked(
    keys: list[InlineKeyboardButton], listed: list[items.Item], gone: Mapping[int, str]
) -> InlineKeyboardMarkup:
    """The list's buttons as they were, a replayed entry's marked "🔁 n ✓ replayed" (a tap
    on it again is answered: already replayed)."""
    shown = [
        InlineKeyboardButton(
            " ".join([*key.text.split()[:2], REPLAYED_MARK]) if item.id in gone else key.text,
            callback_data=key.callback_data,
        )
        for key, item in zip(keys, listed, strict=True)
    ]
    return InlineKeyboardMarkup([shown[i : i + PER_ROW] for i in range(0, len(shown), PER_ROW)])


def _numbered(key: InlineKeyboardButton) -> bool:
    """A /skipped list's button: "🔁 3", or "🔁 3 ✓ replayed"."""
    parts = key.text.split()
    return len(parts) >= 2 and parts[0] == "🔁" and parts[1].isdigit() and bool(key.callback_data)
