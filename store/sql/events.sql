-- name: head
-- The newest event: the link the next event chains to.
SELECT id, hash FROM events ORDER BY id DESC LIMIT 1

-- name: insert
-- Append one event with its precomputed hash (which covers the previous event's hash).
INSERT INTO events (id, entity, entity_id, from_state, to_state, actor, attempt, reason, at, hash)
VALUES (:id, :entity, :entity_id, :from_state, :to_state, :actor, :attempt, :reason, :at, :hash)

-- name: for_entity
-- One entity's events, oldest first, each with the hash it chains to.
SELECT e.id, e.entity, e.entity_id, e.from_state, e.to_state, e.actor, e.attempt, e.reason, e.at,
       coalesce(e.prev_hash,
                CASE WHEN e.id = 1 THEN :genesis
                     ELSE (SELECT p.hash FROM events p WHERE p.id = e.id - 1) END,
                '') AS prev_hash,
       e.hash
  FROM events e
 WHERE e.entity = :entity AND e.entity_id = :entity_id ORDER BY e.id

-- name: all_from
-- Every event from an id on, in chain order, each with the hash it chains to (to verify).
SELECT e.id, e.entity, e.entity_id, e.from_state, e.to_state, e.actor, e.attempt, e.reason, e.at,
       coalesce(e.prev_hash,
                CASE WHEN e.id = 1 THEN :genesis
                     ELSE (SELECT p.hash FROM events p WHERE p.id = e.id - 1) END,
                '') AS prev_hash,
       e.hash
  FROM events e
 WHERE e.id >= :from_id ORDER BY e.id LIMIT :batch

-- name: last_entry
-- When an entity last entered a state by an automatic actor (for the floor).
SELECT at FROM events
 WHERE entity = :entity AND entity_id = :entity_id AND to_state = :to_state
   AND actor IN ('system', 'scheduler', 'sweep')
 ORDER BY id DESC LIMIT 1
