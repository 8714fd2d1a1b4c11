-- name: first_time
-- Record an update as handled; RETURNING yields a row only the first time.
INSERT INTO handled_updates (update_id, handled_at) VALUES (:update_id, :now)
    ON CONFLICT (update_id) DO NOTHING
RETURNING update_id

-- name: prune
-- Forget updates handled before :before (Telegram keeps unconfirmed ones for a day).
DELETE FROM handled_updates WHERE update_id IN (
    SELECT update_id FROM handled_updates WHERE handled_at < :before LIMIT :batch)
