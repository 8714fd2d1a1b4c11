"""Buttons and replies beyond one tap: reject reasons, Undo, Redraft, decisions on a list.

Registered by bot.app ahead of the card's own handlers: `tap` takes the buttons whose
callback_data matches PATTERN, `reply` the replies to its prompts (anything else goes on
to card_taps.edit_reply). Every action runs through pipelines.review, as the CLI's do.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime
from typing import Any

from telegram import ForceReply, InlineKeyboardMarkup, Update
from telegram import error as tg_error
from telegram.constants import ParseMode
from telegram.ext import ContextTypes

from bot import (
    callbacks,
    card_actions,
    card_taps,
    handlers,
    people,
    render,
    review_keyboards,
    sent_messages,
    wording,
)
from pipelines import approval, config
from pipelines.operations import review
from store import decisions, drafts, errors, events, followups, items
from store.machine import State

log = logging.getLogger(__name__)
Context = ContextTypes.DEFAULT_TYPE

#: The callback_data this module answers (its actions' codes, see bot.callbacks).
PATTERN = r"^1:[rwobudARYNc][0-9]?:"
#: What the reply box says while a prompt waits: what the reply will do.
PLACEHOLDERS: dict[followups.AskKind, str] = {
    "reject": "your text is the reason for the reject",
    "redraft": "your note goes to the model for a new draft",
}
_REFUSALS = (errors.Conflict, errors.IllegalTransition, errors.NotFound, approval.NotAllowed)


# -- buttons ------------------------------------------------------------------------------


async def tap(update: Update, context: Context) -> None:
    """A reject reason, Undo, Redraft or a list's button: verify its tag, then act."""
    query = update.callback_query
    assert query is not None
    d = handlers.deps(context)
    now = d.clock()
    button = await handlers.verified_button(query, d.key)
    if button is None:
        return
    try:
        if button.action in ("all_approve", "all_reject", "yes_approve", "yes_reject", "cancel"):
            await _listed(query, d, button, now)
            return
        item = await items.get(d.store, button.item_id)
        pipeline = d.pipelines.get(item.pipeline)
        if pipeline is None:
            await query.answer(f"pipeline {item.pipeline} is no longer configured")
            return
        await _on_item(query, d, pipeline, item, button, now)
    except _REFUSALS as exc:
        await query.answer(_short(str(exc)), show_alert=True)


async def _buttons(query: Any, markup: InlineKeyboardMarkup | None) -> None:
    """Replace the buttons under the tapped message; the same buttons again (a double
    tap) is no error."""
    try:
        await query.edit_message_reply_markup(markup)
    except tg_error.BadRequest as exc:
        if not sent_messages.not_modified(exc):
            raise


def _short(text: str) -> str:
    return text if len(text) <= 190 else text[:187] + "..."


async def _on_item(
    query: Any, d: handlers.Deps, pipeline: config.Pipeline, item: items.Item,
    button: callbacks.Button, now: datetime,
) -> None:  # fmt: skip
    ids = (button.item_id, button.attempt, button.version)
    shown = (item.attempt, item.version) == (button.attempt, button.version)
    open_ = shown and item.state == State.AWAITING_APPROVAL
    if button.action in ("reject", "back", "other") and not open_:
        await query.answer("This card is out of date: nothing to reject here.", show_alert=True)
    elif button.action == "reject":
        await query.answer()
        await _buttons(query, review_keyboards.reasons_keyboard(d.key, pipeline, *ids))
    elif button.action == "back":
        await query.answer()
        found = await approval.reach(d.store, pipeline, item)  # Escalate, if the card had it
        escalate = found.short and found.can_escalate
        image = (await drafts.get(d.store, item.id, item.version)).image_url is not None
        keyboard = card_taps.card_keyboard(d.key, *ids, escalate=escalate, image=image)
        await _buttons(query, keyboard)
    elif button.action == "other":
        await _ask(query, d, "reject", ids, f"Why reject item {item.id}? Reply with the reason.")
    elif button.action == "why":
        reasons = pipeline.approval.reject_reasons
        if button.arg >= len(reasons):
            await query.answer("That reason is no longer offered.", show_alert=True)
            return
        user = query.from_user.id
        await review.reject(d.store, pipeline, *ids, user, reasons[button.arg], now)
        await _answered(query, d, button.item_id, "❌ rejected", now)
    elif button.action == "undo":
        await review.undo(d.store, pipeline, *ids, query.from_user.id, now)
        await _answered(query, d, button.item_id, "↩️ undone: it awaits a decision again", now)
    elif not (shown and item.state in review.REDRAFTABLE):
        await query.answer("This card is out of date: nothing to redraft here.", show_alert=True)
    else:
        text = f"What should change in item {item.id}'s next draft? Reply with your note."
        await _ask(query, d, "redraft", ids, text)


async def _answered(query: Any, d: handlers.Deps, item_id: int, text: str, now: datetime) -> None:
    # Edit the card now rather than at the sender's next pass, while the tap is answered.
    await asyncio.gather(query.answer(text), d.sender.flush_item(item_id, now))
    await card_actions.settle_reply(query)


