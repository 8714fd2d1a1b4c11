"""Command, button and reply handlers: parse, call the same functions the CLI calls, render.

Every handler gets its collaborators from `Deps` (in `application.bot_data["deps"]`) and
reads the clock once, at the edge. The operator check runs before any of them
(`gate`, registered in group -1 by bot.app), so a handler only ever sees operators.
"""

from __future__ import annotations

import difflib
import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from telegram import CallbackQuery, InlineKeyboardButton, InlineKeyboardMarkup, Message, Update
from telegram.constants import ParseMode
from telegram.ext import ApplicationHandlerStop, CallbackContext, ContextTypes, ExtBot

from bot.cards import actions, callbacks, keyboards
from bot.chat import auth, cluster, people, render, sender
from bot.web import charts
from pipelines import operations
from pipelines.config import spec
from pipelines.drafting import drafters
from pipelines.operations import review
from pipelines.service import leader
from pipelines.service import workers as workers_mod
from pipelines.service.scheduler import Scheduler
from pipelines.text import telegram as telegram_text
from store import errors, items
from store.audit import events
from store.db import Store

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


@dataclass
class Deps:
    store: Store
    pipelines: dict[str, spec.Pipeline]
    scheduler: Scheduler | None
    gate: auth.Gate
    key: bytes
    sender: sender.Sender
    clock: Callable[[], datetime]
    #: The process's supervised workers, for /status (None: not reported).
    workers: workers_mod.Registry | None = None
    #: The leader's lease TTL: a worker silent for longer is shown as such.
    lease_ttl: timedelta = timedelta(seconds=leader.TTL_S)
    #: The pipelines whose files failed to load, with their errors.
    broken: Mapping[str, Sequence[object]] = field(default_factory=dict)
    #: The engine's drafter for a pipeline, asked what a replay would reuse (None: nothing).
    drafter_for: Callable[[Store, spec.Pipeline], drafters.Drafter] | None = None
    #: Who may settle uncertain claims from the chat (GATEHOUSE_TELEGRAM__SETTLERS);
    #: empty: every operator.
    settlers: frozenset[int] = frozenset()

    def may_settle(self, user_id: int) -> bool:
        return user_id in (self.settlers or self.gate.operators)


class BotData(TypedDict, total=False):
    """The application's bot_data: what bot.app attaches for every handler."""

    deps: Deps


#: A handler's context, its bot_data typed (bot.app builds the application with CONTEXT_TYPES).
Context = CallbackContext[ExtBot[None], dict[Any, Any], dict[Any, Any], BotData]
CONTEXT_TYPES = ContextTypes(bot_data=BotData)


@dataclass(frozen=True)
class Tap:
    """A verified button tap, as bot.cards.routes hands it to the action's handler."""

    query: CallbackQuery
    deps: Deps
    button: callbacks.Button
    #: The clock read once, when the tap arrived.
    now: datetime

    @property
    def user(self) -> int:
        return self.query.from_user.id


@dataclass(frozen=True)
class ItemTap(Tap):
    """A tap on an item's button: the item as read now, its pipeline still configured."""

    item: items.Item
    pipeline: spec.Pipeline

    @property
    def current(self) -> bool:
        """The card shows the item's current attempt and version."""
        return (self.item.attempt, self.item.version) == (self.button.attempt, self.button.version)


class BadInput(Exception):
    """A command's argument is wrong; the message says what is valid."""


def deps(context: Context) -> Deps:
    return context.bot_data["deps"]


def prompt_reply(update: Update, context: Context) -> tuple[Message, Deps, int]:
    """A reply to one of the bot's prompts: the reply, the deps, and the prompt's id."""
    message = update.effective_message
    assert message is not None and message.reply_to_message is not None
    return message, deps(context), message.reply_to_message.message_id


async def verified_button(query: CallbackQuery, key: bytes) -> callbacks.Button | None:
    """The tapped button, its tag verified; None once a forged or unreadable one is
    answered with the reason (nothing is read or changed for it)."""
    try:
        return callbacks.decode(key, query.data or "")
    except callbacks.InvalidButton as exc:
        await query.answer(str(exc))
        return None


async def reply(update: Update, text: str, markup: InlineKeyboardMarkup | None = None) -> None:
    message = update.effective_message
    assert message is not None
    parts = telegram_text.split(text)
    for index, part in enumerate(parts):
        last = index == len(parts) - 1
        await message.reply_text(
            part, parse_mode=ParseMode.HTML, reply_markup=markup if last else None, do_quote=False
        )


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


# -- arguments --------------------------------------------------------------------------


def pipeline_arg(context: Context, command: str) -> str:
    known = sorted(deps(context).pipelines)
    args = context.args or []
    if len(args) != 1:
        raise BadInput(f"usage: /{command} &lt;pipeline&gt;; pipelines: {', '.join(known)}")
    try:
        return operations.check_pipeline(args[0], known, deps(context).broken)
    except operations.Invalid as exc:
        raise BadInput(render.esc(exc)) from None


def item_arg(context: Context, command: str) -> int:
    args = context.args or []
    usage = f"usage: /{command} &lt;item id&gt;, for example /{command} 12"
    if len(args) != 1:
        raise BadInput(usage)
    try:
        return operations.whole_number(args[0], "the item id")
    except operations.Invalid as exc:
        raise BadInput(f"{render.esc(exc)}; {usage}") from None


def command(
    fn: Callable[[Update, Context, Deps, datetime], Any],
) -> Callable[[Update, Context], Any]:
    """Wrap a command: bad input and missing rows become a short reply, not an error."""

    async def handler(update: Update, context: Context) -> None:
        found = deps(context)
        try:
            await fn(update, context, found, found.clock())
        except BadInput as exc:
            await reply(update, str(exc))
        except errors.Refused as exc:
            await reply(update, render.esc(exc))

    handler.__doc__ = fn.__doc__
    handler.__name__ = fn.__name__
    return handler


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
    overview = await operations.overview(d.store, d.pipelines, now, states)
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
    text = await people.humanize(d.store, render.history(found.item, found.events), as_html=True)
    await actions.reply_about(update, d.store, found.item.id, text)


@command
async def replay(update: Update, context: Context, d: Deps, now: datetime) -> None:
    """Why an item dropped, with a button that replays it."""
    found = await operations.history(d.store, item_arg(context, "replay"))
    item, trail = found.item, found.events
    if not found.dropped:
        text = render.history(item, trail) + "\n\nNot dropped: nothing to replay."
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
    text = await people.humanize(d.store, render.replay_offer(item, trail, kept), as_html=True)
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
    changed = await operations.schedule(
        d.store, d.pipelines, word, name, actor, now, scheduler=d.scheduler
    )
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
