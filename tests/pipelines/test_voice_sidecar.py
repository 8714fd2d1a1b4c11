"""A draft's tells as kept beside its version: read back as lint gave them, named on the
card in one line; the plan's voice step that finds them; and a
block tell that one tap, the terminal and a list do not approve, and Approve anyway does."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from pipelines.approval import flow, rule
from pipelines.drafting import drafters, steps
from pipelines.operations import review
from pipelines.voice import lint, sidecar
from pipelines.voice.rules import Rule
from store import backend, db, drafts, items
from store.audit import events
from store.items import Item
from store.items.machine import State
from store.review.followups import Shown
from tests.pipelines import test_review as review_tests

TEXT = "We delve into the budget \u2014 and delve again! It's not just a park, it's a promise."


def test_a_text_without_tells_keeps_nothing_and_shows_nothing() -> None:
    kept = sidecar.of(lint.lint("The council met on Tuesday."))
    assert kept is None
    assert sidecar.line(kept) == "" and not sidecar.blocked(kept)


def test_the_sidecar_reads_back_the_line_lint_gives() -> None:
    tells = lint.lint(TEXT)
    kept = sidecar.of(tells)
    assert kept is not None and kept["total"] == len(tells.hits)
    assert sidecar.line(kept) == lint.summary(tells) != ""
    assert [hit[0] for hit in kept["hits"]] == [hit.rule for hit in tells.hits]


def test_a_block_tell_is_kept_as_a_block() -> None:
    rules = lint.Rules([Rule("shouting", "block", "One mark at most.", pattern="!")])
    kept = sidecar.of(lint.lint(TEXT, rules))
    assert sidecar.blocked(kept)
    assert not sidecar.blocked(sidecar.of(lint.lint(TEXT)))


def test_a_long_draft_keeps_max_kept_hits_and_still_names_every_rule() -> None:
    text = "delve " * (sidecar.MAX_KEPT + 50) + "A bustling market."
    tells = lint.lint(text)
    kept = sidecar.of(tells)
    assert kept is not None
    assert len(kept["hits"]) == sidecar.MAX_KEPT and kept["total"] == len(tells.hits)
    assert "bustling" not in str(kept["hits"])  # past the kept hits, yet on the line:
    assert "bustling" in sidecar.line(kept) and sidecar.line(kept) == lint.summary(tells)


class _Fixed:
    async def draft(self, item: Item, now: datetime) -> drafters.DraftResult:
        return drafters.DraftResult(TEXT, {"drafter": "template"}, cost_micros=0)


async def test_the_voice_step_keeps_the_drafts_tells_with_the_result(store: db.Store) -> None:
    now = datetime(2026, 12, 7, tzinfo=UTC)
    item = await store.write(items.create_sync, "news", "s0", "x", {"title": "T"}, now)
    assert item is not None
    rules = lint.Rules([Rule("delve", "warn", "Say what you did.", words=("delve",))])
    plan = steps.Plan(_Fixed(), voice=steps.Voice(rules))
    result = await plan.draft(item, now)
    assert result.text == TEXT
    assert sidecar.line(result.tells) == "✍️ 1 tell: delve (2)"
    assert (await steps.Plan(_Fixed()).draft(item, now)).tells is None


async def test_a_version_keeps_its_tells_and_one_without_its_image_keeps_them_too(
    store: db.Store,
) -> None:
    now = datetime(2026, 12, 7, tzinfo=UTC)
    item = await store.write(items.create_sync, "news", "s0", "x", {"title": "T"}, now)
    assert item is not None
    kept = sidecar.of(lint.lint(TEXT))
    body = drafts.Body(TEXT, {"drafter": "template"}, image_url="https://x.org/i.png", tells=kept)

    def drafted(conn: backend.Conn) -> drafts.Draft:
        draft = drafts.add_sync(conn, item.id, body, now)
        items.transition_sync(conn, item.id, State.DRAFTING, "system", now)
        items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)
        return draft

    first = await store.write(drafted)
    assert first.tells == kept and (await drafts.get(store, item.id, 1)).tells == kept
    removed = await store.write(drafts.remove_image_sync, drafts.Edit(item.id, 1, 7), now)
    assert removed.image_url is None and removed.tells == kept
    plain = await store.write(drafts.edit_sync, drafts.Edit(item.id, 2, 7), "Plain words.", now)
    assert plain.tells is None and (await drafts.get(store, item.id, 3)).tells is None


async def test_a_block_tell_refuses_one_tap_the_terminal_and_a_list_until_approved_anyway(
    store: db.Store,
) -> None:
    now = datetime(2026, 12, 7, tzinfo=UTC)
    p = review_tests.pipeline()
    blocked = sidecar.of(lint.lint(TEXT, lint.Rules([Rule("bang", "block", "No.", pattern="!")])))
    item = await store.write(items.create_sync, "news", "s", "g1", {"title": "T"}, now)
    assert item is not None and blocked is not None

    def drafted(conn: backend.Conn) -> Item:
        drafts.add_sync(conn, item.id, drafts.Body(TEXT, {"drafter": "t"}, tells=blocked), now)
        items.transition_sync(conn, item.id, State.DRAFTING, "system", now)
        return items.transition_sync(conn, item.id, State.AWAITING_APPROVAL, "system", now)

    waiting = await store.write(drafted)
    said = f"version 1 of item {item.id} has a block tell ({blocked['line']})"
    with pytest.raises(flow.BlockTell, match=re.escape(said)):
        await flow.decide(store, p, rule.Vote(Shown(item.id, 1, 1), 11, "approve"), now)
    with pytest.raises(flow.BlockTell, match="tap Approve anyway on its card"):
        typed = review.Typed("approve", item.id, "cli:ann")
        await review.at_terminal(store, {"news": p}, typed, now)
    listed = await review.offer(store, "news", now)
    vote = review.ListedVote(listed.offer.id, 11, "approve")
    result = await review.decide_listed(store, {"news": p}, vote, now)
    assert result.decided == [] and "has a block tell" in result.refused[0][1]
    assert (await items.get(store, item.id)).state == State.AWAITING_APPROVAL == waiting.state
    # Approve anyway goes past it, audited.
    anyway = rule.Vote(Shown(item.id, 1, 1), 11, "approve", anyway=True)
    decision = await flow.decide(store, p, anyway, now)
    assert decision.outcome == "approved"
    trail = await events.for_entity(store, "item", item.id)
    [override] = [e for e in trail if (e.reason or "").startswith("approve anyway")]
    assert override.actor == "operator:11" and override.to_state == State.AWAITING_APPROVAL
