-- name: topic
-- The forum topic the bot created under this name in this chat, if any.
SELECT thread_id FROM forum_topics WHERE chat_id = :chat_id AND name = :name

-- name: add_topic
-- Remember a topic the bot created (a second worker's creation of the same name loses).
INSERT INTO forum_topics (chat_id, name, thread_id, created_at)
VALUES (:chat_id, :name, :thread_id, :now)
    ON CONFLICT (chat_id, name) DO NOTHING

-- name: moves
-- Every group Telegram moved to a supergroup: old id -> new id.
SELECT old_id, new_id FROM chat_moves

-- name: add_move
-- A group moved; a move already recorded for it is replaced.
INSERT INTO chat_moves (old_id, new_id, moved_at) VALUES (:old_id, :new_id, :now)
    ON CONFLICT (old_id) DO UPDATE SET new_id = excluded.new_id, moved_at = excluded.moved_at

-- name: follow_move
-- Moves that led to the group that moved now lead where it went.
UPDATE chat_moves SET new_id = :new_id WHERE new_id = :old_id

-- name: move_edit_prompts
-- Open Edit prompts in the moved group.
UPDATE edit_prompts SET chat_id = :new_id WHERE chat_id = :old_id

-- name: move_reply_prompts
-- Open reason and note prompts in the moved group.
UPDATE reply_prompts SET chat_id = :new_id WHERE chat_id = :old_id

-- name: sent_to
-- Outbox rows whose messages are in a chat (their external_id names it).
SELECT id, external_id FROM outbox WHERE external_id LIKE :pattern

-- name: set_sent
-- A row's messages, now under the chat's new id.
UPDATE outbox SET external_id = :external_id WHERE id = :id
