"""A card's buttons and the Edit prompt's reply: approve, edit, retry, show, replay.

Registered by bot.app after bot.review_handlers, which takes Reject, Undo, Redraft and
the buttons of a listed set. A button's tag is verified before anything is read, so a
forged button changes nothing.
"""

from __future__ import annotations

import asyncio
from datetime import datetime
from typing import Any

from telegram import ForceReply, InlineKeyboardMarkup, Message, Update
from telegram.constants import ParseMode

from bot import callbacks, card_actions, handlers, metrics, people, render
from pipelines import approval, config, nudges, operations
from store import drafts, errors, events, items, prompts, units
from store.machine import State

#: What the reply box says while an Edit prompt waits (Telegram shows at most 64 characters).
EDIT_PLACEHOLDER = "your text becomes the new draft"


def card_keyboard(
    key: bytes, item_id: int, attempt: int, version: int, *, escalate: bool = False,
    image: bool = False,
) -> InlineKeyboardMarkup:  # fmt: skip
    """A card's buttons; with `escalate` (too few may approve it), Escalate too; with
    `image` (the version has one), a second row that removes it."""
    buttons: list[tuple[str, callbacks.Action]] = [
        ("✅ Approve", "approve"), ("❌ Reject", "reject"), ("✏️ Edit", "edit"),
    ]  # fmt: skip
    if escalate:
        buttons.append(("🔺 Escalate", "escalate"))
    row = card_actions.item_row(key, item_id, attempt, version, *buttons)
    if not image:
        return row
    remove = card_actions.item_row(key, item_id, attempt, version, ("🖼 Remove image", "noimage"))
    return InlineKeyboardMarkup([*row.inline_keyboard, *remove.inline_keyboard])


def warning_keyboard(key: bytes, item_id: int, attempt: int, version: int) -> InlineKeyboardMarkup:
    """Under an SLA warning: decide now, or give the item its window once more."""
    return card_actions.item_row(
        key, item_id, attempt, version,
        ("✅ Approve", "approve"), ("❌ Reject", "reject"), ("⏳ Extend", "extend"),
    )  # fmt: skip


async def tap(update: Update, context: handlers.Context) -> None:
    """A button: verify its tag, then decide, offer an edit, or replay; nothing else changes."""
    query = update.callback_query
    assert query is not None
    d = handlers.deps(context)
    now = d.clock()
    button = await handlers.verified_button(query, d.key)
    if button is None:
        return
    try:
        item = await items.get(d.store, button.item_id)
        pipeline = d.pipelines.get(item.pipeline)
        if pipeline is None:
            await query.answer(f"pipeline {item.pipeline} is no longer configured")
        elif button.action == "approve":  # Reject's reasons: bot.review_handlers
            await _decide(query, d, pipeline, button, now)
        elif button.action == "edit":
            await _ask_for_edit(query, d, item, button)
        elif button.action == "noimage":
            await _remove_image(query, d, pipeline, button, now)
        elif button.action == "extend":
            await _extend(query, d, pipeline, button, now)
        elif button.action == "escalate":
            await _escalate(query, d, pipeline, button, now)
        elif button.action == "retry":
            await card_actions.retry(query, d, pipeline, button, now)
        elif button.action == "show":
            await card_actions.show(query, d, item, now)
        else:
            await _replay(query, d, pipeline, item, button, now)
    except errors.Refused as exc:
        await query.answer(_short(str(exc)), show_alert=True)


def _short(text: str) -> str:
    return text if len(text) <= 190 else text[:187] + "..."


async def _decide(
    query: Any, d: handlers.Deps, pipeline: config.Pipeline, button: callbacks.Button, now: datetime
) -> None:
    decision = await approval.decide(
        d.store, pipeline, button.item_id, button.attempt, button.version,
        query.from_user.id, "approve", now,
    )  # fmt: skip
    said = _short(
        await people.humanize(d.store, approval.vote_words(decision, pipeline, query.from_user.id))
    )
    if decision.outcome == "unchanged":
        await query.answer(said)
        return
    # Edit the card now rather than at the sender's next pass, while the tap is answered.
    await asyncio.gather(query.answer(said), d.sender.flush_item(button.item_id, now))
    await card_actions.settle_reply(query)
    await metrics.decided(d.store, pipeline.name, decision, now)