async def _ask(
    query: Any, d: handlers.Deps, kind: followups.AskKind, ids: tuple[int, int, int], text: str
) -> None:
    await query.answer()
    prompt = await query.message.reply_text(
        card_actions.addressed(query, render.esc(text)),
        parse_mode=ParseMode.HTML,
        reply_markup=ForceReply(selective=True, input_field_placeholder=PLACEHOLDERS[kind]),
    )
    await followups.ask(d.store, prompt.chat_id, prompt.message_id, kind, ids, d.clock())


async def _listed(query: Any, d: handlers.Deps, button: callbacks.Button, now: datetime) -> None:
    offer_id, count = button.item_id, button.version
    if button.action in ("all_approve", "all_reject"):
        asked = "approve" if button.action == "all_approve" else "reject"
        await followups.get_offer(d.store, offer_id, now)  # refused at once if stale
        await query.answer()
        await _buttons(query, review_keyboards.confirm_keyboard(d.key, offer_id, count, asked))
        return
    if button.action == "cancel":
        await query.answer("nothing decided")
        await _buttons(query, review_keyboards.listed_keyboard(d.key, offer_id, count))
        return
    choice: decisions.Choice = "approve" if button.action == "yes_approve" else "reject"
    actor = events.operator(query.from_user.id)
    result = await review.decide_listed(
        d.store, d.pipelines, offer_id, query.from_user.id, choice, now, actor=actor
    )
    votes = f", {wording.plural(len(result.voted), 'vote')} recorded" if result.voted else ""
    await query.answer(f"{len(result.decided)} of {count} {choice}d{votes}")
    await _relist(query, d, result.pipeline, now)
    for item_id in result.changed:
        await d.sender.flush_item(item_id, now)
    await query.message.reply_text(await people.humanize(d.store, listed_summary(result, count)))


async def _relist(query: Any, d: handlers.Deps, pipeline: str | None, now: datetime) -> None:
    """The decided list, edited to what waits now and without its buttons: it must not
    go on saying "2 items waiting" once they were decided."""
    waiting = await items.in_state(
        d.store, State.AWAITING_APPROVAL, pipeline, limit=review.MAX_LISTED
    )
    head = f"📋 {render.esc(pipeline or 'every pipeline')}: this list was decided"
    text = f"{head}\n{render.pending(waiting, now)}\n<i>/pending lists again.</i>"
    try:
        await query.edit_message_text(text, parse_mode=ParseMode.HTML, reply_markup=None)
    except tg_error.BadRequest as exc:
        if not (sent_messages.not_modified(exc) or sent_messages.gone(exc)):
            raise


def listed_summary(result: review.ListedResult, count: int) -> str:
    """Decisions and votes counted apart: a vote toward a quorum decided nothing yet."""
    verb = "approved" if result.choice == "approve" else "rejected"
    head = f"{'✅' if result.choice == 'approve' else '❌'} {verb} {len(result.decided)} of {count}"
    if result.voted:
        head += f"; {wording.plural(len(result.voted), 'vote')} recorded, still waiting"
    lines = [head]
    lines += [f"• item {item_id}: vote recorded, {stands}" for item_id, stands in result.voted]
    lines += [f"• item {item_id} not {verb}: {why}" for item_id, why in result.refused]
    return "\n".join(lines)


# -- replies ------------------------------------------------------------------------------


async def reply(update: Update, context: Context) -> None:
    """A reply to a reason or note prompt; any other reply goes on to the Edit handler."""
    message = update.effective_message
    assert message is not None and message.reply_to_message is not None
    d = handlers.deps(context)
    prompt_id = message.reply_to_message.message_id
    asked = await followups.asked(d.store, message.chat_id, prompt_id)
    if asked is None:
        await card_taps.edit_reply(update, context)
        return
    assert message.from_user is not None
    user, now = message.from_user.id, d.clock()
    try:
        item = await items.get(d.store, asked.item_id)
        pipeline = d.pipelines.get(item.pipeline)
        if pipeline is None:
            raise review.Refused(f"pipeline {item.pipeline} is no longer configured")
        ids = (asked.item_id, asked.attempt, asked.version)
        if asked.kind == "reject":
            await review.reject(d.store, pipeline, *ids, user, message.text or "", now)
            answer = f"❌ item {item.id} rejected: {message.text or ''}"
        else:
            note, actor = message.text or "", events.operator(user)
            new = await review.redraft(
                d.store, pipeline, asked.item_id, asked.attempt, note, user, actor, now,
                scheduler=d.scheduler,
            )  # fmt: skip
            answer = (
                f"🔄 item {item.id} goes to attempt {new.attempt} with your note; "
                "a new card follows."
            )
    except _REFUSALS as exc:
        await message.reply_text(f"Not done: {exc}")
        return
    await d.store.write(followups.answered_sync, message.chat_id, prompt_id)
    await message.reply_text(answer)
    await d.sender.flush_item(asked.item_id, now)
