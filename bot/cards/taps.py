"""A card's buttons and the Edit prompt's reply: approve, edit, extend, escalate, retry,
show, replay (bot.cards.review_handlers has Reject, Undo, Redraft and a listed set's).

bot.cards.routes routes each button here once its tag is verified and its item read; each
handler gets a kit.ItemTap and answers the tap.
"""

from __future__ import annotations

import asyncio

from telegram import ForceReply, InlineKeyboardMarkup, Message, Update
from telegram.constants import ParseMode

from bot.cards import actions
from bot.chat import kit, lists, people, render, wording
from bot.ground import callbacks
from bot.web import metrics
from pipelines import operations
from pipelines.approval import card_trail, flow, rule
from pipelines.service import nudges
from store import drafts, errors, items, outbox, units
from store.audit import events
from store.items.machine import State
from store.review import followups, prompts

#: What the reply box says while an Edit prompt waits (Telegram shows at most 64 characters).
EDIT_PLACEHOLDER = "your text becomes the new draft"


def card_keyboard(
    key: bytes, shown: followups.Shown, *, escalate: bool = False, image: bool = False
) -> InlineKeyboardMarkup:
    """A card's buttons; with `escalate` (too few may approve it), Escalate too; with
    `image` (the version has one), a second row that removes it."""
    buttons: list[tuple[str, callbacks.Action]] = [
        ("✅ Approve", "approve"),
        ("❌ Reject", "reject"),
        ("✏️ Edit", "edit"),
    ]
    if escalate:
        buttons.append(("🔺 Escalate", "escalate"))
    row = actions.item_row(key, shown, *buttons)
    if not image:
        return row
    remove = actions.item_row(key, shown, ("🖼 Remove image", "noimage"))
    return InlineKeyboardMarkup([*row.inline_keyboard, *remove.inline_keyboard])


def warning_keyboard(key: bytes, shown: followups.Shown) -> InlineKeyboardMarkup:
    """Under an SLA warning: decide now, or give the item its window once more."""
    return actions.item_row(
        key, shown, ("✅ Approve", "approve"), ("❌ Reject", "reject"), ("⏳ Extend", "extend")
    )


def block_keyboard(key: bytes, shown: followups.Shown) -> InlineKeyboardMarkup:
    """In place of a card's buttons when its version has a block tell: approve it as it
    is, or back to the card's own buttons (Edit among them)."""
    return actions.item_row(key, shown, ("⚠️ Approve anyway", "approve_anyway"), ("← back", "back"))


async def approve(tap: kit.ItemTap) -> None:
    """Approve (or a vote toward a quorum) on the version the card showed; a version with a
    block tell is not approved by one tap: the answer names the tell, and the card offers
    Approve anyway."""
    try:
        await _approve(tap, anyway=False)
    except flow.BlockTell as exc:
        await tap.query.answer(actions.short(str(exc)), show_alert=True)
        await actions.replace_buttons(tap.query, block_keyboard(tap.deps.key, tap.button.shown))


async def approve_anyway(tap: kit.ItemTap) -> None:
    """Approve past the version's block tells; the override is in the item's events."""
    await _approve(tap, anyway=True)


async def _approve(tap: kit.ItemTap, *, anyway: bool) -> None:
    d, pipeline = tap.deps, tap.pipeline
    vote = rule.Vote(tap.button.shown, tap.user, "approve", anyway=anyway)
    decision = await flow.decide(d.store, pipeline, vote, tap.now)
    words = flow.vote_words(decision, pipeline, tap.user)
    said = actions.short(await people.humanize(d.store, words))
    if decision.outcome == "unchanged":
        await tap.query.answer(said)
        return
    # Edit the card now rather than at the sender's next pass, while the tap is answered.
    await asyncio.gather(tap.query.answer(said), d.sender.flush_item(tap.item.id, tap.now))
    await actions.settle_reply(tap.query)
    await metrics.decided(d.store, pipeline.name, decision, tap.now)


async def extend(tap: kit.ItemTap) -> None:
    """Give a waiting item its approval window once more."""
    d, now = tap.deps, tap.now
    item = await operations.review.extend(d.store, tap.pipeline, tap.button.shown, tap.user, now)
    assert item.deadline is not None
    left = units.duration(item.deadline - now)
    await asyncio.gather(
        tap.query.answer(f"⏳ extended: {left} left to decide"), d.sender.flush_item(item.id, now)
    )
    await actions.settle_reply(tap.query)


async def escalate(tap: kit.ItemTap) -> None:
    """Bring in approval.escalate_to now."""
    d, pipeline, button = tap.deps, tap.pipeline, tap.button
    brought = await nudges.escalate(d.store, pipeline, button.shown, tap.user, tap.now)
    if not brought:
        await tap.query.answer("already escalated, or no longer waiting", show_alert=True)
        return
    who = ", ".join(map(events.operator, pipeline.approval.escalate_to))
    await tap.query.answer(await people.humanize(d.store, f"🔺 escalated to {who}"))
    d.sender.wake()


