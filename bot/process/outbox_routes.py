"""Where each outbox row goes and with which buttons: the sender's targets, threads, keyboards."""

from __future__ import annotations

from telegram import InlineKeyboardMarkup

from bot import settings as settings_mod
from bot.cards import actions, keyboards, taps, uncertain
from bot.chat import rooms, sender
from pipelines.approval import card_trail
from pipelines.service import runtime as runtime_mod
from store import outbox, payloads
from store.review import followups


def alert_chats(cfg: settings_mod.Settings) -> list[int]:
    """Where alerts go: the alerts chat if one is set, else each operator's private chat."""
    chat = cfg.telegram.alerts_chat
    return [chat] if chat is not None else list(cfg.telegram.operators)


def targets(
    cfg: settings_mod.Settings, runtime: runtime_mod.Runtime, groups: rooms.Rooms
) -> sender.Targets:
    operators = list(cfg.telegram.operators)

    def approvers(name: str) -> list[int]:
        pipeline = runtime.pipelines.get(name)
        # An operator's private chat has the operator's user id.
        return list(pipeline.approval.operators or operators) if pipeline else operators

    def targets(row: outbox.Row) -> list[int]:
        name = str(row.payload.get("pipeline") or "")
        room = groups.chat(name, runtime.now()) if name else None
        if row.target == outbox.ALERTS:  # about an item of a group's pipeline: the group
            if room is not None:
                return [room]
            about_an_item = row.item_id is not None and name in runtime.pipelines
            # About one item: where its card is (its approvers), not to everyone.
            return approvers(name) if about_an_item else alert_chats(cfg)
        chats = payloads.Card.of(row).chats if row.kind == "card" else ()
        if chats:  # an escalation's card: the people brought in
            return list(chats)
        if row.target.startswith(card_trail.CHAT_TARGET):  # one chat (a fresh card, a note)
            return [int(row.target.removeprefix(card_trail.CHAT_TARGET))]
        if room is not None:  # one card for the whole team
            return [room]
        return approvers(name)

    return targets


def threads(groups: rooms.Rooms) -> sender.Threads:
    def thread(row: outbox.Row, chat: int) -> int | None:
        name = str(row.payload.get("pipeline") or "")
        return groups.thread(name) if chat < 0 and groups.is_room(chat) else None

    return thread


def item_buttons(
    key: bytes, buttons: str, item_id: int, attempt: int | None, version: int | None
) -> InlineKeyboardMarkup | None:
    """The buttons a card edit or an alert asks for under one item's message."""
    if attempt is None or version is None:
        return None
    shown = followups.Shown(item_id, attempt, version)
    if buttons == payloads.RETRY_BUTTONS:
        return actions.retry_keyboard(key, shown)
    if buttons == payloads.DECIDE_BUTTONS:
        return taps.warning_keyboard(key, shown)
    if buttons == payloads.REPLAY_BUTTONS:
        return actions.replay_keyboard(key, shown)
    if buttons == payloads.ESCALATE_BUTTONS:
        return taps.card_keyboard(key, shown, escalate=True)
    return None


def keyboard(key: bytes, runtime: runtime_mod.Runtime) -> sender.Keyboard:
    def keyboard(row: outbox.Row) -> InlineKeyboardMarkup | None:
        listed = payloads.Alert.of(row) if row.kind == "alert" else None
        if listed is not None and listed.offer is not None:  # a digest's list
            return keyboards.listed_keyboard(key, listed.offer, listed.count or 0)
        if listed is not None and listed.about == "claims_uncertain":  # an episode
            return uncertain.keyboard(key, row.id, len(listed.facts.get("claim_ids", ())))
        if listed is not None and listed.buttons and row.item_id is not None:
            return item_buttons(
                key, listed.buttons, row.item_id, listed.attempt, listed.reply_to_version
            )
        if row.item_id is None or row.kind not in ("card", "card_edit"):
            return None
        if row.kind == "card":
            card = payloads.Card.of(row)
            escalate = card.buttons == payloads.ESCALATE_BUTTONS
            shown = followups.Shown(row.item_id, card.attempt, card.version)
            return taps.card_keyboard(key, shown, escalate=escalate, image=bool(card.image_url))
        edit = payloads.CardEdit.of(row)
        if edit.buttons:
            return item_buttons(key, edit.buttons, row.item_id, edit.attempt, edit.version)
        # A decided card: Undo while it lasts, Redraft.
        return keyboards.decided_keyboard(key, edit, runtime.pipelines.get(edit.pipeline))

    return keyboard
