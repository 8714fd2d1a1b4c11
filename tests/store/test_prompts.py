"""Edit prompts in a real store: remembered, answered once, forgotten when stale."""

from __future__ import annotations

from datetime import datetime, timedelta

from store import db, items
from store.review import prompts


async def test_a_prompt_is_kept_until_answered_or_stale(store: db.Store, now: datetime) -> None:
    item = await store.write(items.create_sync, "news", "s", "a", {"title": "A"}, now)
    assert item is not None
    await prompts.remember(store, prompts.Message(42, 7), item.id, 1, now)
    asked = await prompts.get(store, 42, 7)
    assert asked == prompts.Prompt(42, 7, item.id, 1, now)
    assert await prompts.get(store, 43, 7) is None  # another chat's message 7
    # The same message asked again (a retried send) keeps the latest question.
    await prompts.remember(store, prompts.Message(42, 7), item.id, 2, now)
    assert (await prompts.get(store, 42, 7)) == prompts.Prompt(42, 7, item.id, 2, now)
    await prompts.forget(store, 42, 7)
    assert await prompts.get(store, 42, 7) is None
    # A prompt nobody answered goes when a later one is asked, past KEEP.
    await prompts.remember(store, prompts.Message(42, 8), item.id, 2, now)
    later = now + prompts.KEEP + timedelta(seconds=1)
    await prompts.remember(store, prompts.Message(42, 9), item.id, 2, later)
    assert await prompts.get(store, 42, 8) is None
    assert await prompts.get(store, 42, 9) is not None
