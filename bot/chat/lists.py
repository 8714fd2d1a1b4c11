"""/skipped and /filtered: what a pipeline dropped before drafting, listed in chat.

The same reads as `gatehouse skipped` and `gatehouse filtered` (pipelines.operations);
/skipped's buttons (one per entry, 🔁 1, 🔁 2, ...) each bring an entry to a card.
"""

from __future__ import annotations

from datetime import datetime

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update

from bot.cards import callbacks
from bot.chat import handlers, render
from pipelines import operations
from store import items

#: Skipped entries /skipped shows, newest first (a keyboard of one button each).
SKIPPED_SHOWN = 20
#: Filtered entries /filtered shows, newest first.
FILTERED_SHOWN = 20
#: Buttons per keyboard row: five fit a phone's width.
PER_ROW = 5


@handlers.command
async def skipped(
    update: Update, context: handlers.Context, d: handlers.Deps, now: datetime
) -> None:
    """The entries a pipeline's triage skipped, with a button each that replays it."""
    name = handlers.pipeline_arg(context, "skipped")
    found = await operations.skipped(d.store, name, SKIPPED_SHOWN + 1)
    shown = found[:SKIPPED_SHOWN]
    text = render.skipped(name, shown, now, more=len(found) > SKIPPED_SHOWN)
    await handlers.reply(update, text, skipped_keyboard(d.key, shown))


@handlers.command
async def filtered(
    update: Update, context: handlers.Context, d: handlers.Deps, now: datetime
) -> None:
    """The entries a pipeline's filter dropped, each with its rule (/replay brings one back)."""
    name = handlers.pipeline_arg(context, "filtered")
    found = await operations.filtered(d.store, name, FILTERED_SHOWN + 1)
    shown = found[:FILTERED_SHOWN]
    await handlers.reply(update, render.filtered(name, shown, now, len(found) > FILTERED_SHOWN))


def skipped_keyboard(key: bytes, shown: list[items.Item]) -> InlineKeyboardMarkup | None:
    """🔁 n under the list, one per entry in its order."""

    def button(n: int, item: items.Item) -> InlineKeyboardButton:
        tapped = callbacks.Button("replay", item.id, item.attempt, item.version)
        return InlineKeyboardButton(f"🔁 {n}", callback_data=callbacks.encode(key, tapped))

    keys = [button(n, item) for n, item in enumerate(shown, 1)]
    rows = [keys[i : i + PER_ROW] for i in range(0, len(keys), PER_ROW)]
    return InlineKeyboardMarkup(rows) if rows else None
