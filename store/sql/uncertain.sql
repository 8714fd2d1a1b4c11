-- name: open
-- Uncertain claims with their items, the oldest first: of one pipeline, and that became
-- uncertain before a moment (ms); NULL for either: all.
SELECT c.id AS claim_id, c.pipeline, c.item_id, i.state AS item_state, c.reserved_micros,
       c.reason, c.started_at, c.updated_at AS since
  FROM claims c LEFT JOIN items i ON i.id = c.item_id
 WHERE c.state = 'uncertain'
   AND (CAST(:pipeline AS TEXT) IS NULL OR c.pipeline = :pipeline)
   AND (CAST(:before AS BIGINT) IS NULL OR c.updated_at < :before)
 ORDER BY c.updated_at, c.id

-- name: announced
-- The alerts about uncertain claims still kept in the outbox: each names its claims.
SELECT payload FROM outbox WHERE dedupe_key LIKE 'claims-uncertain:%'

-- name: newest_of_item
-- The id of an item's newest claim: the one the item waits behind, if any.
SELECT max(id) FROM claims WHERE item_id = :item_id