async def remove_image(tap: kit.ItemTap) -> None:
    """A new version of the shown draft without its image (audited, like an edit)."""
    d, now = tap.deps, tap.now
    revision = flow.Revision(tap.item.id, tap.button.version, tap.user)
    draft = await flow.remove_image(d.store, tap.pipeline, revision, now)
    await asyncio.gather(
        tap.query.answer(f"🖼 image removed: version {draft.version} follows"),
        d.sender.flush_item(tap.item.id, now),
    )


async def ask_for_edit(tap: kit.ItemTap) -> None:
    """Prompt for the new draft's text, as a reply to the card."""
    item, d = tap.item, tap.deps
    if not (tap.current and item.state == State.AWAITING_APPROVAL):
        await tap.query.answer("This card is out of date: nothing to edit here.", show_alert=True)
        return
    await tap.query.answer()
    draft = await drafts.get(d.store, item.id, item.version)
    prompt: Message = await actions.tapped(tap.query).reply_text(
        actions.addressed(tap.query, actions.edit_prompt(item, draft.text)),
        parse_mode=ParseMode.HTML,
        reply_markup=ForceReply(selective=True, input_field_placeholder=EDIT_PLACEHOLDER),
    )
    asked = prompts.Message(prompt.chat_id, prompt.message_id)
    await prompts.remember(d.store, asked, item.id, item.version, d.clock())


async def replay(tap: kit.ItemTap) -> None:
    """Replay (or Fresh: paying for a new draft) under a card or an alert about the item."""
    item, d, query = tap.item, tap.deps, tap.query
    # For the item's approvers, as Approve is.
    flow.check_operator(tap.pipeline, tap.user)
    if item.attempt != tap.button.attempt:
        await query.answer("Already replayed: this offer is out of date.", show_alert=True)
        return
    actor = events.operator(tap.user)
    fresh = tap.button.action == "fresh"
    asked = operations.Replay(item.id, actor, fresh=fresh)
    replayed = await operations.replay(d.store, asked, tap.now, scheduler=d.scheduler)
    await query.answer(f"replayed: attempt {replayed.attempt}")
    private = actions.tapped(query).chat.type == "private"
    where = lists.card_goes(tap.pipeline, private)
    # A /skipped list keeps its other entries' buttons; a card or an alert loses its own.
    if not await lists.replayed_on_list(query, d, tap.now, where):
        await query.edit_message_reply_markup(reply_markup=None)
    when = render.when(tap.now)
    text = f"🔁 item {item.id} replayed by {actor} at {when}: attempt {replayed.attempt}; {where}"
    await actions.tapped(query).reply_text(await people.humanize(d.store, text))


async def show(tap: kit.ItemTap) -> None:
    """Point to the item's card with a reply to it, or queue a fresh card when it is gone."""
    item, d, query = tap.item, tap.deps, tap.query
    chat_id = actions.tapped(query).chat_id
    rows = await outbox.for_item(d.store, item.id, "card")
    if any(row.state == "pending" for row in rows):
        await query.answer("Its card is still being sent: it arrives in a moment.")
        return
    found = await actions.card_message(d.store, item, chat_id)
    if found is not None and await actions.quote_card(query, item, found):
        await query.answer("Its card is quoted below: tap the quote.")
        return
    if item.state != State.AWAITING_APPROVAL:
        await query.answer(f"item {item.id} is {wording.state(item.state)}; its card is gone")
        return
    await card_trail.show_again(d.store, item.id, chat_id, tap.now)
    d.sender.wake()
    await query.answer("A fresh card follows.")


async def retry(tap: kit.ItemTap) -> None:
    """Dispatch a failed item again with the same idempotency key."""
    d = tap.deps
    await card_trail.retry(d.store, tap.pipeline, tap.button.shown, tap.user, tap.now)
    await tap.query.answer("🔁 dispatching again")
    await d.sender.flush_item(tap.item.id, tap.now)


async def edit_reply(update: Update, context: kit.Context) -> None:
    """A reply to an Edit prompt becomes the item's new draft version and a new card."""
    message, d, prompt_id = kit.prompt_reply(update, context)
    asked = await prompts.get(d.store, message.chat_id, prompt_id)
    if asked is None:
        await message.reply_text("That prompt is no longer open: tap Edit on the card again.")
        return
    item_id, version = asked.item_id, asked.version
    item = await items.get(d.store, item_id)
    pipeline = d.pipelines[item.pipeline]
    assert message.from_user is not None
    try:
        revision = flow.Revision(item_id, version, message.from_user.id)
        draft = await flow.edit(d.store, pipeline, revision, message.text or "", d.clock())
    except errors.Refused as exc:
        await message.reply_text(f"Not saved: {exc}")
        return
    await prompts.forget(d.store, message.chat_id, prompt_id)
    await message.reply_text(f"Saved as version {draft.version}; a new card follows.")
    d.sender.wake()
