"""Approval cards in a group or a forum topic: where each pipeline's cards go, and what
happens when Telegram changes that group under the bot.

    rooms = Rooms(store, pipelines, default_chat=cfg.telegram.cards_chat)
    await rooms.prepare(bot, now)       # @names to ids, named topics created once
    rooms.chat(pipeline)                # the group's id now; None: private cards
    rooms.thread(pipeline)              # the forum topic's message_thread_id, or None
    await rooms.moved(old, new, now)    # the group became a supergroup: everything moves
    await rooms.lost(chat, why, now)    # removed, or no right to post: private cards for now

A group the bot cannot post in is left alone for LOST_FOR, then tried again: adding the
bot back (or giving it the right to post) is all an operator does. Meanwhile the cards
go to the operators' private chats, and each operator is told once why.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from telegram import Bot
from telegram import error as tg_error

from bot.chat import people
from pipelines.approval import card_trail
from pipelines.config import spec
from store import outbox, payloads
from store.db import Store
from store.review import rooms

log = logging.getLogger(__name__)

#: How long cards stay private after the group refused one, before it is tried again.
LOST_FOR = timedelta(minutes=5)


@dataclass
class Room:
    """A pipeline's group as configured, and as resolved against Telegram."""

    chat: int | str
    topic: int | str | None
    chat_id: int | None = None
    thread_id: int | None = None


class Rooms:
    def __init__(
        self,
        store: Store,
        pipelines: Mapping[str, spec.Pipeline],
        *,
        default_chat: int | str | None = None,
        operators: Iterable[int] = (),
    ) -> None:
        self._store = store
        self._operators = list(operators)
        self._rooms: dict[str, Room] = {}
        self._approvers: dict[str, list[int]] = {}
        for name, pipeline in pipelines.items():
            chat = pipeline.approval.chat if pipeline.approval.chat is not None else default_chat
            if chat is not None:
                room = Room(chat, pipeline.approval.topic)
                room.chat_id = chat if isinstance(chat, int) else None
                room.thread_id = room.topic if isinstance(room.topic, int) else None
                self._rooms[name] = room
                self._approvers[name] = list(pipeline.approval.operators)
        self._moves: dict[int, int] = {}
        self._lost: dict[int, datetime] = {}

    def chat(self, pipeline: str, now: datetime) -> int | None:
        """Where the pipeline's cards go now: its group, or None for private chats (no
        group configured, not resolved, or refusing the bot lately)."""
        room = self._rooms.get(pipeline)
        if room is None or room.chat_id is None:
            return None
        chat = self.current(room.chat_id)
        lost_at = self._lost.get(chat)
        if lost_at is not None and now - lost_at < LOST_FOR:
            return None
        return chat

    def thread(self, pipeline: str) -> int | None:
        room = self._rooms.get(pipeline)
        return room.thread_id if room else None

    def current(self, chat_id: int) -> int:
        """A group's id after the moves Telegram made (a group upgraded to a supergroup)."""
        seen = {chat_id}
        while chat_id in self._moves and self._moves[chat_id] not in seen:
            chat_id = self._moves[chat_id]
            seen.add(chat_id)
        return chat_id

    def is_room(self, chat_id: int) -> bool:
        return any(
            r.chat_id is not None and self.current(r.chat_id) == chat_id
            for r in self._rooms.values()
        )

    async def prepare(self, bot: Bot, now: datetime) -> None:
        """Load the recorded moves, resolve @names and create named topics (once: the
        store remembers them). A room that cannot be resolved is lost, and said so."""
        self._moves = await rooms.moves(self._store)
        for name, room in self._rooms.items():
            try:
                await self._resolve(bot, room, now)
                await self._learn_names(bot, room, name, now)
            except tg_error.TelegramError as exc:
                log.error("the group for %s's cards (%s): %s", name, room.chat, exc.message)
                await self.lost(room.chat_id or 0, exc.message, now, shown=str(room.chat))
            except (TypeError, ValueError, KeyError) as exc:  # an answer PTB could not read
                log.error("the group for %s's cards (%s): %r", name, room.chat, exc)
                why = "Telegram's answer could not be read"
                await self.lost(room.chat_id or 0, why, now, shown=str(room.chat))

    async def _learn_names(self, bot: Bot, room: Room, pipeline: str, now: datetime) -> None:
        """The approvers' names from the group, so the first card's votes line names
        people who have not written to the bot yet; one not in the group is skipped."""
        assert room.chat_id is not None
        approvers = self._approvers.get(pipeline) or self._operators
        for user_id in approvers:
            try:
                member = await bot.get_chat_member(self.current(room.chat_id), user_id)
            except tg_error.BadRequest:
                continue
            await people.note(self._store, member.user, now)

    async def _resolve(self, bot: Bot, room: Room, now: datetime) -> None:
        if room.chat_id is None:
            room.chat_id = int((await bot.get_chat(room.chat)).id)
        chat = self.current(room.chat_id)
        if isinstance(room.topic, str):
            thread = await rooms.topic(self._store, chat, room.topic)
            if thread is None:
                thread = await self._create_topic(bot, chat, room.topic, now)
            room.thread_id = thread

    async def _create_topic(self, bot: Bot, chat: int, name: str, now: datetime) -> int:
        """Create the named topic; the store keeps the first one made. Workers starting
        at once may each make one: those that lose delete theirs, so one topic stays."""
        made = (await bot.create_forum_topic(chat, name)).message_thread_id
        kept = await rooms.add_topic(self._store, chat, name, made, now)
        if kept == made:
            log.info("created forum topic %r in chat %d", name, chat)
            return kept
        try:
            await bot.delete_forum_topic(chat, made)
        except tg_error.TelegramError as exc:
            log.warning(
                "another worker created forum topic %r in chat %d first; deleting this "
                "worker's copy (thread %d) failed: %s",
                name,
                chat,
                made,
                exc.message,
            )
        return kept

    async def moved(self, old: int, new: int, now: datetime) -> None:
        """Telegram moved a group to a supergroup: cards, prompts and this map follow
        (once: both chats' service messages and a refused send may all report it)."""
        if self._moves.get(old) == new:
            return
        changed = await rooms.move_chat(self._store, old, new, now)
        self._moves[old] = new
        log.warning(
            "group %d became supergroup %d: %d sent card(s) moved; set approval.chat to %d "
            "in the pipeline files that name the old id",
            old,
            new,
            changed,
            new,
        )

    async def lost(self, chat: int, why: str, now: datetime, *, shown: str = "") -> None:
        """The bot may not post in `chat` (`shown` as configured, when it has no id yet):
        its cards go to private chats for LOST_FOR, and every operator is told,
        privately, once an hour at most."""
        self._lost[chat] = now
        text = (
            f"🚨 approval cards cannot go to the group {shown or chat}: {why}. They go to your "
            "private chats until the bot can post there again (add it back to the group, "
            "or give it the right to send messages)."
        )
        key = f"room-lost:{shown or chat}:{now:%Y-%m-%d-%H}"
        alert = payloads.Alert("error", text).to_json()
        for operator in self._operators:
            await outbox.enqueue(
                self._store,
                "alert",
                f"{card_trail.CHAT_TARGET}{operator}",
                alert,
                now,
                dedupe_key=f"{key}:{operator}",
            )
        log.error("cards for group %s go to private chats for now: %s", shown or chat, why)

    def found(self, chat: int) -> None:
        """The bot is back in the group (a member update said so): try it again now."""
        self._lost.pop(chat, None)
