"""A pipeline's steps, walked in their one order: the triage, the full text, the draft,
each line a step adds said on the card in that order; an entry the triage skips or holds
reaches no step after it, and a replay goes past the triage."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import pytest

from pipelines.config import triage
from pipelines.drafting import drafters, steps
from store.items import Item
from store.items.machine import State

NOW = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def entry(attempt: int = 1) -> Item:
    return Item(
        1, "city", "s0", "k1", '{"title": "Trams", "text": "New line."}', "h", State.DRAFTING,
        attempt, 1, None, NOW, NOW, None,
    )  # fmt: skip


class Drafter:
    """Drafts the item's text, with a note of its own; says what it was given."""

    def __init__(self, note: str | None = "the drafter's note") -> None:
        self.note = note
        self.read: list[Item] = []

    async def draft(self, item: Item, now: datetime) -> drafters.DraftResult:
        self.read.append(item)
        return drafters.DraftResult(item.payload["text"], {"drafter": "t"}, note=self.note)


@dataclasses.dataclass
class Article:
    """A full-text step: the item's text replaced, a line after the draft's note."""

    ran: int = 0

    async def run(self, work: steps.Work) -> steps.Work:
        self.ran += 1
        read = dataclasses.replace(work.item, payload_json='{"text": "The article."}')
        return dataclasses.replace(
            work, item=read, after=(*work.after, "📄 article"), image_url="https://x.org/i.png"
        )


class Asked:
    """The triage's question, answering `verdict` (or raising it) and counting."""

    def __init__(self, verdict: triage.Verdict | Exception, on_failure: str = "pass") -> None:
        self.config = triage.TriageConfig(question="Trams?", threshold=0.6, on_failure=on_failure)
        self.verdict = verdict
        self.asked = 0

    async def ask(self, item: Item, now: datetime) -> triage.Verdict:
        self.asked += 1
        if isinstance(self.verdict, Exception):
            raise self.verdict
        return self.verdict


def plan(asked: Asked, drafter: Drafter, article: Article) -> steps.Plan:
    return steps.Plan(drafter, triage=steps.Triage(asked), full_text=article)


def test_the_order_is_triage_then_full_text_then_the_draft() -> None:
    drafter, article, asked = Drafter(), Article(), Asked(triage.Verdict(0.9, "trams"))
    listed = plan(asked, drafter, article).steps()
    assert listed == (steps.Triage(asked), article, steps.Draft(drafter))
    assert steps.Plan(drafter).steps() == (steps.Draft(drafter),)
    assert steps.plan_of(drafter) == steps.Plan(drafter)


async def test_each_steps_line_is_said_in_the_order_the_steps_ran() -> None:
    drafter, article = Drafter(), Article()
    result = await plan(Asked(triage.Verdict(0.9, "trams")), drafter, article).draft(entry(), NOW)
    assert result.text == "The article." and drafter.read[0].payload["text"] == "The article."
    assert result.note == "🔎 triage 0.90: trams\nthe drafter's note\n📄 article"
    assert result.image_url == "https://x.org/i.png"


async def test_a_draft_with_no_note_of_its_own_gets_only_the_steps_lines() -> None:
    result = await steps.Plan(Drafter(note=None), full_text=Article()).draft(entry(), NOW)
    assert result.note == "📄 article"
    plain = await steps.Plan(Drafter(note=None)).draft(entry(), NOW)
    assert plain.note is None and plain.image_url is None


async def test_an_entry_the_triage_skips_is_never_read_nor_drafted() -> None:
    drafter, article = Drafter(), Article()
    with pytest.raises(drafters.Skipped, match=r"triage 0\.10: weather"):
        await plan(Asked(triage.Verdict(0.1, "weather")), drafter, article).draft(entry(), NOW)
    assert (article.ran, drafter.read) == (0, [])


async def test_a_replay_goes_past_the_triage() -> None:
    asked, drafter = Asked(triage.Verdict(0.1, "weather")), Drafter()
    result = await plan(asked, drafter, Article()).draft(entry(attempt=2), NOW)
    assert asked.asked == 0 and result.note == "the drafter's note\n📄 article"


@pytest.mark.parametrize(
    ("raised", "said"),
    [
        (drafters.DraftFailed("no budget configured", reason="budget"), "no budget configured"),
        (drafters.AskAgain("HTTP 503", reason="provider"), "HTTP 503"),
        (
            drafters.DraftFailed("the draft is empty", reason="invalid_output"),
            "the triage model's answer was empty",
        ),
        (triage.InvalidVerdict("not a score"), "not a score"),
    ],
)
async def test_a_triage_that_cannot_run_drafts_on_pass_and_waits_on_hold(
    raised: Exception, said: str
) -> None:
    drafter, article = Drafter(), Article()
    result = await plan(Asked(raised), drafter, article).draft(entry(), NOW)
    assert result.note == f"⚠️ not triaged: {said}\nthe drafter's note\n📄 article"
    with pytest.raises(drafters.DraftWaits, match="on_failure: hold") as held:
        await plan(Asked(raised, on_failure="hold"), drafter, article).draft(entry(), NOW)
    assert held.value.reason == "triage" and article.ran == 1


async def test_a_triage_call_that_may_have_been_paid_holds_even_on_pass() -> None:
    drafter, article = Drafter(), Article()
    waits = drafters.DraftHeld("claim 7 is uncertain", claim_id=7)
    with pytest.raises(drafters.DraftHeld):
        await plan(Asked(waits), drafter, article).draft(entry(), NOW)
    assert (article.ran, drafter.read) == (0, [])
