"""The outbox sender: delivers pending card, card_edit and alert rows to Telegram.

    sender = Sender(store, application.bot, targets, keyboard)
    task = asyncio.create_task(sender.run(stop))     # wakes every second, or on sender.wake()
    await sender.flush_item(item_id, now)            # send an item's card edits right away

Rows go oldest first. Each row's message ids are recorded as JSON in `external_id`
({"<chat id>": [message ids]}); a card split into several messages lists them all, and a
card edit finds them there. Transient errors retry with backoff (`outbox.mark_retry`),
RetryAfter waits as long as Telegram asks (an int or a timedelta), "message is not
modified" counts as success, and a row still pending at a crash is sent after restart.
Pacing is PTB's AIORateLimiter's job, set up in bot.app.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiolimiter import AsyncLimiter
from telegram import Bot, InlineKeyboardMarkup, LinkPreviewOptions
from telegram import error as tg_error
from telegram.constants import ParseMode

from bot import render
from store import errors, outbox
from store.db import Store

log = logging.getLogger(__name__)

#: Kinds this sender delivers; dispatch rows belong to the engine's dispatchers.
KINDS: tuple[outbox.Kind, ...] = ("card", "card_edit", "alert")
#: After this many failed attempts a row is marked failed and stays for an operator to see.
MAX_ATTEMPTS = 10
#: Backoff for transient errors: 2 ** attempts seconds, capped.
MAX_BACKOFF = timedelta(minutes=5)
#: How often the loop looks for due rows when nobody wakes it.
POLL_EVERY_S = 1.0
#: A card_edit whose card is not sent yet waits this long before looking again.
CARD_NOT_SENT_WAIT = timedelta(seconds=1)

#: Cards show the source link as a link, not as a large preview.
NO_PREVIEW = LinkPreviewOptions(is_disabled=True)

Sent = dict[str, list[int]]
#: row -> the chats it goes to (cards and alerts).
Targets = Callable[[outbox.Row], list[int]]
#: card row -> the buttons under its last part (None: no buttons).
Keyboard = Callable[[outbox.Row], InlineKeyboardMarkup | None]


class Retry(Exception):
    """The row could not be sent now; try again at `at`."""

    def __init__(self, reason: str, at: datetime) -> None:
        super().__init__(reason)
        self.at = at


def retry_after_seconds(exc: tg_error.RetryAfter) -> float:
    """RetryAfter.retry_after is an int or a timedelta, depending on PTB's settings."""
    value = exc.retry_after
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def not_modified(exc: tg_error.BadRequest) -> bool:
    return "message is not modified" in exc.message.lower()