async def _extend(
    query: Any, d: handlers.Deps, pipeline: config.Pipeline, button: callbacks.Button, now: datetime
) -> None:
    item = await operations.review.extend(
        d.store, pipeline, button.item_id, button.attempt, button.version, query.from_user.id, now
    )
    assert item.deadline is not None
    left = units.duration(item.deadline - now)
    await asyncio.gather(
        query.answer(f"⏳ extended: {left} left to decide"), d.sender.flush_item(item.id, now)
    )
    await card_actions.settle_reply(query)


async def _escalate(
    query: Any, d: handlers.Deps, pipeline: config.Pipeline, button: callbacks.Button, now: datetime
) -> None:
    brought = await nudges.escalate(
        d.store, pipeline, button.item_id, button.attempt, query.from_user.id, now
    )
    if not brought:
        await query.answer("already escalated, or no longer waiting", show_alert=True)
        return
    who = ", ".join(map(events.operator, pipeline.approval.escalate_to))
    await query.answer(await people.humanize(d.store, f"🔺 escalated to {who}"))
    d.sender.wake()


async def _remove_image(
    query: Any, d: handlers.Deps, pipeline: config.Pipeline, button: callbacks.Button, now: datetime
) -> None:
    draft = await approval.remove_image(
        d.store, pipeline, button.item_id, button.version, query.from_user.id, now
    )
    await asyncio.gather(
        query.answer(f"🖼 image removed: version {draft.version} follows"),
        d.sender.flush_item(button.item_id, now),
    )


async def _ask_for_edit(
    query: Any, d: handlers.Deps, item: items.Item, button: callbacks.Button
) -> None:
    if (item.state, item.attempt, item.version) != (
        State.AWAITING_APPROVAL, button.attempt, button.version,
    ):  # fmt: skip
        await query.answer("This card is out of date: nothing to edit here.", show_alert=True)
        return
    await query.answer()
    draft = await drafts.get(d.store, item.id, item.version)
    prompt: Message = await query.message.reply_text(
        card_actions.addressed(query, card_actions.edit_prompt(item, draft.text)),
        parse_mode=ParseMode.HTML,
        reply_markup=ForceReply(selective=True, input_field_placeholder=EDIT_PLACEHOLDER),
    )
    await prompts.remember(
        d.store, prompt.chat_id, prompt.message_id, item.id, item.version, d.clock()
    )


async def _replay(
    query: Any, d: handlers.Deps, pipeline: config.Pipeline, item: items.Item,
    button: callbacks.Button, now: datetime,
) -> None:  # fmt: skip
    # Under a card or an alert about the item: for its approvers, as Approve is.
    approval.check_operator(pipeline, query.from_user.id)
    if item.attempt != button.attempt:
        await query.answer("Already replayed: this offer is out of date.", show_alert=True)
        return
    actor = events.operator(query.from_user.id)
    fresh = button.action == "fresh"
    replayed = await operations.replay(
        d.store, item.id, actor, now, fresh=fresh, scheduler=d.scheduler
    )
    await query.answer(f"replayed: attempt {replayed.attempt}")
    await query.edit_message_reply_markup(reply_markup=None)
    text = (
        f"🔁 item {item.id} replayed by {actor} at {render.when(now)}: attempt {replayed.attempt}"
    )
    await query.message.reply_text(await people.humanize(d.store, text))


async def edit_reply(update: Update, context: handlers.Context) -> None:
    """A reply to an Edit prompt becomes the item's new draft version and a new card."""
    message = update.effective_message
    assert message is not None and message.reply_to_message is not None
    d = handlers.deps(context)
    prompt_id = message.reply_to_message.message_id
    asked = await prompts.get(d.store, message.chat_id, prompt_id)
    if asked is None:
        await message.reply_text("That prompt is no longer open: tap Edit on the card again.")
        return
    item_id, version = asked.item_id, asked.version
    item = await items.get(d.store, item_id)
    pipeline = d.pipelines[item.pipeline]
    assert message.from_user is not None
    try:
        draft = await approval.edit(
            d.store, pipeline, item_id, version, message.text or "", message.from_user.id, d.clock()
        )
    except errors.Refused as exc:
        await message.reply_text(f"Not saved: {exc}")
        return
    await prompts.forget(d.store, message.chat_id, prompt_id)
    await message.reply_text(f"Saved as version {draft.version}; a new card follows.")
    d.sender.wake()
