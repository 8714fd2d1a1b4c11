-- name: head
-- The newest event: the link the next event chains to.
SELECT id, hash FROM events ORDER BY id DESC LIMIT 1

-- name: insert
-- Append one event with its precomputed hash.
INSERT INTO events (id, entity, entity_id, from_state, to_state, actor, attempt, reason, at, prev_hash, hash)
VALUES (:id, :entity, :entity_id, :from_state, :to_state, :actor, :attempt, :reason, :at, :prev_hash, :hash)

-- name: for_entity
-- One entity's events, oldest first.
SELECT * FROM events WHERE entity = :entity AND entity_id = :entity_id ORDER BY id

-- name: all_from
-- Every event from an id on, in chain order (for verification).
SELECT * FROM events WHERE id >= :from_id ORDER BY id LIMIT :batch

-- name: last_entry
-- When an entity last entered a state by an automatic actor (for the floor).
SELECT at FROM events
 WHERE entity = :entity AND entity_id = :entity_id AND to_state = :to_state
   AND actor IN ('system', 'scheduler', 'sweep')
 ORDER BY id DESC LIMIT 1