class Sender:
    def __init__(
        self,
        store: Store,
        bot: Bot,
        targets: Targets,
        keyboard: Keyboard,
        per_chat_per_second: float = 1.0,
    ) -> None:
        self.store = store
        self.bot = bot
        self.targets = targets
        self.keyboard = keyboard
        # PTB's AIORateLimiter paces the whole bot and group chats; private chats (every
        # operator's) get a leaky bucket each here, from the same library it uses.
        self._per_chat = per_chat_per_second
        self._pace: dict[str, AsyncLimiter] = {}
        self._wake = asyncio.Event()
        self._busy: set[int] = set()
        # Chats a row already reached before an error: not sent twice while we run.
        self._progress: dict[int, Sent] = {}

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Send due rows until `stop` is set; the loop is the only place that reads the clock."""
        while not stop.is_set():
            try:
                await self.send_due(datetime.now(UTC))
            except errors.StoreError:
                log.exception("outbox sender: store error; trying again shortly")
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(POLL_EVERY_S):
                    await self._wake.wait()
            self._wake.clear()

    async def send_due(self, now: datetime) -> int:
        """Send every due row once, oldest first; returns how many were sent."""
        done = 0
        for row in await outbox.due(self.store, now, KINDS):
            done += await self.send_row(row, now)
        return done

    async def flush_item(self, item_id: int, now: datetime) -> int:
        """Send one item's pending card edits now (after a tap), without waiting for the loop."""
        done = 0
        for row in reversed(await outbox.for_item(self.store, item_id, "card_edit")):
            if row.state == "pending" and row.next_attempt_at <= now:
                done += await self.send_row(row, now)
        return done

    async def send_row(self, row: outbox.Row, now: datetime) -> bool:
        if row.id in self._busy:
            return False
        self._busy.add(row.id)
        try:
            sent = await self._deliver(row, now)
        except Retry as exc:
            await self._retry(row, str(exc), exc.at)
            return False
        except (tg_error.Forbidden, tg_error.BadRequest, tg_error.InvalidToken) as exc:
            log.error("outbox row %d (%s) failed for good: %s", row.id, row.kind, exc.message)
            await outbox.mark_failed(self.store, row.id, exc.message)
            return False
        finally:
            self._busy.discard(row.id)
        self._progress.pop(row.id, None)
        return await outbox.mark_sent(self.store, row.id, json.dumps(sent), now)

    async def _retry(self, row: outbox.Row, reason: str, at: datetime) -> None:
        if row.attempts + 1 >= MAX_ATTEMPTS:
            log.error(
                "outbox row %d (%s) gave up after %d attempts", row.id, row.kind, MAX_ATTEMPTS
            )
            await outbox.mark_failed(self.store, row.id, reason)
        else:
            log.warning("outbox row %d (%s): %s; retrying at %s", row.id, row.kind, reason, at)
            await outbox.mark_retry(self.store, row.id, reason, at)

    async def _deliver(self, row: outbox.Row, now: datetime) -> Sent:
        try:
            if row.kind == "card_edit":
                return await self._edit_card(row, now)
            return await self._send_messages(row)
        except tg_error.RetryAfter as exc:
            wait = timedelta(seconds=retry_after_seconds(exc))
            raise Retry(
                f"flood control: retry after {wait.total_seconds():g} s", now + wait
            ) from exc
        except (tg_error.TimedOut, tg_error.NetworkError) as exc:
            if isinstance(exc, tg_error.BadRequest):
                raise  # a BadRequest is a NetworkError in PTB, but it is not transient
            backoff = min(timedelta(seconds=2 ** (row.attempts + 1)), MAX_BACKOFF)
            raise Retry(f"{type(exc).__name__}: {exc.message}", now + backoff) from exc

    async def _send_messages(self, row: outbox.Row) -> Sent:
        if row.kind == "card":
            assert row.item_id is not None, "a card row names its item"
            parts = render.card_parts(row.item_id, row.payload)
            markup = self.keyboard(row)
        else:
            parts = render.split(_alert_text(row.payload))
            markup = None
        sent = self._progress.setdefault(row.id, {})
        for chat in self.targets(row):
            if str(chat) in sent:
                continue
            ids = []
            for index, part in enumerate(parts):
                last = index == len(parts) - 1
                await self._pace.setdefault(str(chat), AsyncLimiter(self._per_chat, 1)).acquire()
                message = await self.bot.send_message(
                    chat,
                    part,
                    parse_mode=ParseMode.HTML,
                    reply_markup=markup if last else None,
                    link_preview_options=NO_PREVIEW,
                )
                ids.append(message.message_id)
            sent[str(chat)] = ids
        return sent

    async def _edit_card(self, row: outbox.Row, now: datetime) -> Sent:
        assert row.item_id is not None, "a card_edit row names its item"
        card = await _card_for(self.store, row.item_id, row.payload)
        if card is None:
            log.warning("card_edit %d: item %d has no card; nothing to edit", row.id, row.item_id)
            return {}
        if card.state == "pending":
            raise Retry("its card is not sent yet", now + CARD_NOT_SENT_WAIT)
        messages: Sent = json.loads(card.external_id or "{}")
        last_part = render.card_parts(row.item_id, card.payload)[-1]
        text = render.decided_card(last_part, row.payload, row.created_at)
        # Quorum progress keeps the buttons; a decision, or an edit that replaced
        # this version with a new card, takes them away.
        still_open = row.payload.get("state") == "awaiting_approval" and not row.payload.get(
            "status", ""
        ).startswith("✏️")
        markup = self.keyboard(card) if still_open else None
        edited: Sent = {}
        for chat, ids in messages.items():
            try:
                await self.bot.edit_message_text(
                    text,
                    chat_id=int(chat),
                    message_id=ids[-1],
                    parse_mode=ParseMode.HTML,
                    reply_markup=markup,
                    link_preview_options=NO_PREVIEW,
                )
            except tg_error.BadRequest as exc:
                if not not_modified(exc):
                    raise
            edited[chat] = ids[-1:]
        return edited


async def _card_for(store: Store, item_id: int, edit: dict[str, Any]) -> outbox.Row | None:
    """The card showing the version the edit is about (else the newest one)."""
    cards = [c for c in await outbox.for_item(store, item_id, "card") if c.state != "failed"]
    for card in cards:
        shown = (card.payload.get("attempt"), card.payload.get("version"))
        if shown == (edit.get("attempt"), edit.get("version")):
            return card
    return cards[0] if cards else None


def _alert_text(payload: dict[str, object]) -> str:
    mark = "🚨" if payload.get("level") == "error" else "⚠️"
    text = render.esc(payload.get("text", ""))
    return text if text[:1] in ("⏳", "🚨", "⚠") else f"{mark} {text}"


def message_ids(row: outbox.Row) -> Sent:
    """The messages a sent row became: {"<chat id>": [message ids]}."""
    found: Sent = json.loads(row.external_id) if row.external_id else {}
    return found
