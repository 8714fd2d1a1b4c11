"""The outbox sender: delivers pending card, card_edit and alert rows to Telegram.

    sender = Sender(store, application.bot, targets, keyboard, report=registry.report)
    runtime.spawn("outbox-sender", lambda: sender.run(stop), stop)   # supervised worker
    await sender.flush_item(item_id, now)            # send an item's card edits right away

Rows go oldest first. The loop sleeps until a row commits (outbox.wakeup), the next
retry falls due or a flood hold ends; no fixed sleep. Each row's message ids are
recorded as JSON in `external_id` ({"<chat id>": [message ids]}); a card split into
several messages lists them all, and a card edit finds them there. What got through
before an error is recorded with the retry, so no part goes to a chat twice.

Errors, by kind: transient ones retry with backoff (`outbox.mark_retry`) and give up
after MAX_ATTEMPTS; Telegram refusing the request (blocked, bad request) fails the
row at once; "message is not modified" counts as success. A flood-control answer
(RetryAfter, an int or a timedelta) holds every chat of that row until Telegram's
time has passed, without counting an attempt, so later rows to those chats wait and
keep their order; a second chat limited while one is held means the bot-wide limit,
and then every chat waits. Anything else (a bug, an answer PTB cannot read) is logged
with its traceback at once, reported to the operators once, and retried with backoff
until the row is parked (failed, with its reason); the rows after it go on. A sent
message whose answer could not be read is counted as delivered (id UNREAD), never sent
again. Pacing is PTB's AIORateLimiter's job (set up in bot.app) plus a per-chat
aiolimiter bucket here. Among several workers only the leader sends (`may_send`): a
tap handled elsewhere leaves its card edits to the leader's loop. How a card_edit row
changes the cards already sent is bot.chat.edits' part. Cards of a pipeline that reviews
in a group go there (bot.chat.rooms): a group Telegram moved to a supergroup moves every
reference and the row goes again; a group refusing the bot sends the row privately.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import json
import logging
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from aiolimiter import AsyncLimiter
from telegram import Bot, ReplyParameters
from telegram import error as tg_error
from telegram.constants import ParseMode

from bot.chat import alerts, card_text, edits, people, sent_messages
from bot.chat.rooms import Rooms
from bot.chat.sent_messages import UNREAD, Sent
from bot.ground import logs
from pipelines.ground import logfields, retry, waiting
from pipelines.service import workers
from pipelines.text import telegram as telegram_text
from store import errors, outbox, payloads
from store.db import Store

log = logging.getLogger(__name__)

#: The name the sender runs under, in logs, alerts and health.
NAME = "outbox-sender"
#: Kinds this sender delivers; dispatch rows belong to the engine's dispatchers.
KINDS: tuple[outbox.Kind, ...] = ("card", "card_edit", "alert")
#: After this many failed attempts a row is parked (failed) and stays for an operator to see.
MAX_ATTEMPTS = 10
#: Backoff for transient errors (seconds): the first retry waits this long, each next one twice.
FIRST_RETRY_S = 2.0
#: The longest backoff between two tries of a row (seconds).
MAX_BACKOFF_S = 300.0
#: The longest the loop sleeps without a wake-up (seconds): a safety net, since every
#: committed row wakes it and it knows when retries and holds end.
POLL_EVERY_S = 60.0
#: Rows read per pass; a full batch is followed at once by the next.
BATCH = 50
#: Rows remembered as finished, so that a copy read before it was sent is skipped.
RECENT_ROWS = 1024
#: A card_edit whose card is not sent yet waits this long before looking again.
CARD_NOT_SENT_WAIT = timedelta(seconds=1)
#: Hold key for "every chat" (a bot-wide flood limit).
EVERY_CHAT = None

#: row -> the chats it goes to (cards and alerts).
Targets = Callable[[outbox.Row], list[int]]
#: (row, chat) -> the forum topic it goes to in that chat, or None.
Threads = Callable[[outbox.Row, int], int | None]
Keyboard = edits.Keyboard

#: Token-shaped text never reaches a row's reason (the database).
_redact = logs.RedactTokens().redact


class Retry(Exception):
    """The row could not be sent now; try again at `at` (an attempt only if `counts`)."""

    def __init__(self, reason: str, at: datetime, *, counts: bool = True) -> None:
        super().__init__(reason)
        self.at = at
        self.counts = counts


class Lost(Exception):
    """A group the cards go to refused the bot (removed, or no right to post)."""

    def __init__(self, chat: int, why: str) -> None:
        super().__init__(f"group {chat} refused the bot: {why}")
        self.chat = chat
        self.why = why


class Flood(Exception):
    """Telegram's flood control: nothing more to this row's chats for `seconds`."""

    #: How a flood wait's reason starts in a row's last_error (found again after a restart).
    PREFIX = "flood control:"

    def __init__(self, seconds: float) -> None:
        super().__init__(f"{self.PREFIX} retry after {seconds:g} s")
        self.seconds = seconds


_NOW = functools.partial(datetime.now, UTC)
SendRow = Callable[[Any, outbox.Row, datetime], Awaitable[bool]]


def _tagged(send: SendRow) -> SendRow:
    """Log lines written while a row is sent carry its outbox id and item."""

    @functools.wraps(send)
    async def tagged(sender: Any, row: outbox.Row, now: datetime) -> bool:
        with logfields.bound(outbox=row.id, item=row.item_id):
            return await send(sender, row, now)

    return tagged


class Sender:
    def __init__(
        self,
        store: Store,
        bot: Bot,
        targets: Targets,
        keyboard: Keyboard,
        per_chat_per_second: float = 1.0,
        *,
        clock: Callable[[], datetime] = _NOW,
        report: workers.Report | None = None,
        may_send: Callable[[], bool] = lambda: True,
        rooms: Rooms | None = None,
        threads: Threads = lambda row, chat: None,
        per_group_per_second: float = 20 / 60,
    ) -> None:
        self.store = store
        #: The groups cards go to (None: private chats only), and each row's forum topic.
        self.rooms = rooms
        self._threads = threads
        #: Whether this worker may send now: only the leader does (pipelines.service.leader).
        self._may_send = may_send
        self.bot = bot
        self.targets = targets
        self.keyboard = keyboard
        self._clock = clock
        self._report = report
        # PTB's AIORateLimiter paces the whole bot and group chats; private chats (every
        # operator's) get a leaky bucket each here, from the same library it uses.
        self._per_chat = per_chat_per_second
        self._per_group = per_group_per_second
        self._pace: dict[str, AsyncLimiter] = {}
        self._wake = outbox.wakeup(store, KINDS)
        self._busy: set[int] = set()
        # Rows this sender finished lately: flush_item and the loop may both have read one
        # while it was pending, and it must not go out twice.
        self._finished: collections.deque[int] = collections.deque(maxlen=RECENT_ROWS)
        # Chats a row already reached before an error: not sent twice while we run.
        self._progress: dict[int, Sent] = {}
        # Flood holds: chat (EVERY_CHAT: all of them) -> nothing goes there before this.
        self._held: dict[int | None, datetime] = {}

    def wake(self) -> None:
        self._wake.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Send due rows until `stop` is set; sleeps until woken, a row is due or a hold ends."""
        await self.restore_holds(self._clock())
        while not stop.is_set():
            self._wake.clear()  # before reading: a row committed meanwhile wakes the wait
            now = self._clock()
            rows = await outbox.due(self.store, now, KINDS, limit=BATCH)
            skipped = [row for row in rows if self._skip(row, now)]
            for row in rows:
                await self.send_row(row, now)
            # A full batch is followed at once, unless every row in it has to wait.
            if len(rows) < BATCH or len(skipped) == len(rows):
                await waiting.wait_any((self._wake, stop), await self._idle_s(self._clock()))

    async def _idle_s(self, now: datetime) -> float:
        """Seconds until the next retry falls due or a flood hold ends (POLL_EVERY_S at most)."""
        ends = [t for t in self._held.values() if t > now]
        due = await outbox.next_due(self.store, KINDS)
        if due is not None and due > now:
            ends.append(due)
        longest = outbox.longest_wait(self.store, POLL_EVERY_S)
        return min([(t - now).total_seconds() for t in ends] + [longest])

    async def send_due(self, now: datetime) -> int:
        """Send every due row once, oldest first; returns how many were sent."""
        done = 0
        for row in await outbox.due(self.store, now, KINDS, limit=BATCH):
            done += await self.send_row(row, now)
        return done

    async def flush_item(self, item_id: int, now: datetime) -> int:
        """Send one item's pending card edits now (after a tap), without waiting for the loop."""
        done = 0
        for row in reversed(await outbox.for_item(self.store, item_id, "card_edit")):
            if row.state == "pending" and row.next_attempt_at <= now:
                done += await self.send_row(row, now)
        return done

    async def restore_holds(self, now: datetime) -> None:
        """Hold again the chats of rows an earlier process deferred for flood control,
        so that rows queued after them do not overtake them after a restart."""
        for row in await outbox.waiting(self.store, now, KINDS, Flood.PREFIX, limit=BATCH):
            for chat in self.targets(row):
                self._held[chat] = max(row.next_attempt_at, self._held.get(chat, now))

    def held(self, row: outbox.Row, now: datetime) -> bool:
        """Whether a flood hold keeps this row back now."""
        chats: list[int | None] = [EVERY_CHAT, *self.targets(row)]
        return any(self._held.get(chat, now) > now for chat in chats)

    def _skip(self, row: outbox.Row, now: datetime) -> bool:
        """Being sent right now, sent already (a stale copy), or held by flood control."""
        return row.id in self._busy or row.id in self._finished or self.held(row, now)

    @_tagged
    async def send_row(self, row: outbox.Row, now: datetime) -> bool:
        if self._skip(row, now) or not self._may_send():
            return False
        self._busy.add(row.id)
        try:
            sent = await self._deliver(row, now)
        except errors.Closed:
            raise
        except Exception as exc:
            await self._not_sent(row, exc, now)
            self.wake()  # the loop may sleep past the row's new time (flush_item runs beside it)
            return False
        finally:
            self._busy.discard(row.id)
        self._progress.pop(row.id, None)
        self._finished.append(row.id)
        log.debug("outbox row %d (%s) delivered", row.id, row.kind)
        return await outbox.mark_sent(self.store, row.id, json.dumps(sent), now)

    async def _not_sent(self, row: outbox.Row, exc: Exception, now: datetime) -> None:
        """Record why a row did not go out, and when (if ever) it is tried again."""
        if isinstance(exc, Flood):
            await self._hold(row, exc, now)
        elif isinstance(exc, sent_messages.Moved) and self.rooms is not None:
            await self.rooms.moved(exc.old, exc.new, now)
            await outbox.defer(self.store, row.id, str(exc), now, self._progress_json(row))
        elif isinstance(exc, Lost) and self.rooms is not None:
            await self.rooms.lost(exc.chat, exc.why, now)
            await outbox.defer(self.store, row.id, str(exc), now, self._progress_json(row))
        elif isinstance(exc, Retry) and exc.counts:
            await self._retry(row, str(exc), exc.at)
        elif isinstance(exc, Retry):
            await outbox.defer(self.store, row.id, str(exc), exc.at)
        elif isinstance(exc, tg_error.Forbidden | tg_error.BadRequest | tg_error.InvalidToken):
            log.error("outbox row %d (%s) failed for good: %s", row.id, row.kind, exc.message)
            await outbox.mark_failed(self.store, row.id, _redact(exc.message))
        else:  # a bug or an unreadable answer: this row alone waits, then is parked
            log.error("outbox row %d (%s) failed unexpectedly", row.id, row.kind, exc_info=exc)
            if self._report is not None:
                await self._report(NAME, exc, f"on outbox row {row.id}")
            reason = _redact(f"unexpected {waiting.describe(exc)}")
            await self._retry(row, reason, now + self._backoff(row))

    def _backoff(self, row: outbox.Row) -> timedelta:
        return timedelta(seconds=retry.backoff_s(row.attempts + 1, FIRST_RETRY_S, MAX_BACKOFF_S))

    async def _hold(self, row: outbox.Row, flood: Flood, now: datetime) -> None:
        # The limiter may have slept inside the call: count from the answer, not the pass.
        until = max(now, self._clock()) + timedelta(seconds=flood.seconds)
        chats: list[int | None] = list(self.targets(row))
        if any(chat not in chats and end > now for chat, end in self._held.items()):
            chats = [EVERY_CHAT]  # another chat is held already: the bot's own limit
        for chat in chats:
            self._held[chat] = max(until, self._held.get(chat, until))
        log.warning("outbox row %d (%s): %s; holding %s", row.id, row.kind, flood, chats)
        await outbox.defer(self.store, row.id, str(flood), until, self._progress_json(row))

    async def _retry(self, row: outbox.Row, reason: str, at: datetime) -> None:
        if row.attempts + 1 >= MAX_ATTEMPTS:
            log.error(
                "outbox row %d (%s) parked after %d attempts: %s",
                row.id,
                row.kind,
                MAX_ATTEMPTS,
                reason,
            )
            await outbox.mark_failed(
                self.store, row.id, f"parked after {MAX_ATTEMPTS} attempts: {reason}"
            )
        else:
            log.warning("outbox row %d (%s): %s; retrying at %s", row.id, row.kind, reason, at)
            await outbox.mark_retry(self.store, row.id, reason, at, self._progress_json(row))

    def _progress_json(self, row: outbox.Row) -> str | None:
        sent = {chat: ids for chat, ids in self._progress.get(row.id, {}).items() if ids}
        return json.dumps(sent) if sent else None

    async def _deliver(self, row: outbox.Row, now: datetime) -> Sent:
        try:
            if row.kind == "card_edit":
                return await self._edit_card(row, now)
            return await self._send_messages(row)
        except tg_error.RetryAfter as exc:
            raise Flood(retry.seconds(exc.retry_after)) from exc
        except (tg_error.TimedOut, tg_error.NetworkError) as exc:
            if isinstance(exc, tg_error.BadRequest):
                raise  # a BadRequest is a NetworkError in PTB, but it is not transient
            reason = _redact(f"{type(exc).__name__}: {exc.message}")
            raise Retry(reason, now + self._backoff(row)) from exc

    async def _send_messages(self, row: outbox.Row) -> Sent:
        if row.kind == "card":
            assert row.item_id is not None, "a card row names its item"
            payload = await people.card_payload(self.store, row.payload)
            parts = card_text.card_parts(row.item_id, payload)
            markup = self.keyboard(row)
        else:
            payload = row.payload
            parts = telegram_text.split(alerts.html(payloads.Alert.of(row)))
            markup = self.keyboard(row)  # a digest's list carries its buttons
        # A card sent again answers its earlier copy, an alert the card it is about.
        replies = await sent_messages.replies_to(self.store, row)
        # What got through before an error, in this process or (recorded) an earlier one.
        sent = self._progress.setdefault(row.id, sent_messages.message_ids(row))
        for chat in self.targets(row):
            ids = sent.setdefault(str(chat), [])
            for index in range(len(ids), len(parts)):
                last = index == len(parts) - 1
                await self._limiter(chat).acquire()
                reply_to = replies.get(str(chat)) if index == 0 else None
                # An alert has no image to preview; the buttons go under the last part.
                buttons = markup if last else None
                face = edits.Face(parts[index], edits.preview(payload, index), buttons)
                try:
                    ids.append(await self._send_part(row, chat, face, reply_to))
                except tg_error.ChatMigrated as exc:
                    raise sent_messages.Moved(chat, exc.new_chat_id) from exc
                except (tg_error.Forbidden, tg_error.BadRequest) as exc:
                    room = self.rooms is not None and self.rooms.is_room(chat)
                    if room and sent_messages.refused_by_chat(exc):
                        raise Lost(chat, exc.message) from exc
                    raise
        return sent

    def _limiter(self, chat: int) -> AsyncLimiter:
        """A private chat's bucket, or a group's (Telegram allows a group about 20 new
        messages a minute; PTB's limiter holds that pace for every call too)."""
        rate = self._per_chat if chat > 0 else min(self._per_chat, self._per_group)
        # A bucket holds at least one message: below one a second, it refills slower.
        return self._pace.setdefault(str(chat), AsyncLimiter(max(1.0, rate), max(1.0, rate) / rate))

    async def _send_part(
        self, row: outbox.Row, chat: int, face: edits.Face, reply_to: int | None
    ) -> int:
        try:
            message = await self.bot.send_message(
                chat,
                face.text,
                message_thread_id=self._threads(row, chat),
                parse_mode=ParseMode.HTML,
                reply_markup=face.markup,
                link_preview_options=face.shows,
                reply_parameters=(
                    ReplyParameters(reply_to, allow_sending_without_reply=True)
                    if reply_to
                    else None
                ),
            )
        except tg_error.TelegramError:
            raise
        except Exception as exc:
            # Telegram took the message but PTB could not read the answer: sending it
            # again would show it twice, so it counts as delivered, id unknown.
            log.exception("outbox row %d: unreadable answer for chat %d", row.id, chat)
            if self._report is not None:
                await self._report(NAME, exc, f"reading Telegram's answer (row {row.id})")
            return UNREAD
        return int(message.message_id)

    async def _edit_card(self, row: outbox.Row, now: datetime) -> Sent:
        edited = await edits.edit(self.store, self.bot, self.keyboard, row)
        if edited is None:
            # Not an attempt: the card may wait out a flood hold longer than MAX_ATTEMPTS.
            raise Retry("its card is not sent yet", now + CARD_NOT_SENT_WAIT, counts=False)
        return edited
