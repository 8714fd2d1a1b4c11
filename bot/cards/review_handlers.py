"""Buttons and replies beyond one tap: reject reasons, Undo, Redraft, decisions on a list.

bot.cards.routes routes the buttons here; bot.app registers `reply` for the replies to
their prompts (anything else goes on to taps.edit_reply). Every action runs through
pipelines.review, as the CLI's do.
"""

from __future__ import annotations

import asyncio
import logging
from datetime import datetime

from telegram import CallbackQuery, ForceReply, Update
from telegram import error as tg_error
from telegram.constants import ParseMode

from bot.cards import actions, keyboards, taps
from bot.chat import kit, people, render, sent_messages, wording
from pipelines.approval import flow
from pipelines.operations import review
from store import drafts, errors, items
from store.audit import events
from store.items.machine import State
from store.review import decisions, followups, prompts

log = logging.getLogger(__name__)

#: What the reply box says while a prompt waits: what the reply will do.
PLACEHOLDERS: dict[followups.AskKind, str] = {
    "reject": "your text is the reason for the reject",
    "redraft": "your note goes to the model for a new draft",
}
_REFUSALS = (errors.Conflict, errors.IllegalTransition, errors.NotFound, flow.NotAllowed)


# -- buttons (routed by bot.cards.routes) -----------------------------------------------


async def reasons(tap: kit.ItemTap) -> None:
    """Reject: the pipeline's preset reasons in place of the card's buttons."""
    if await _closed(tap, "reject"):
        return
    await tap.query.answer()
    markup = keyboards.reasons_keyboard(tap.deps.key, tap.pipeline, tap.button.shown)
    await actions.replace_buttons(tap.query, markup)


async def back(tap: kit.ItemTap) -> None:
    """The card's own buttons again, Escalate too if the card had it."""
    if await _closed(tap, "reject"):
        return
    await tap.query.answer()
    found = await flow.reach(tap.deps.store, tap.pipeline, tap.item)
    escalate = found.short and found.can_escalate
    image = (await drafts.get(tap.deps.store, tap.item.id, tap.item.version)).image_url
    markup = taps.card_keyboard(
        tap.deps.key, tap.button.shown, escalate=escalate, image=image is not None
    )
    await actions.replace_buttons(tap.query, markup)


async def other(tap: kit.ItemTap) -> None:
    """Reject with a typed reason: prompt for it."""
    if await _closed(tap, "reject"):
        return
    await _ask(tap, "reject", f"Why reject item {tap.item.id}? Reply with the reason.")


async def why(tap: kit.ItemTap) -> None:
    """Reject with the preset reason the button numbers."""
    reasons = tap.pipeline.approval.reject_reasons
    if tap.button.arg >= len(reasons):
        await tap.query.answer("That reason is no longer offered.", show_alert=True)
        return
    reason = reasons[tap.button.arg]
    await review.reject(tap.deps.store, tap.pipeline, tap.button.shown, tap.user, reason, tap.now)
    await _answered(tap, "❌ rejected")


async def undo(tap: kit.ItemTap) -> None:
    """Take a decision back while its grace period lasts."""
    await review.undo(tap.deps.store, tap.pipeline, tap.button.shown, tap.user, tap.now)
    await _answered(tap, "↩️ undone: it awaits a decision again")


async def redraft(tap: kit.ItemTap) -> None:
    """Prompt for a note to the model for a new draft."""
    if not (tap.current and tap.item.state in review.REDRAFTABLE):
        text = "This card is out of date: nothing to redraft here."
        await tap.query.answer(text, show_alert=True)
        return
    text = f"What should change in item {tap.item.id}'s next draft? Reply with your note."
    await _ask(tap, "redraft", text)


async def _closed(tap: kit.ItemTap, what: str) -> bool:
    """Answer a card that no longer shows a version awaiting a decision; True if so."""
    if tap.current and tap.item.state == State.AWAITING_APPROVAL:
        return False
    await tap.query.answer(f"This card is out of date: nothing to {what} here.", show_alert=True)
    return True


