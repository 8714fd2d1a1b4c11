-- name: ask
-- Remember a prompt answered by a reply (a reject reason, a redraft note).
INSERT INTO reply_prompts (chat_id, message_id, kind, item_id, attempt, version, created_at)
VALUES (:chat_id, :message_id, :kind, :item_id, :attempt, :version, :now)
    ON CONFLICT (chat_id, message_id)
    DO UPDATE SET kind = excluded.kind, item_id = excluded.item_id, attempt = excluded.attempt,
                  version = excluded.version, created_at = excluded.created_at

-- name: forget_older_asks
-- Drop prompts nobody answered before :before.
DELETE FROM reply_prompts WHERE created_at < :before

-- name: asked
-- The prompt a reply answers, if it is still open.
SELECT * FROM reply_prompts WHERE chat_id = :chat_id AND message_id = :message_id

-- name: answered
-- The prompt was answered: a second reply to it is refused.
DELETE FROM reply_prompts WHERE chat_id = :chat_id AND message_id = :message_id

-- name: keep_note
-- The reviewer's note for an attempt's draft.
INSERT INTO redraft_notes (item_id, attempt, note, actor, created_at)
VALUES (:item_id, :attempt, :note, :actor, :now)

-- name: note
-- The note for one attempt, if a reviewer left one.
SELECT note FROM redraft_notes WHERE item_id = :item_id AND attempt = :attempt

-- name: offer
-- A listed set of item versions a bulk decision may apply to.
INSERT INTO bulk_offers (pipeline, items, created_at) VALUES (:pipeline, :items, :now)
RETURNING id

-- name: forget_old_offers
-- Drop lists past their life; nobody can act on them any more.
DELETE FROM bulk_offers WHERE created_at < :before

-- name: get_offer
-- One bulk offer.
SELECT * FROM bulk_offers WHERE id = :id

-- name: close_offer
-- A bulk decision was taken from this offer: a second one is refused.
UPDATE bulk_offers SET decided_at = :now WHERE id = :id AND decided_at IS NULL

-- name: nudge
-- Record a reminder or an escalation for an item's attempt; a repeat is ignored.
INSERT INTO approval_nudges (item_id, attempt, kind, at) VALUES (:item_id, :attempt, :kind, :now)
    ON CONFLICT DO NOTHING

-- name: nudged
-- Whether an item's attempt has had a reminder or an escalation.
SELECT 1 FROM approval_nudges WHERE item_id = :item_id AND attempt = :attempt AND kind = :kind

-- name: nudges_of
-- The reminders and escalations already sent for some items (ids as a JSON array).
SELECT item_id, attempt, kind FROM approval_nudges
 WHERE item_id IN (SELECT value FROM json_each(:ids))
