"""What Telegram tells the bot about the groups its cards go to: a group upgraded to a
supergroup (the service message carries the new id), and the bot removed from a group,
added back, or given back its right to post (my_chat_member).

Registered by bot.app ahead of the operator gate: these come from whoever changed the
group, often not an operator, and carry no command to refuse.
"""

from __future__ import annotations

from telegram import (
    ChatMemberAdministrator,
    ChatMemberMember,
    ChatMemberOwner,
    ChatMemberRestricted,
    Update,
)
from telegram.ext import ApplicationHandlerStop

from bot.chat import kit


async def migrated(update: Update, context: kit.Context) -> None:
    """A group became a supergroup: every card reference follows it to the new id."""
    message = update.effective_message
    assert message is not None
    d = kit.deps(context)
    if d.sender.rooms is not None:
        if message.migrate_from_chat_id is not None:
            await d.sender.rooms.moved(message.migrate_from_chat_id, message.chat_id, d.clock())
        elif message.migrate_to_chat_id is not None:
            await d.sender.rooms.moved(message.chat_id, message.migrate_to_chat_id, d.clock())
    raise ApplicationHandlerStop


async def membership(update: Update, context: kit.Context) -> None:
    """The bot's own membership changed in a group its cards go to."""
    change = update.my_chat_member
    assert change is not None
    d = kit.deps(context)
    rooms, chat = d.sender.rooms, change.chat.id
    if rooms is not None and rooms.is_room(chat):
        member = change.new_chat_member
        may_post = isinstance(member, ChatMemberOwner | ChatMemberAdministrator | ChatMemberMember)
        if isinstance(member, ChatMemberRestricted):  # still in the group: may it post?
            may_post = member.can_send_messages
        if may_post:
            rooms.found(chat)
            d.sender.wake()
        else:
            why = (
                "the bot may no longer send messages there"
                if isinstance(member, ChatMemberRestricted)
                else "the bot was removed from the group"
            )
            await rooms.lost(chat, why, d.clock())
    raise ApplicationHandlerStop