async def _answered(tap: kit.ItemTap, text: str) -> None:
    # Edit the card now rather than at the sender's next pass, while the tap is answered.
    await asyncio.gather(tap.query.answer(text), tap.deps.sender.flush_item(tap.item.id, tap.now))
    await actions.settle_reply(tap.query)


async def _ask(tap: kit.ItemTap, kind: followups.AskKind, text: str) -> None:
    await tap.query.answer()
    prompt = await actions.tapped(tap.query).reply_text(
        actions.addressed(tap.query, render.esc(text)),
        parse_mode=ParseMode.HTML,
        reply_markup=ForceReply(selective=True, input_field_placeholder=PLACEHOLDERS[kind]),
    )
    d, shown = tap.deps, tap.button.shown
    asked = prompts.Message(prompt.chat_id, prompt.message_id)
    await followups.ask(d.store, asked, kind, shown, d.clock())


async def confirm(tap: kit.Tap) -> None:
    """Approve all or Reject all on a list: ask to confirm, naming the count."""
    offer_id, count = tap.button.item_id, tap.button.version
    asked = "approve" if tap.button.action == "all_approve" else "reject"
    await followups.get_offer(tap.deps.store, offer_id, tap.now)  # refused at once if stale
    await tap.query.answer()
    markup = keyboards.confirm_keyboard(tap.deps.key, offer_id, count, asked)
    await actions.replace_buttons(tap.query, markup)


async def cancel(tap: kit.Tap) -> None:
    """The list's own buttons again."""
    await tap.query.answer("nothing decided")
    markup = keyboards.listed_keyboard(tap.deps.key, tap.button.item_id, tap.button.version)
    await actions.replace_buttons(tap.query, markup)


async def decide_listed(tap: kit.Tap) -> None:
    """Yes: decide every item on the list, and say what was decided and what was not."""
    d, now, count = tap.deps, tap.now, tap.button.version
    choice: decisions.Choice = "approve" if tap.button.action == "yes_approve" else "reject"
    vote = review.ListedVote(tap.button.item_id, tap.user, choice, events.operator(tap.user))
    result = await review.decide_listed(d.store, d.pipelines, vote, now)
    votes = f", {wording.plural(len(result.voted), 'vote')} recorded" if result.voted else ""
    await tap.query.answer(f"{len(result.decided)} of {count} {choice}d{votes}")
    await _relist(tap.query, d, result.pipeline, now)
    for item_id in result.changed:
        await d.sender.flush_item(item_id, now)
    summary = await people.humanize(d.store, listed_summary(result, count))
    await actions.tapped(tap.query).reply_text(summary)


async def _relist(query: CallbackQuery, d: kit.Deps, pipeline: str | None, now: datetime) -> None:
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


async def reply(update: Update, context: kit.Context) -> None:
    """A reply to a reason or note prompt; any other reply goes on to the Edit handler."""
    message, d, prompt_id = kit.prompt_reply(update, context)
    asked = await followups.asked(d.store, message.chat_id, prompt_id)
    if asked is None:
        await taps.edit_reply(update, context)
        return
    assert message.from_user is not None
    user, now = message.from_user.id, d.clock()
    try:
        item = await items.get(d.store, asked.item_id)
        pipeline = d.pipelines.get(item.pipeline)
        if pipeline is None:
            raise review.Refused(f"pipeline {item.pipeline} is no longer configured")
        if asked.kind == "reject":
            await review.reject(d.store, pipeline, asked.shown, user, message.text or "", now)
            answer = f"❌ item {item.id} rejected: {message.text or ''}"
        else:
            note, actor = message.text or "", events.operator(user)
            ask = review.Redraft(asked.item_id, asked.attempt, note, user, actor)
            new = await review.redraft(d.store, pipeline, ask, now, scheduler=d.scheduler)
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
