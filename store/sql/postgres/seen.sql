-- name: filter_unseen
-- The ids of a JSON array not yet seen for (pipeline, scope), in input order.
SELECT ids.value
  FROM json_array_elements_text(CAST(:ids AS json)) WITH ORDINALITY AS ids (value, key)
 WHERE NOT EXISTS (
        SELECT 1 FROM seen_items s
         WHERE s.pipeline = :pipeline AND s.scope = :scope AND s.item_id = ids.value)
 ORDER BY ids.key

-- name: mark_seen
-- Insert the ids of a JSON array; RETURNING yields only the rows that were new (a row
-- another writer inserted first conflicts, so exactly one of them sees it as new).
INSERT INTO seen_items (pipeline, scope, item_id, seen_at)
SELECT :pipeline, :scope, ids.value, :now
  FROM json_array_elements_text(CAST(:ids AS json)) AS ids (value)
    ON CONFLICT DO NOTHING
RETURNING item_id
