"""The slash commands, the operator gate and the error handler: parse, call, render.

Written with bot.chat.kit (Deps, the context, the arguments); each calls what the CLI
calls. The operator check runs before any handler (`gate`, registered in group -1 by
bot.app), so a handler only ever sees operators.
"""

from __future__ import annotations

import difflib
import logging
from datetime import datetime

from telegram import InlineKeyboardButton, InlineKeyboardMarkup, Update
from telegram.ext import ApplicationHandlerStop

from bot.cards import actions, keyboards
from bot.chat import cluster, people, render
from bot.chat.kit import BadInput, Context, Deps, command, deps, item_arg, pipeline_arg, reply
from bot.ground import callbacks
from bot.web import charts
from pipelines import operations
from pipelines.operations import review
from pipelines.providers import pace
from store.audit import events

log = logging.getLogger(__name__)

#: (command, what it does) in the order /help and setMyCommands list them.
COMMANDS: tuple[tuple[str, str], ...] = (
    ("status", "every pipeline, one pipeline's recent runs, or a chart of the week"),
    ("pending", "items awaiting approval, oldest first, to decide on together"),
    ("budget", "spend, holds and limits, today and this month, or a 30-day chart"),
    ("run", "run a pipeline now"),
    ("pause", "stop a pipeline's schedule"),
    ("resume", "restart a pipeline's schedule"),
    ("history", "an item's events"),
    ("replay", "why an item dropped, and replay it"),
    ("skipped", "entries the triage skipped, each a tap from a card"),
    ("filtered", "entries the filter dropped, each with its rule"),
    ("stats", "the editor's numbers: what entries became, decision times, AI spend"),
    ("help", "this list"),
)
#: What each command takes, as /help shows it.
ARGUMENTS = {
    "status": "[pipeline | chart]",
    "pending": "[pipeline]",
    "budget": "[chart]",
    "run": "<pipeline>",
    "pause": "<pipeline>",
    "resume": "<pipeline>",
    "history": "<item>",
    "replay": "<item>",
    "skipped": "<pipeline>",
    "filtered": "<pipeline>",
    "stats": "[pipeline] [7d | 30d] [chart]",
}


# -- the gate ---------------------------------------------------------------------------


async def gate(update: Update, context: Context) -> None:
    """Stop every update from a non-operator (answering a tap) or an operator over the limit."""
    user = update.effective_user
    verdict = deps(context).gate.check(user.id if user else None, deps(context).clock())
    if verdict == "operator":
        await people.note(deps(context).store, user, deps(context).clock())
        return
    query = update.callback_query
    if query is not None:
        text = "Not allowed: you are not an operator." if verdict == "stranger" else "Slow down."
        await query.answer(text, show_alert=False)
    elif verdict == "limited" and update.effective_message is not None:
        await update.effective_message.reply_text("Too many requests; try again in a minute.")
    raise ApplicationHandlerStop


# -- commands ---------------------------------------------------------------------------


async def help_(update: Update, context: Context) -> None:
    """List the commands."""
    await reply(update, help_text())


def help_text() -> str:
    lines = [
        render.esc(f"/{name} {ARGUMENTS[name]}" if name in ARGUMENTS else f"/{name}")
        + f" — {render.esc(text)}"
        for name, text in COMMANDS
    ]
    return "<b>gatehouse</b>\n" + "\n".join(lines)


async def unknown(update: Update, context: Context) -> None:
    """An unknown command: say what is valid, with close matches."""
    message = update.effective_message
    word = (message.text or "/").split()[0][1:].split("@")[0] if message else ""
    names = [name for name, _ in COMMANDS]
    close = difflib.get_close_matches(word, names, n=2)
    hint = f" Did you mean {', '.join('/' + c for c in close)}?" if close else ""
    valid = " ".join("/" + n for n in names)
    await reply(update, f"Unknown command /{render.esc(word)}.{hint} Valid: {valid}")


async def plain_text(update: Update, context: Context) -> None:
    """Text that is neither a command nor a reply: say what the bot reads, not silence."""
    await reply(
        update,
        "I act on commands and on replies to my messages; this was neither, so nothing "
        "changed. To edit a draft, tap Edit on its card and reply to the prompt. "
        "/help lists the commands.",
    )


@command
async def status(update: Update, context: Context, d: Deps, now: datetime) -> None:
    """Every pipeline on one screen, one pipeline's recent runs, or a chart of the week."""
    if context.args == ["chart"]:
        await charts.reply_status(update, d.store, now)
        return
    if context.args:
        found = await operations.pipeline_runs(d.store, pipeline_arg(context, "status"), now)
        await reply(update, render.status_pipeline(found, now))
        return
    states = d.workers.snapshot() if d.workers else []
    overview = await operations.overview(d.store, d.pipelines, now, states, pace.snapshot())
    workers_now = cluster.lines(await cluster.read(d.store, now, d.lease_ttl))
    await reply(
        update, "\n".join([render.status_overview(overview), *map(render.esc, workers_now)])
    )


