-- name: enqueue
-- Queue a message or a dispatch; a row with the same dedupe_key is left alone.
INSERT INTO outbox (kind, target, item_id, payload, dedupe_key, next_attempt_at, created_at)
VALUES (:kind, :target, :item_id, :payload, :dedupe_key, :due, :now)
    ON CONFLICT (dedupe_key) DO NOTHING
RETURNING id

-- name: due
-- Pending rows of one kind whose time has come, oldest first (a card with its draft's
-- text): one range of outbox_due, so a backlog of another kind is never read.
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id AND d.version = o.payload ->> '$.version'
 WHERE o.state = 'pending' AND o.kind = :kind AND o.next_attempt_at <= :now
 ORDER BY o.id LIMIT :limit

-- name: claim_due
-- Take up to :limit pending rows of one kind whose time has come and that no live claim
-- holds, for :worker until :until; each comes back whole (a card with its draft's text),
-- so nothing reads it a second time. (PostgreSQL's version skips rows another worker is
-- taking at the same moment, instead of waiting for them.)
UPDATE outbox SET claimed_by = :worker, lease_until = :until
 WHERE id IN (
        SELECT id FROM outbox
         WHERE state = 'pending' AND kind = :kind AND next_attempt_at <= :now
           AND (lease_until IS NULL OR lease_until < :now)
         ORDER BY id LIMIT :limit)
RETURNING *, (SELECT d.text FROM drafts d
               WHERE outbox.kind = 'card' AND d.item_id = outbox.item_id
                 AND d.version = outbox.payload ->> '$.version') AS draft_text

-- name: get
-- One row (a card with its draft's text).
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id AND d.version = o.payload ->> '$.version'
 WHERE o.id = :id

-- name: mark_sent
-- Record success and the external id (e.g. the Telegram message id).
UPDATE outbox SET state = 'sent', sent_at = :now, external_id = :external_id, attempts = attempts + 1, last_error = NULL,
       claimed_by = NULL, lease_until = NULL
 WHERE id = :id AND state = 'pending'

-- name: mark_retry
-- Record a transient failure, when to try again, and the messages already sent (if any).
UPDATE outbox SET attempts = attempts + 1, next_attempt_at = :next_at, last_error = :error,
       external_id = COALESCE(:external_id, external_id), claimed_by = NULL, lease_until = NULL
 WHERE id = :id AND state = 'pending'

-- name: defer
-- Try later without counting an attempt (the destination asked us to wait).
UPDATE outbox SET next_attempt_at = :next_at, last_error = :error,
       external_id = COALESCE(:external_id, external_id), claimed_by = NULL, lease_until = NULL
 WHERE id = :id AND state = 'pending'

-- name: waiting
-- Pending rows of these kinds not due yet whose last error starts with :prefix, oldest
-- first (a card with its draft's text).
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id AND d.version = o.payload ->> '$.version'
 WHERE o.state = 'pending' AND o.next_attempt_at > :now
   AND o.kind IN (SELECT value FROM json_each(:kinds))
   AND o.last_error LIKE :prefix || '%'
 ORDER BY o.id LIMIT :limit

-- name: next_due
-- When the earliest pending row of these kinds is due (NULL: none pending).
SELECT min(next_attempt_at) FROM outbox WHERE state = 'pending' AND kind IN (SELECT value FROM json_each(:kinds))

-- name: mark_failed
-- Give up on a row.
UPDATE outbox SET state = 'failed', attempts = attempts + 1, last_error = :error,
       claimed_by = NULL, lease_until = NULL
 WHERE id = :id AND state = 'pending'

-- name: for_item
-- An item's outbox rows of one kind, newest first (cards with their draft's text).
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id AND d.version = o.payload ->> '$.version'
 WHERE o.item_id = :item_id AND o.kind = :kind ORDER BY o.id DESC

-- name: prune_sent
-- Sent messages older than the cutoff whose item (if any) ended before it too (a card
-- edit that ends an item still finds its card); dispatch rows are kept (they record
-- what went out, and reconcile compares dispatch folders with them).
DELETE FROM outbox WHERE id IN (
    SELECT o.id FROM outbox o LEFT JOIN items i ON i.id = o.item_id
     WHERE o.state = 'sent' AND o.kind != 'dispatch' AND o.sent_at < :cutoff
       AND (o.item_id IS NULL
            OR (i.state IN (SELECT value FROM json_each(:ended))
                AND i.last_transition_at < :cutoff))
     ORDER BY o.sent_at LIMIT :batch)

-- name: dispatches
-- Dispatch rows sent or still pending, oldest first (reconcile compares dispatch
-- folders with them); a dispatch row has no card text.
SELECT o.*, NULL AS draft_text FROM outbox o
 WHERE o.kind = 'dispatch' AND o.state IN ('sent', 'pending')
 ORDER BY o.id

-- name: cancel
-- Call off a pending row (an undone approval's dispatch); its key is freed for a new row.
UPDATE outbox SET state = 'failed', last_error = :error, dedupe_key = NULL
 WHERE dedupe_key = :dedupe_key AND state = 'pending'

-- name: by_key
-- The row queued under a dedupe key, if any.
SELECT id FROM outbox WHERE dedupe_key = :dedupe_key

-- name: release_claims
-- Free every claim: at the start of the one process a store admits, whose holders died.
UPDATE outbox SET claimed_by = NULL, lease_until = NULL WHERE claimed_by IS NOT NULL
