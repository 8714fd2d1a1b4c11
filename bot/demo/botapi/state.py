"""What the local Bot API server knows: chats and their messages, queued updates, faults.

One `threading.Condition` guards everything. Every change bumps `revision` and wakes all
waiters, which is what lets getUpdates return the moment an update is queued, lets tests
`wait_for` the bot's reply, and lets a web chat long-poll `/control/wait` for changes.
Times are Unix seconds passed in by the caller; nothing here reads the clock.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from collections import deque
from typing import Any

# Re-exported: the server, its methods and the tests name these through `state`.
from bot.demo.botapi.groups import Groups
from bot.demo.botapi.objects import ApiError as ApiError
from bot.demo.botapi.objects import CallRecord as CallRecord
from bot.demo.botapi.objects import ChatMessage as ChatMessage
from bot.demo.botapi.objects import Fault as Fault
from bot.demo.botapi.objects import bad_request as bad_request
from bot.demo.botapi.objects import chat_object as chat_object
from bot.demo.botapi.objects import message_object
from bot.demo.botapi.objects import update_type as update_type
from bot.demo.botapi.objects import user_object as user_object
from bot.demo.botapi.watched import Watched

#: Telegram returns at most this many updates per getUpdates call.
MAX_UPDATES = 100


class LocalApiState(Watched):
    """The server's memory. All public methods are thread-safe."""

    def __init__(self) -> None:
        super().__init__()
        # Update ids go on across restarts, as Telegram's do for one bot: a bot that
        # remembers the ids it handled (a demo resumed with its data dir, several
        # workers) must not take a new server's first updates for ones it has seen.
        self._update_ids = itertools.count(time.time_ns() // 1_000_000 % 2**31)
        self.poll_generation = 0  # which getUpdates call is the live one
        self._callback_ids = itertools.count(4_000_000_001)
        self._updates: deque[dict[str, Any]] = deque()
        self._allowed_updates: list[str] = []
        self._chats: dict[int, dict[int, list[ChatMessage]]] = {}
        self._next_message_id: dict[int, int] = {}
        self._open_callbacks: dict[str, dict[str, Any]] = {}
        self._callback_answers: list[dict[str, Any]] = []
        self._faults: dict[str, deque[Fault]] = {}
        self._calls: list[CallRecord] = []
        self.tokens_used: list[str] = []
        self.webhook: dict[str, Any] | None = None
        self.commands: dict[str, list[dict[str, Any]]] = {}
        self.chat_actions: list[dict[str, Any]] = []
        self._photos: dict[tuple[int, int], bytes] = {}
        #: Groups and supergroups by chat id (other chat ids accept anything, as before).
        self.groups = Groups()
        #: user id -> (first name, username) their updates and member records carry.
        self.names: dict[int, tuple[str, str | None]] = {}

    # -- bookkeeping ---------------------------------------------------------

    def summary(self) -> str:
        sent = [(m.chat_id, m.message_id, m.text[:60]) for m in self.sent()]
        return f"the bot has sent {sent}"

    def record_call(
        self, method: str, status: int, params: dict[str, Any], token: str | None
    ) -> None:
        with self._cond:
            if token is not None and token not in self.tokens_used:
                self.tokens_used.append(token)
            self._calls.append(CallRecord(method, status, params))
            self._cond.notify_all()  # wakes wait_for; not a change a web chat need redraw

    def calls(self, method: str | None = None) -> list[CallRecord]:
        with self._cond:
            # Telegram's method names are case-insensitive, so is this filter.
            wanted = method.lower() if method else None
            return [c for c in self._calls if wanted in (None, c.method.lower())]

    def add_fault(self, method: str, fault: Fault) -> None:
        with self._cond:
            self._faults.setdefault(method, deque()).append(fault)

    def take_fault(self, method: str) -> Fault | None:
        with self._cond:
            queue = self._faults.get(method)
            return queue.popleft() if queue else None

    # -- updates -------------------------------------------------------------

    def push_update(self, payload: dict[str, Any]) -> dict[str, Any]:
        with self._cond:
            update = {"update_id": next(self._update_ids), **payload}
            self._updates.append(update)
            self._changed()
            return update

    def drop_pending_updates(self) -> None:
        with self._cond:
            self._updates.clear()
            self._changed()

    def pending_update_count(self) -> int:
        with self._cond:
            return len(self._updates)

    def take_updates(
        self, offset: int, limit: int, timeout: float, allowed: list[str] | None
    ) -> list[dict[str, Any]]:
        """getUpdates: confirm below `offset`, then wait up to `timeout` for something new."""
        deadline = time.monotonic() + timeout
        with self._cond:
            if allowed is not None:
                self._allowed_updates = allowed  # Telegram keeps the last list given
            # A newer getUpdates ends this one with 409, as when two bot instances poll.
            self.poll_generation += 1
            generation = self.poll_generation
            self._cond.notify_all()
            while True:
                if generation != self.poll_generation:
                    raise ApiError(
                        409,
                        "Conflict: terminated by other getUpdates request;"
                        " make sure that only one bot instance is running",
                    )
                self._confirm(offset)
                ready = [u for u in self._updates if u["update_id"] >= offset][:limit]
                left = deadline - time.monotonic()
                if ready or self._closed or left <= 0:
                    return ready
                self._cond.wait(left)

    def _confirm(self, offset: int) -> None:
        if offset < 0:  # keep only the last -offset updates, as Telegram does
            while len(self._updates) > -offset:
                self._updates.popleft()
        while self._updates and self._updates[0]["update_id"] < offset:
            self._updates.popleft()
        if self._allowed_updates:
            kept = [u for u in self._updates if update_type(u) in self._allowed_updates]
            self._updates = deque(kept)

    # -- messages ------------------------------------------------------------

    def add_message(
        self,
        chat_id: int,
        *,
        from_bot: bool,
        sender: dict[str, Any],
        text: str,
        entities: list[dict[str, Any]],
        reply_markup: dict[str, Any] | None,
        reply_to_message_id: int | None,
        now: int,
        photo: tuple[bytes, dict[str, int]] | None = None,
        message_thread_id: int | None = None,
        **media: Any,
    ) -> ChatMessage:
        """`media`: link_preview_options, or photo_url for a photo sent by URL."""
        with self._cond:
            if from_bot:
                self.groups.check_post(chat_id, message_thread_id)
            chat = self._chats.setdefault(chat_id, {})
            message_id = self._next_message_id.get(chat_id, 1)
            self._next_message_id[chat_id] = message_id + 1
            message = ChatMessage(
                chat_id=chat_id,
                message_id=message_id,
                from_bot=from_bot,
                sender=sender,
                text=text,
                entities=entities,
                reply_markup=reply_markup,
                reply_to_message_id=reply_to_message_id,
                date=now,
                photo=photo[1] if photo else None,
                message_thread_id=message_thread_id,
                **media,
            )
            if photo is not None:
                self._photos[(chat_id, message_id)] = photo[0]
            chat[message_id] = [message]
            self._changed()
            return message

    def photo(self, chat_id: int, message_id: int) -> bytes | None:
        """The picture a photo message carries, as the bot uploaded it."""
        with self._cond:
            return self._photos.get((chat_id, message_id))

    def find(self, chat_id: int, message_id: int) -> ChatMessage | None:
        """The current version of a message, or None if unknown or deleted."""
        with self._cond:
            versions = self._chats.get(chat_id, {}).get(message_id)
            if not versions or versions[-1].deleted:
                return None
            return versions[-1]

    def edit(self, chat_id: int, message_id: int, now: int, **changes: Any) -> ChatMessage:
        """Store a new version of a bot message; Telegram's 400s for the usual mistakes."""
        with self._cond:
            self.groups.check_post(chat_id, None, editing=True)
            current = self.find(chat_id, message_id)
            if current is None:
                raise bad_request("message to edit not found")
            if not current.from_bot:
                raise bad_request("message can't be edited")
            edited = dataclasses.replace(
                current, **changes, edit_date=now, version=current.version + 1
            )
            if (edited.text, edited.entities, edited.reply_markup, edited.link_preview_options) == (
                current.text,
                current.entities,
                current.reply_markup,
                current.link_preview_options,
            ):
                raise bad_request(
                    "message is not modified: specified new message content and reply markup"
                    " are exactly the same as a current content and reply markup of the message"
                )
            self._chats[chat_id][message_id].append(edited)
            self._changed()
            return edited

    def delete(self, chat_id: int, message_id: int) -> None:
        with self._cond:
            current = self.find(chat_id, message_id)
            if current is None:
                raise bad_request("message to delete not found")
            self._chats[chat_id][message_id].append(dataclasses.replace(current, deleted=True))
            self._changed()

    def telegram_message(self, message: ChatMessage) -> dict[str, Any]:
        """The Message object Telegram would return for this version."""
        replied = (
            self.find(message.chat_id, message.reply_to_message_id)
            if message.reply_to_message_id
            else None
        )
        result = message_object(message, self.chat(message.chat_id))
        if replied is not None:
            result["reply_to_message"] = self.telegram_message(
                dataclasses.replace(replied, reply_to_message_id=None)
            )
        return result

    def chat(self, chat_id: int) -> dict[str, Any]:
        """The Chat object for an id: a known group's, else one made up from the id."""
        with self._cond:
            return self.groups.chat(chat_id) or chat_object(chat_id)

    def create_topic(self, chat_id: int, name: str) -> int:
        with self._cond:
            thread = self.groups.create_topic(chat_id, name)
            self._changed()
            return thread

    def delete_topic(self, chat_id: int, thread: int) -> None:
        with self._cond:
            self.groups.delete_topic(chat_id, thread)
            self._changed()

    def migrate(self, old: int, new: int, by: dict[str, Any], now: int) -> None:
        """A group becomes a supergroup: its messages go along (ids kept, as the bot sees
        them), and both chats get the service message Telegram sends."""
        with self._cond:
            self.groups.migrate(old, new)
            for message_id, versions in self._chats.get(old, {}).items():
                moved = [dataclasses.replace(v, chat_id=new) for v in versions]
                self._chats.setdefault(new, {})[message_id] = moved
            self._next_message_id[new] = self._next_message_id.get(old, 1)
            for chat, field, other in (
                (old, "migrate_to_chat_id", new),
                (new, "migrate_from_chat_id", old),
            ):
                message_id = self._next_message_id.get(chat, 1)
                self._next_message_id[chat] = message_id + 1
                service = {
                    "message_id": message_id,
                    "from": by,
                    "chat": self.chat(chat),
                    "date": now,
                    field: other,
                }
                self.push_update({"message": service})

    # -- callback queries ----------------------------------------------------

    def open_callback(self, query: dict[str, Any]) -> str:
        """Give a callback_query an id and keep it until the bot answers it."""
        with self._cond:
            query_id = str(next(self._callback_ids))
            self._open_callbacks[query_id] = {"id": query_id, **query}
            return query_id

    def callback_query(self, query_id: str) -> dict[str, Any]:
        with self._cond:
            return self._open_callbacks[query_id]

    def answer_callback(self, query_id: str, answer: dict[str, Any]) -> None:
        with self._cond:
            if self._open_callbacks.pop(query_id, None) is None:
                raise bad_request(
                    "query is too old and response timeout expired or query ID is invalid"
                )
            self._callback_answers.append({"callback_query_id": query_id, **answer})
            self._changed()

    def callback_answers(self) -> list[dict[str, Any]]:
        with self._cond:
            return list(self._callback_answers)

    # -- other recorded settings ----------------------------------------------

    def set_webhook(self, webhook: dict[str, Any] | None) -> None:
        with self._cond:
            self.webhook = webhook
            self._changed()

    def set_commands(self, key: str, commands: list[dict[str, Any]]) -> None:
        with self._cond:
            self.commands[key] = commands
            self._changed()

    def record_chat_action(self, chat_id: int, action: str) -> None:
        with self._cond:
            self.chat_actions.append({"chat_id": chat_id, "action": action})
            self._changed()

    def export(self) -> list[ChatMessage]:
        """The current version of every message of every chat, deleted ones included."""
        with self._cond:
            return [v[-1] for c in sorted(self._chats) for _, v in sorted(self._chats[c].items())]

    def restore(self, messages: list[ChatMessage]) -> None:
        """Put back messages kept by `export` (a restarted demo), ids and all; messages
        sent from now on are numbered after them."""
        with self._cond:
            for m in messages:
                self._chats.setdefault(m.chat_id, {})[m.message_id] = [m]
                group = self.groups.get(m.chat_id)
                if group is not None and m.message_thread_id is not None:  # its topic lives on
                    group.topics.setdefault(m.message_thread_id, f"topic {m.message_thread_id}")
                following = max(self._next_message_id.get(m.chat_id, 1), m.message_id + 1)
                self._next_message_id[m.chat_id] = following
            self._changed()

    # -- views for tests and the web chat ------------------------------------

    def messages(self, chat_id: int) -> list[ChatMessage]:
        """The chat as it looks now: both sides, current versions, deleted ones left out."""
        with self._cond:
            chat = self._chats.get(chat_id, {})
            return [v[-1] for _, v in sorted(chat.items()) if not v[-1].deleted]

    def sent(self, chat_id: int | None = None) -> list[ChatMessage]:
        """What the bot sent (current versions), in one chat or all chats in order."""
        with self._cond:
            chats = [chat_id] if chat_id is not None else sorted(self._chats)
            return [m for c in chats for m in self.messages(c) if m.from_bot]

    def history(self, chat_id: int, message_id: int) -> list[ChatMessage]:
        """Every version of a message, the original first, a deletion last."""
        with self._cond:
            return list(self._chats.get(chat_id, {}).get(message_id, []))
