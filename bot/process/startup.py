"""What the bot checks and asks before it serves: safe settings, a token Telegram
accepts (getMe, retried while Telegram is unreachable), and the command menu.

    token = startup.check(cfg)                       # StartupRefused says what to fix
    if await startup.connect(bot, stop): ...         # False if stopped first
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from telegram import Bot, BotCommand
from telegram import error as tg_error

from bot import settings as settings_mod
from bot.commands import handlers
from bot.ground import callbacks
from pipelines.ground import retry, waiting
from pipelines.service import workers

log = logging.getLogger(__name__)

#: The first wait before the command menu is tried again (seconds; doubles, capped).
MENU_FIRST_RETRY_S = 2.0
#: Waits between getMe attempts while Telegram is unreachable: doubling from the first
#: to the cap (seconds), so a network that comes back is noticed within the cap.
CONNECT_FIRST_WAIT_S = 0.5


class StartupRefused(Exception):
    """The settings cannot run a safe bot; the message says which and how to fix it."""


class TokenRejected(StartupRefused):
    """the bot token was rejected by Telegram (check GATEHOUSE_TELEGRAM__TOKEN)"""

    def __init__(self) -> None:
        # A fixed text: PTB's own message for this holds the token.
        super().__init__(self.__doc__)


def check(cfg: settings_mod.Settings) -> str:
    """Refuse unsafe or incomplete Telegram settings; returns the token."""
    tg = cfg.telegram
    if tg.token is None or not tg.token.get_secret_value():
        raise StartupRefused("GATEHOUSE_TELEGRAM__TOKEN is not set")
    if not tg.operators:
        raise StartupRefused(
            "GATEHOUSE_TELEGRAM__OPERATORS is empty: list the Telegram user ids allowed to operate"
        )
    if tg.mode == "webhook":
        if tg.webhook_secret is None or not tg.webhook_secret.get_secret_value():
            raise StartupRefused("webhook mode requires GATEHOUSE_TELEGRAM__WEBHOOK_SECRET")
        if not tg.webhook_url:
            raise StartupRefused("webhook mode requires GATEHOUSE_TELEGRAM__WEBHOOK_URL")
    return tg.token.get_secret_value()


def callback_key(cfg: settings_mod.Settings, token: str) -> bytes:
    secret = cfg.telegram.callback_secret
    if secret is not None and secret.get_secret_value():
        return secret.get_secret_value().encode()
    return callbacks.derive_key(token)


async def publish_commands(bot: Bot, stop: asyncio.Event) -> bool:
    """Set the command menu, retrying in the background: the bot works without it."""
    commands = [BotCommand(name, text[:256]) for name, text in handlers.COMMANDS]
    failures = 0
    while not stop.is_set():
        try:
            return bool(await bot.set_my_commands(commands))
        except (tg_error.BadRequest, tg_error.InvalidToken, tg_error.Forbidden) as exc:
            log.error("command menu refused by Telegram, not retried: %s", exc.message)
            return False
        except Exception as exc:  # a 5xx, the network, an unreadable answer: try again
            failures += 1
            delay = retry.backoff_s(failures, MENU_FIRST_RETRY_S, workers.MAX_BACKOFF_S)
            log.warning("command menu not set (%s); retrying in %g s", waiting.describe(exc), delay)
            await waiting.wait_any((stop,), delay)
    return False


async def connect(bot: Bot, stop: asyncio.Event) -> bool:
    """Ask Telegram who the bot is (getMe) until it answers; False if stopped first.

    A rejected token raises TokenRejected (PTB's own message holds the token). An
    unreachable network or a Bot API server error is retried, one log line each.
    """
    attempt = 1
    while True:
        wait = retry.backoff_s(attempt, CONNECT_FIRST_WAIT_S, workers.MAX_BACKOFF_S)
        try:
            await bot.initialize()
            return True
        except tg_error.InvalidToken:
            raise TokenRejected() from None
        except tg_error.NetworkError as exc:  # also TimedOut and 5xx answers
            log.warning(
                "Telegram is unreachable (attempt %d: %s); trying again in %.1f s",
                attempt,
                exc,
                wait,
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), wait)
            return False
        attempt += 1
