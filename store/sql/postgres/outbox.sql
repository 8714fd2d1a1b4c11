-- name: due
-- Pending rows of one kind whose time has come, oldest first (a card with its draft's
-- text): one range of outbox_due, so a backlog of another kind is never read.
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id
   AND d.version = CAST(CAST(o.payload AS json) ->> 'version' AS bigint)
 WHERE o.state = 'pending' AND o.kind = :kind AND o.next_attempt_at <= :now
 ORDER BY o.id LIMIT :limit

-- name: get
-- One row (a card with its draft's text).
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id
   AND d.version = CAST(CAST(o.payload AS json) ->> 'version' AS bigint)
 WHERE o.id = :id

-- name: waiting
-- Pending rows of these kinds not due yet whose last error starts with :prefix, oldest
-- first (a card with its draft's text); ILIKE, as SQLite's LIKE ignores case.
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id
   AND d.version = CAST(CAST(o.payload AS json) ->> 'version' AS bigint)
 WHERE o.state = 'pending' AND o.next_attempt_at > :now
   AND o.kind IN (SELECT value FROM json_array_elements_text(CAST(:kinds AS json)))
   AND o.last_error ILIKE CAST(:prefix AS text) || '%'
 ORDER BY o.id LIMIT :limit

-- name: next_due
-- When the earliest pending row of these kinds is due (NULL: none pending).
SELECT min(next_attempt_at) FROM outbox
 WHERE state = 'pending'
   AND kind IN (SELECT value FROM json_array_elements_text(CAST(:kinds AS json)))

-- name: for_item
-- An item's outbox rows of one kind, newest first (cards with their draft's text).
SELECT o.*, d.text AS draft_text FROM outbox o
  LEFT JOIN drafts d
    ON o.kind = 'card' AND d.item_id = o.item_id
   AND d.version = CAST(CAST(o.payload AS json) ->> 'version' AS bigint)
 WHERE o.item_id = :item_id AND o.kind = :kind ORDER BY o.id DESC

-- name: prune_sent
-- Sent messages older than the cutoff whose item (if any) ended before it too; dispatch
-- rows are kept.
DELETE FROM outbox WHERE id IN (
    SELECT o.id FROM outbox o LEFT JOIN items i ON i.id = o.item_id
     WHERE o.state = 'sent' AND o.kind != 'dispatch' AND o.sent_at < :cutoff
       AND (o.item_id IS NULL
            OR (i.state IN (SELECT value FROM json_array_elements_text(CAST(:ended AS json)))
                AND i.last_transition_at < :cutoff))
     ORDER BY o.sent_at LIMIT :batch)

-- name: claim_due
-- Take up to :limit pending rows of one kind whose time has come and that no live claim
-- holds, for :worker until :until; rows another worker is taking at this moment are
-- skipped, not waited for. Each comes back whole (a card with its draft's text).
UPDATE outbox SET claimed_by = :worker, lease_until = :until
 WHERE id IN (
        SELECT id FROM outbox
         WHERE state = 'pending' AND kind = :kind AND next_attempt_at <= :now
           AND (lease_until IS NULL OR lease_until < :now)
         ORDER BY id LIMIT :limit
           FOR UPDATE SKIP LOCKED)
RETURNING *, (SELECT d.text FROM drafts d
               WHERE outbox.kind = 'card' AND d.item_id = outbox.item_id
                 AND d.version = CAST(CAST(outbox.payload AS json) ->> 'version' AS bigint))
             AS draft_text
