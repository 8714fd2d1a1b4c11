"""The kit every handler of the bot is written with: its collaborators, its context, a tap.

    d = kit.deps(context)                    # Deps: the store, the pipelines, the sender, ...
    name = kit.pipeline_arg(context, "run")  # or BadInput, which @kit.command answers
    await kit.reply(update, text)            # split to Telegram's length, as HTML

Every handler gets its collaborators from `Deps` (in `application.bot_data["deps"]`, typed
by `BotData`) and reads the clock once, at the edge. A button's handler gets a `Tap` (an
`ItemTap` for an item's button) from bot.cards.routes, its tag already verified.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, TypedDict

from telegram import CallbackQuery, InlineKeyboardMarkup, Message, Update
from telegram.constants import ParseMode
from telegram.ext import CallbackContext, ContextTypes, ExtBot

from bot.chat import auth, render, sender
from bot.ground import callbacks
from pipelines import operations
from pipelines.config import spec
from pipelines.drafting import drafters
from pipelines.service import leader
from pipelines.service import workers as workers_mod
from pipelines.service.scheduler import Scheduler
from pipelines.text import telegram as telegram_text
from store import errors, items
from store.db import Store


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
