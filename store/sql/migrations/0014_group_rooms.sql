-- Approval cards in a group: the forum topics the bot created by name (the Bot API cannot
-- list a forum's topics, so the bot remembers them), and groups Telegram moved to a
-- supergroup (pipeline files may still name the old id; the move maps it).

CREATE TABLE forum_topics (
    chat_id    INTEGER NOT NULL,
    name       TEXT NOT NULL,
    thread_id  INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (chat_id, name)
);

CREATE TABLE chat_moves (
    old_id   INTEGER PRIMARY KEY,
    new_id   INTEGER NOT NULL,
    moved_at INTEGER NOT NULL
);
