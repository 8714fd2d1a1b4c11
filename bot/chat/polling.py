"""Telegram updates among several workers: only the leader polls, and no update is
acted on twice.

    runtime.lead(polling.NAME, functools.partial(polling.poll, application, runtime.leader))
    add(TypeHandler(Update, polling.once), group=-2)      # before every other handler

Telegram answers a second getUpdates caller with 409, so exactly one worker may poll:
the leader (pipelines.service.leader). A long poll never outlives the leader's trust: each one
waits at most the trust left minus SLACK_S, so a leader that stops renewing has ended
its last poll before another worker can take the lease. Updates go to PTB's own
queue; `once` records each update id before any handler acts on it, so a new leader
that reads again the updates its predecessor had not confirmed skips them, and in
webhook mode (every worker takes updates) a redelivered update is skipped as well.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import urllib.parse
import warnings
from collections.abc import Coroutine, Sequence
from typing import Any

from telegram import Bot, Update
from telegram import error as tg_error
from telegram.ext import Application, ApplicationHandlerStop
from telegram.warnings import PTBUserWarning

from bot.chat import kit
from bot.web import metrics
from pipelines.ground import retry, waiting
from pipelines.service import leader, workers
from store.review import updates

log = logging.getLogger(__name__)

#: The name the poller runs under, in logs, alerts and health.
NAME = "telegram-poll"
#: The longest getUpdates long poll (seconds).
POLL_TIMEOUT_S = 10
#: A poll ends at least this long before the leader's trust does (seconds): room for
#: the answer to travel back.
SLACK_S = 1.0
#: How often a leader whose trust is nearly spent looks again for its renewal (seconds).
RECHECK_S = 0.1
#: The first wait after a failed poll (seconds); doubles per failure, capped.
FIRST_RETRY_S = 0.5

App = Application[Any, Any, Any, Any, Any, Any]


def poll_timeout(trust_left_s: float, longest: int = POLL_TIMEOUT_S) -> int | None:
    """The long poll to ask for with this much trust left; None: do not poll now."""
    timeout = min(longest, int(trust_left_s - SLACK_S))
    return timeout if timeout >= 1 else None


async def poll(
    application: App,
    leadership: leader.Leadership,
    allowed_updates: Sequence[str],
    stop: asyncio.Event,
) -> None:
    """Fetch updates for PTB to handle while this worker leads, until `stop` is set."""
    offset: int | None = None
    failures = 0
    webhook_checked = False
    while not stop.is_set():
        timeout = poll_timeout(leadership.trust_left_s())
        if timeout is None:
            await waiting.wait_any((stop,), RECHECK_S)
            continue
        if not webhook_checked:
            webhook_checked = await drop_leftover_webhook(application.bot)
        try:
            found = await _unless_stopped(
                application.bot.get_updates(
                    offset=offset, timeout=timeout, allowed_updates=list(allowed_updates)
                ),
                stop,
            )
        except tg_error.InvalidToken:
            raise
        except (TypeError, ValueError, KeyError) as exc:
            # An update this python-telegram-bot cannot read (a field it does not know
            # yet) would fail every poll from here on: read them one by one instead.
            log.error(
                "getUpdates answered an update that could not be read (%s)", type(exc).__name__
            )
            readable, offset = await read_one_by_one(application.bot, offset, allowed_updates)
            for update in readable:
                await application.update_queue.put(update)
            continue
        except tg_error.TelegramError as exc:  # 409 from another poller, the network, a 5xx
            metrics.telegram_error(exc)  # getUpdates bypasses the counting rate limiter
            # A webhook set since the check (by hand, or a webhook-mode run) is removed too.
            webhook_checked = not (
                isinstance(exc, tg_error.Conflict) and "webhook" in exc.message.lower()
            )
            failures += 1
            delay = retry.backoff_s(failures, FIRST_RETRY_S, workers.MAX_BACKOFF_S)
            log.warning("getUpdates failed (%s); polling again in %g s", exc, delay)
            await waiting.wait_any((stop,), delay)
            continue
        failures = 0
        if found is None:
            return  # stopped mid-poll: what it would have read is read again by the next
        for update in found:
            if stop.is_set():
                break  # no longer the leader: the next one reads the rest again
            offset = update.update_id + 1
            await application.update_queue.put(update)


async def read_one_by_one(
    bot: Bot, offset: int | None, allowed_updates: Sequence[str]
) -> tuple[list[Update], int | None]:
    """The pending updates read one at a time, and the offset past all of them: one that
    cannot be read is logged by its id alone (its content is untrusted) and confirmed by
    that offset, so it stops nothing."""
    with warnings.catch_warnings():
        # PTB points to get_updates, which parses the whole answer: the raw one is needed.
        warnings.filterwarnings("ignore", "Please use 'Bot.getUpdates'", PTBUserWarning)
        raw = await bot.do_api_request(
            "getUpdates",
            api_kwargs={"offset": offset, "timeout": 0, "allowed_updates": list(allowed_updates)},
        )
    read: list[Update] = []
    for data in raw if isinstance(raw, list) else []:
        update_id = data.get("update_id") if isinstance(data, dict) else None
        if isinstance(update_id, int):
            offset = max(offset or 0, update_id + 1)
        try:
            read.append(Update.de_json(data, bot))
        except (TypeError, ValueError, KeyError) as exc:
            log.error("update %s skipped: it could not be read (%s)", update_id, type(exc).__name__)
    return read, offset


async def drop_leftover_webhook(bot: Bot) -> bool:
    """Delete a webhook left set by an earlier webhook-mode run; True once checked.

    Telegram refuses getUpdates with 409 for as long as a webhook is set, so a bot moved
    back to polling would otherwise retry for ever. Pending updates are kept: the poll
    that follows reads them."""
    try:
        info = await bot.get_webhook_info()
        if info.url:
            await bot.delete_webhook(drop_pending_updates=False)
    except tg_error.TelegramError as exc:
        log.warning("could not check for a webhook left set (%s); will check again", exc)
        return False
    if info.url:
        log.warning(
            "deleted the webhook left set at %s (%d update(s) pending): polling mode reads "
            "updates with getUpdates, which Telegram refuses while a webhook is set",
            _site(info.url),
            info.pending_update_count,
        )
    return True


def _site(url: str) -> str:
    """A webhook URL without its path and query, where a secret may sit."""
    parts = urllib.parse.urlsplit(url)
    return f"{parts.scheme}://{parts.hostname or '?'}{f':{parts.port}' if parts.port else ''}/…"


async def _unless_stopped(
    fetch: Coroutine[Any, Any, tuple[Update, ...]], stop: asyncio.Event
) -> tuple[Update, ...] | None:
    """The long poll's answer, or None as soon as `stop` is set (the poll is cancelled).

    A cancelled poll confirms nothing: Telegram confirms updates only by the offset of
    the next call, so whatever it held is delivered again to the next poller. Without
    this, stopping (shutdown, or losing the lease) waited out the whole long poll."""
    polling = asyncio.ensure_future(fetch)
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({polling, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if polling.done():
        return polling.result()
    polling.cancel()
    with contextlib.suppress(asyncio.CancelledError, tg_error.TelegramError):
        await polling
    return None


async def once(update: Update, context: kit.Context) -> None:
    """Stop an update that this or another worker has handled already."""
    d = kit.deps(context)
    if not await updates.first_time(d.store, update.update_id, d.clock()):
        log.info("update %d was handled already; skipped", update.update_id)
        raise ApplicationHandlerStop
