"""Groups, supergroups and forum topics on the local server, with the states Telegram
puts a bot in that a private chat never shows: a group upgraded to a supergroup, a bot
removed from the group or without the right to post, a topic that does not exist.

    api.add_group(-1001234, "Review room", members=[1001, 1002], forum=True)
    api.migrate_group(-4001, -1004001, by_user_id=1001)     # a group becomes a supergroup
    api.set_bot_status(-1001234, "restricted", by_user_id=1001)   # "not enough rights"
    api.topics(-1001234)                                    # what createForumTopic made

A chat id no group was added for behaves as before: anything is accepted there.
Thread-safety is the state's: every call here runs under its lock.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

from bot.demo.botapi.objects import ApiError, bad_request

BotStatus = Literal["member", "restricted", "kicked"]
#: The first forum topic's message_thread_id (Telegram's "General" topic is 1).
FIRST_TOPIC = 2


@dataclasses.dataclass
class Group:
    id: int
    title: str
    members: set[int]
    forum: bool = False
    username: str | None = None
    topics: dict[int, str] = dataclasses.field(default_factory=dict)
    bot_status: BotStatus = "member"
    migrated_to: int | None = None

    @property
    def kind(self) -> str:
        return "supergroup" if str(self.id).startswith("-100") else "group"


class Groups:
    """The groups the server knows, by chat id."""

    def __init__(self) -> None:
        self._by_id: dict[int, Group] = {}

    def add(self, group: Group) -> Group:
        if group.id >= 0:
            raise ValueError(f"a group's chat id is negative, not {group.id}")
        self._by_id[group.id] = group
        return group

    def get(self, chat_id: int) -> Group | None:
        return self._by_id.get(chat_id)

    def by_username(self, username: str) -> Group | None:
        wanted = username.removeprefix("@").lower()
        return next((g for g in self._by_id.values() if (g.username or "").lower() == wanted), None)

    def chat(self, chat_id: int) -> dict[str, Any] | None:
        """The Chat object of a known group (None: not a group this server knows)."""
        group = self._by_id.get(chat_id)
        if group is None:
            return None
        found: dict[str, Any] = {"id": group.id, "type": group.kind, "title": group.title}
        if group.forum:
            found["is_forum"] = True
        if group.username:
            found["username"] = group.username
        return found

    def check_post(self, chat_id: int, thread: int | None, *, editing: bool = False) -> None:
        """Telegram's refusals for a bot posting (or editing) in this group."""
        group = self._by_id.get(chat_id)
        if group is None:
            return
        if group.migrated_to is not None:
            raise ApiError(
                400,
                "Bad Request: group chat was upgraded to a supergroup chat",
                {"migrate_to_chat_id": group.migrated_to},
            )
        if group.bot_status == "kicked":
            raise ApiError(403, f"Forbidden: bot was kicked from the {group.kind} chat")
        if group.bot_status == "restricted" and not editing:
            raise bad_request("not enough rights to send text messages to the chat")
        if thread is not None and thread not in group.topics:
            raise bad_request("message thread not found")

    def create_topic(self, chat_id: int, name: str) -> int:
        group = self._by_id.get(chat_id)
        if group is None:
            raise bad_request("chat not found")
        self.check_post(chat_id, None)
        if not group.forum:
            raise bad_request("the chat is not a forum")
        if not 1 <= len(name) <= 128:
            raise bad_request("topic name must be 1-128 characters")
        thread = max(group.topics, default=FIRST_TOPIC - 1) + 1
        group.topics[thread] = name
        return thread

    def delete_topic(self, chat_id: int, thread: int) -> None:
        group = self._by_id.get(chat_id)
        if group is None:
            raise bad_request("chat not found")
        if thread not in group.topics:
            raise bad_request("TOPIC_ID_INVALID")
        del group.topics[thread]

    def migrate(self, old: int, new: int) -> Group:
        """`old` becomes a supergroup with id `new` (its members and title go along)."""
        group = self._by_id.get(old)
        if group is None:
            raise ValueError(f"no group {old} to migrate")
        if not str(new).startswith("-100"):
            raise ValueError(f"a supergroup's id starts with -100, not {new}")
        group.migrated_to = new
        return self.add(
            dataclasses.replace(
                group,
                id=new,
                members=set(group.members),
                topics=dict(group.topics),
                migrated_to=None,
            )
        )


#: What a restricted member may not do here: everything (the bot may not post).
_RESTRICTED = (
    "change_info",
    "invite_users",
    "pin_messages",
    "send_messages",
    "send_polls",
    "send_other_messages",
    "add_web_page_previews",
    "manage_topics",
    "send_audios",
    "send_documents",
    "send_photos",
    "send_videos",
    "send_video_notes",
    "send_voice_notes",
    "edit_tag",
    "react_to_messages",
)


def member_object(user: dict[str, Any], status: BotStatus) -> dict[str, Any]:
    """A ChatMember as Telegram sends it in a my_chat_member update."""
    if status == "member":
        return {"status": "member", "user": user}
    if status == "kicked":
        return {"status": "kicked", "user": user, "until_date": 0}
    return {
        "status": "restricted",
        "user": user,
        "is_member": True,
        "until_date": 0,
        **{f"can_{right}": False for right in _RESTRICTED},
    }
