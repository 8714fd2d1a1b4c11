-- The editor's numbers of one pipeline over a window [:since, :until): what its items did
-- (from their events), how long decisions waited, and what the AI calls cost. Each query
-- starts from the pipeline's items (items_by_state) and reads each one's events by
-- events_by_entity: CROSS JOIN keeps SQLite from driving the join from every item event
-- (PostgreSQL plans it freely).

-- name: entries
-- Entries recorded (fetched and new after dedup) in the window.
SELECT count(*) FROM items
 WHERE pipeline = :pipeline AND created_at >= :since AND created_at < :until

-- name: moves
-- Item transitions in the window, counted by (from, to).
SELECT e.from_state, e.to_state, count(*)
  FROM items i CROSS JOIN events e
 WHERE i.pipeline = :pipeline AND e.entity = 'item' AND e.entity_id = CAST(i.id AS TEXT)
   AND e.at >= :since AND e.at < :until
 GROUP BY e.from_state, e.to_state

-- name: reject_reasons
-- The reasons of rejections in the window, as their events recorded them, with counts.
SELECT e.reason, count(*)
  FROM items i CROSS JOIN events e
 WHERE i.pipeline = :pipeline AND e.entity = 'item' AND e.entity_id = CAST(i.id AS TEXT)
   AND e.at >= :since AND e.at < :until
   AND e.from_state = 'awaiting_approval' AND e.to_state = 'rejected'
 GROUP BY e.reason

-- name: decision_waits
-- For each approval or rejection in the window, how long its card waited: from the item's
-- latest entry into awaiting_approval before it (milliseconds).
SELECT d.at - (SELECT max(w.at) FROM events w
                WHERE w.entity = 'item' AND w.entity_id = d.entity_id
                  AND w.id < d.id AND w.to_state = 'awaiting_approval')
  FROM items i CROSS JOIN events d
 WHERE i.pipeline = :pipeline AND d.entity = 'item' AND d.entity_id = CAST(i.id AS TEXT)
   AND d.at >= :since AND d.at < :until
   AND d.from_state = 'awaiting_approval' AND d.to_state IN ('approved', 'rejected')

-- name: spend
-- AI spend (triage and drafts) of the pipeline's claims begun in the window: only a
-- settled claim has an actual cost (a CHECK), so the sum is of settled ones.
SELECT coalesce(sum(actual_micros), 0) FROM claims
 WHERE created_at >= :since AND created_at < :until AND pipeline = :pipeline
