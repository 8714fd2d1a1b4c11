-- name: enqueue
-- Queue a message or a dispatch; a row with the same dedupe_key is left alone.
INSERT INTO outbox (kind, target, item_id, payload, dedupe_key, next_attempt_at, created_at)
VALUES (:kind, :target, :item_id, :payload, :dedupe_key, :now, :now)
    ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id

-- name: due
-- Pending rows whose time has come, oldest first.
SELECT * FROM outbox WHERE state = 'pending' AND next_attempt_at <= :now AND kind IN (SELECT value FROM json_each(:kinds))
 ORDER BY id LIMIT :limit

-- name: get
-- One row.
SELECT * FROM outbox WHERE id = :id

-- name: mark_sent
-- Record success and the external id (e.g. the Telegram message id).
UPDATE outbox SET state = 'sent', sent_at = :now, external_id = :external_id, attempts = attempts + 1, last_error = NULL
 WHERE id = :id AND state = 'pending'

-- name: mark_retry
-- Record a transient failure, when to try again, and the messages already sent (if any).
UPDATE outbox SET attempts = attempts + 1, next_attempt_at = :next_at, last_error = :error,
       external_id = COALESCE(:external_id, external_id)
 WHERE id = :id AND state = 'pending'

-- name: defer
-- Try later without counting an attempt (the destination asked us to wait).
UPDATE outbox SET next_attempt_at = :next_at, last_error = :error,
       external_id = COALESCE(:external_id, external_id)
 WHERE id = :id AND state = 'pending'

-- name: waiting
-- Pending rows of these kinds not due yet whose last error starts with :prefix, oldest first.
SELECT * FROM outbox WHERE state = 'pending' AND next_attempt_at > :now AND kind IN (SELECT value FROM json_each(:kinds))
   AND last_error LIKE :prefix || '%'
 ORDER BY id LIMIT :limit

-- name: next_due
-- When the earliest pending row of these kinds is due (NULL: none pending).
SELECT min(next_attempt_at) FROM outbox WHERE state = 'pending' AND kind IN (SELECT value FROM json_each(:kinds))

-- name: mark_failed
-- Give up on a row.
UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_error = :error
 WHERE id = :id AND state = 'pending'

-- name: for_item
-- An item's outbox rows of one kind, newest first.
SELECT * FROM outbox WHERE item_id = :item_id AND kind = :kind ORDER BY id DESC
