-- name: extend
-- Move the deadline of an item still waiting on the card's attempt and version.
UPDATE items SET deadline = :deadline
 WHERE id = :id AND state = 'awaiting_approval' AND attempt = :attempt AND version = :version

-- name: extensions
-- How often this attempt's approval window was extended (its events say so).
SELECT count(*) FROM events
 WHERE entity = 'item' AND entity_id = :entity_id AND attempt = :attempt
   AND from_state = 'awaiting_approval' AND to_state = 'awaiting_approval'
   AND reason LIKE 'window extended%'
