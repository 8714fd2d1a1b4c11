-- name: uncertain
-- Uncertain holds with their items, the oldest first: what an operator must reconcile.
SELECT c.id AS claim_id, c.pipeline, c.item_id, i.state AS item_state, c.reserved_micros,
       c.reason, c.started_at, c.updated_at AS since
  FROM claims c LEFT JOIN items i ON i.id = c.item_id
 WHERE c.state = 'uncertain'
 ORDER BY c.updated_at, c.id LIMIT :limit

-- name: pipelines_by_spend
-- Pipelines ranked by what their claims begun since a moment spent (then hold).
SELECT pipeline,
       coalesce(sum(actual_micros), 0) AS spent_micros,
       coalesce(sum(CASE WHEN state IN ('reserved', 'started', 'uncertain') THEN reserved_micros END), 0) AS held_micros,
       count(*) AS claims
  FROM claims
 WHERE created_at >= :since
 GROUP BY pipeline
 ORDER BY spent_micros DESC, held_micros DESC, pipeline
