-- Approval cards in a group: the forum topics the bot created by name (the Bot API cannot
-- list a forum's topics, so the bot remembers them), and groups Telegram moved to a
-- supergroup (pipeline files may still name the old id; the move maps it).

CREATE TABLE forum_topics (
    chat_id    BIGINT NOT NULL,
    name       TEXT NOT NULL,
    thread_id  BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (chat_id, name)
);

CREATE TABLE chat_moves (
    old_id   BIGINT PRIMARY KEY,
    new_id   BIGINT NOT NULL,
    moved_at BIGINT NOT NULL
);
