"""The /skipped list after one tap: the replayed entry struck through and marked with
where its card comes, its button marked, every other entry and button as it was.

Real store rows (two skipped entries, one replayed through operations.replay); the
bot's own render and keyboard functions.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from bot.chat import lists, render
from pipelines import operations
from store import db, items
from store.items.machine import State

NOW = datetime(2026, 12, 2, 12, 0, tzinfo=UTC)
KEY = b"k" * 32


async def two_skipped(store: db.Store) -> list[items.Item]:
    for n in range(2):
        at = NOW - timedelta(hours=2 - n)
        item = await store.write(
            items.create_sync, "news", "feed", f"g{n}", {"title": f"Story {n}"}, at
        )
        assert item is not None
        await store.write(items.transition_sync, item.id, State.DRAFTING, "system", at)
        await store.write(
            items.transition_sync, item.id, State.SKIPPED, "system", at,
            reason=f"triage 0.{n}0: off topic",
        )  # fmt: skip
    return await operations.skipped(store, "news")


async def test_the_list_marks_the_replayed_entry_and_keeps_the_others(store: db.Store) -> None:
    listed = await two_skipped(store)
    keys = lists.skipped_keyboard(KEY, listed)
    assert keys is not None
    await operations.replay(store, operations.Replay(listed[0].id, "operator:7"), NOW)
    after = [await items.get(store, item.id) for item in listed]
    where = {listed[0].id: "its card comes here once drafted"}
    assert render.skipped("news", after, NOW, False, where) == (
        "<b>news</b>: 2 skipped, newest first\n"
        "<s>1. #2 Story 1</s> ✓ replayed: its card comes here once drafted\n"
        "2. #1 Story 0 (2 h ago)\n"
        "    <i>triage 0.00: off topic</i>\n"
        "Tap a number to bring that entry to a card (a replay past triage)."
    )
    buttons = [key for row in keys.inline_keyboard for key in row]
    shown = [key for row in lists.marked(buttons, after, where).inline_keyboard for key in row]
    assert [key.text for key in shown] == ["🔁 1 ✓ replayed", "🔁 2"]
    assert [key.callback_data for key in shown] == [key.callback_data for key in buttons]
