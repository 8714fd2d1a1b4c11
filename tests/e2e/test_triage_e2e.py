"""End to end: the real bot (in this process) with a pipeline whose priced triage skips an
entry: a card only for the entry that passed, its note giving the score; /skipped lists the
skipped one with the model's reason, its button brings it to a card past triage, and
/stats counts what happened."""

from __future__ import annotations

import json
from datetime import timedelta
from pathlib import Path

from store import items, ledger
from store.items.machine import State
from store.ledger import prices as ledger_prices
from tests.e2e import test_bot_e2e as e2e
from tests.e2e.test_nudges_e2e import (
    OPERATOR,
    answers,
    card_texts,
    feed,  # noqa: F401  (the fixture)
    running,
    set_budget,
    told,
)
from tests.fakes.feed_server import FeedServer
from tests.fakes.llm_server import FakeLLM

DRAFT = """\
triage:
  question: "Is this the first story?"
  threshold: 0.6
draft:
  drafter: llm
  prompt: prompt.txt"""
REASON = "triage 0.20: a second story, not the first"


def answer(text: str) -> str | None:
    """Triage: the first story passes, the second is skipped; drafts as usual."""
    if not text.startswith("Question:"):
        return None
    if "First story" in text:
        return json.dumps({"score": 0.9, "reason": "the first story"})
    return json.dumps({"score": 0.2, "reason": "a second story, not the first"})


async def test_skipped_entries_are_listed_and_a_tap_brings_one_to_a_card(
    tmp_path: Path,
    feed: FeedServer,  # noqa: F811
) -> None:
    (tmp_path / "pipelines").mkdir()
    (tmp_path / "pipelines" / "prompt.txt").write_text("Write a post about {title}.\n{text}\n")
    price = ledger_prices.Price(input_micros_per_mtok=1, output_micros_per_mtok=1)
    with FakeLLM() as model:
        model.answer = answer
        llm = {
            "llm": {"kind": "openai", "base_url": model.base_url, "api_key": "k", "model": "m"},
            "prices": {"m": price},
        }
        await set_budget(tmp_path / "data")
        async with running(tmp_path, feed, "", draft=DRAFT, llm=llm) as bot:
            api, store = bot.api, bot.runtime.store
            card = (await api.await_for(lambda: card_texts(api, OPERATOR)[:1], timeout=60))[0]
            assert "First story" in card.text and "triage 0.90: the first story" in card.text

            async def skipped() -> list[items.Item]:
                return await items.in_state(store, State.SKIPPED, "news")

            for _ in range(600):  # a bound, not a speed
                if found := await skipped():
                    break
                await api.await_for(lambda: True, timeout=0.1)
            [second] = found
            assert second.reason == REASON
            assert not [c for c in card_texts(api, OPERATOR) if "Second story" in c.text]

            api.inject_command(OPERATOR, OPERATOR, "/skipped news")
            listing = (await api.await_for(lambda: told(api, "skipped, newest first"), 10))[0]
            assert "Second story" in listing.text and REASON in listing.text
            # Past the floor between automatic entries into drafting (store.items.machine.FLOOR).
            bot.clock.offset = timedelta(seconds=6)
            tap = api.inject_callback(
                OPERATOR, OPERATOR, listing.message_id, e2e.button(listing, "🔁 1")
            )
            said = (await api.await_for(lambda: answers(api, tap), timeout=10))[0]
            assert said["text"] == "replayed: attempt 2"
            again = await api.await_for(
                lambda: [c for c in card_texts(api, OPERATOR) if "Second story" in c.text],
                timeout=60,
            )
            assert e2e.item_id_of(again[0]) == second.id
            # The list says what the tap did: the entry struck and marked with where its
            # card comes, its button marked (not removed), no "Tap a number" left to do.
            edited = (
                await api.await_for(
                    lambda: api.history(OPERATOR, listing.message_id)[1:], timeout=10
                )
            )[-1]
            assert "✓ replayed: its card comes here once drafted" in edited.text, edited.text
            assert "Every entry listed was replayed." in edited.text
            assert "Tap a number" not in edited.text
            assert any(e["type"] == "strikethrough" for e in edited.entities)
            assert e2e.button(edited, "🔁 1 ✓ replayed")
            assert "its card comes here once drafted" in told(api, "replayed by")[-1].text
            # Two triage calls, each paid once, and two drafts: the replay is not triaged.
            report = await ledger.report(store, bot.clock())
            [spend] = report.pipelines
            assert (spend.pipeline, spend.claims) == ("news", 4) and model.calls == 4

            # /stats has the numbers: two entries, one skipped, two cards (one a replay).
            api.inject_command(OPERATOR, OPERATOR, "/stats news 30d")
            numbers = (await api.await_for(lambda: told(api, "last 30 days"), 10))[0].text
            assert "entries 2 · filtered 0 · skipped 1 · carded 2" in numbers
            assert "approved 0 · rejected 0" in numbers and "approval rate n/a" in numbers
            api.inject_command(OPERATOR, OPERATOR, "/stats 9d")
            refused = (await api.await_for(lambda: told(api, "neither a window"), 10))[0].text
            assert "usage: /stats [pipeline] [7d | 30d]" in refused
