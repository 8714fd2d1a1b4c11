-- name: filter_unseen
-- The ids of a JSON array not yet seen for (pipeline, scope), in input order.
SELECT ids.value
  FROM json_each(:ids) AS ids
 WHERE NOT EXISTS (
        SELECT 1 FROM seen_items s
         WHERE s.pipeline = :pipeline AND s.scope = :scope AND s.item_id = ids.value)
 ORDER BY ids.key

-- name: mark_seen
-- Insert the ids of a JSON array; RETURNING yields only the rows that were new.
INSERT INTO seen_items (pipeline, scope, item_id, seen_at)
SELECT :pipeline, :scope, ids.value, :now FROM json_each(:ids) AS ids WHERE true
    ON CONFLICT DO NOTHING
RETURNING item_id

-- name: scopes
-- Every (pipeline, scope) pair that has rows, in order.
SELECT DISTINCT pipeline, scope FROM seen_items ORDER BY pipeline, scope

-- name: sweep_batch
-- Delete up to :batch rows of one scope seen before :before.
DELETE FROM seen_items
 WHERE (pipeline, scope, item_id) IN (
        SELECT pipeline, scope, item_id FROM seen_items
         WHERE pipeline = :pipeline AND scope = :scope AND seen_at < :before
         LIMIT :batch)