@command
async def pending(update: Update, context: Context, d: Deps, now: datetime) -> None:
    """Items awaiting approval (of one pipeline, if named), oldest first, with a button that
    shows each one's card and buttons that decide on exactly the versions listed."""
    name = pipeline_arg(context, "pending") if context.args else None
    listed = await review.offer(d.store, name, now)
    waiting = listed.items
    rows = list((actions.show_buttons(d.key, waiting) or InlineKeyboardMarkup([])).inline_keyboard)
    if waiting:
        rows += keyboards.listed_keyboard(d.key, listed.offer.id, len(waiting)).inline_keyboard
    await reply(update, render.pending(waiting, now), InlineKeyboardMarkup(rows) if rows else None)


@command
async def budget(update: Update, context: Context, d: Deps, now: datetime) -> None:
    """Limits, spend, holds and uncertain holds per scope, today and this month; or a chart."""
    if context.args == ["chart"]:
        await charts.reply_budget(update, d.store, now)
        return
    if context.args:
        got = render.esc(" ".join(context.args))
        raise BadInput(f"/budget takes nothing or chart, not “{got}”: /budget [chart]")
    await reply(update, render.budget(await operations.budget(d.store, now), now))


@command
async def history(update: Update, context: Context, d: Deps, now: datetime) -> None:
    """One item's events, oldest first."""
    found = await operations.history(d.store, item_arg(context, "history"))
    shown = render.history(found.item, found.events, found.tells)
    text = await people.humanize(d.store, shown, as_html=True)
    await actions.reply_about(update, d.store, found.item.id, text)


@command
async def replay(update: Update, context: Context, d: Deps, now: datetime) -> None:
    """Why an item dropped, with a button that replays it."""
    found = await operations.history(d.store, item_arg(context, "replay"))
    item, trail = found.item, found.events
    if not found.dropped:
        text = render.history(item, trail, found.tells) + "\n\nNot dropped: nothing to replay."
        await actions.reply_about(
            update, d.store, item.id, await people.humanize(d.store, text, as_html=True)
        )
        return
    pipeline = d.pipelines.get(item.pipeline)
    drafter = d.drafter_for(d.store, pipeline) if d.drafter_for and pipeline else None
    kept = await operations.kept_draft(item, drafter) if drafter else None

    def button(label: str, action: callbacks.Action) -> InlineKeyboardButton:
        data = callbacks.encode(
            d.key, callbacks.Button(action, item.id, item.attempt, item.version)
        )
        return InlineKeyboardButton(label, callback_data=data)

    row = [button("🔁 Replay", "replay")] + ([button("🆕 Fresh draft", "fresh")] if kept else [])
    text = await people.humanize(
        d.store, render.replay_offer(item, trail, kept, found.tells), as_html=True
    )
    await actions.reply_about(update, d.store, item.id, text, InlineKeyboardMarkup([row]))


@command
async def stats(update: Update, context: Context, d: Deps, now: datetime) -> None:
    """The editor's numbers per pipeline over the last 7 (or 30) days."""
    names, days = sorted(d.pipelines), operations.WINDOWS[0]
    args = context.args or []
    for arg in args:
        if arg == "chart":
            continue
        if arg in d.pipelines:
            names = [arg]
            continue
        try:
            days = operations.window(arg)
        except operations.Invalid:
            known = ", ".join(sorted(d.pipelines))
            raise BadInput(
                f"usage: /stats [pipeline] [7d | 30d] [chart]; {render.esc(arg)} is neither "
                f"a window nor a pipeline ({render.esc(known)})"
            ) from None
    found = await operations.stats(d.store, names, days, now)
    if "chart" in args:
        await charts.reply_stats(update, found, days)
    else:
        await reply(update, render.stats(found, days))


async def _schedule_command(update: Update, context: Context, d: Deps, now: datetime) -> None:
    assert update.effective_message is not None and update.effective_user is not None
    word = (update.effective_message.text or "").split()[0][1:].split("@")[0]
    name = pipeline_arg(context, word)
    actor = events.operator(update.effective_user.id)
    asked = operations.Scheduling(word, name, actor)
    changed = await operations.schedule(d.store, d.pipelines, asked, now, scheduler=d.scheduler)
    if word == "run":
        await reply(update, f"▶️ {render.esc(name)}: run requested")
    elif word == "pause":
        await reply(update, f"⏸ {render.esc(name)}: {'paused' if changed else 'already paused'}")
    else:
        await reply(update, f"▶️ {render.esc(name)}: {'resumed' if changed else 'not paused'}")


schedule_command = command(_schedule_command)


async def on_error(update: object, context: Context) -> None:
    """Log the error with its traceback and tell the operator's chat, without details."""
    log.error("handler failed", exc_info=context.error)
    if isinstance(update, Update) and update.effective_chat is not None:
        name = type(context.error).__name__
        await context.bot.send_message(
            update.effective_chat.id, f"⚠️ Something went wrong ({name}); it is in the log."
        )
