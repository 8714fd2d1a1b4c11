-- Items a pipeline dropped before drafting (filtered; a triage's skipped beside it), for
-- the operator's listing and the day's count. Both read a range of items_by_state.

-- name: recent
-- One pipeline's items in one dropped state, the most recently dropped first.
SELECT * FROM items
 WHERE pipeline = :pipeline AND state = :state
 ORDER BY last_transition_at DESC, id DESC LIMIT :limit

-- name: count_since
-- How many of one pipeline's items entered one dropped state since a moment and are still in it.
SELECT count(*) FROM items
 WHERE pipeline = :pipeline AND state = :state AND last_transition_at >= :since
