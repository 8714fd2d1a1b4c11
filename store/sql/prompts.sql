-- name: open
-- Remember an Edit prompt; the same message asked again keeps the latest question.
INSERT INTO edit_prompts (chat_id, message_id, item_id, version, created_at)
VALUES (:chat_id, :message_id, :item_id, :version, :now)
    ON CONFLICT (chat_id, message_id)
    DO UPDATE SET item_id = excluded.item_id, version = excluded.version,
                  created_at = excluded.created_at

-- name: forget_older
-- Drop prompts nobody answered before :before; their cards have long moved on.
DELETE FROM edit_prompts WHERE created_at < :before

-- name: get
-- The prompt a reply answers, if it is still open.
SELECT * FROM edit_prompts WHERE chat_id = :chat_id AND message_id = :message_id

-- name: close
-- The prompt was answered: a second reply to it is refused.
DELETE FROM edit_prompts WHERE chat_id = :chat_id AND message_id = :message_id
