-- name: retry
-- Back to approved under the same attempt and version, so the dispatch keeps its key.
UPDATE items
   SET state = 'approved', reason = :reason, last_transition_at = :now, deadline = NULL
 WHERE id = :id AND state = 'failed' AND attempt = :attempt AND version = :version
RETURNING *

-- name: last_event
-- The item's newest event: whether it failed at dispatch.
SELECT from_state, to_state, reason FROM events
 WHERE entity = 'item' AND entity_id = :entity_id ORDER BY id DESC LIMIT 1
