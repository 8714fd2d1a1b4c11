-- name: insert
-- Keep one signed head of the event chain.
INSERT INTO audit_checkpoints (event_id, hash, signed_at, key_id, signature)
VALUES (:event_id, :hash, :signed_at, :key_id, :signature)
RETURNING id

-- name: latest
-- The newest checkpoint.
SELECT * FROM audit_checkpoints ORDER BY id DESC LIMIT 1

-- name: since
-- Checkpoints whose event is at or after :event_id, oldest first.
SELECT * FROM audit_checkpoints WHERE event_id >= :event_id ORDER BY id

-- name: head
-- The newest event: what a checkpoint signs.
SELECT id, hash FROM events ORDER BY id DESC LIMIT 1

-- name: events_from
-- Events from an id on, in chain order, each with the hash it chains to (to export).
SELECT e.id, e.entity, e.entity_id, e.from_state, e.to_state, e.actor, e.attempt, e.reason, e.at,
       coalesce(e.prev_hash,
                CASE WHEN e.id = 1 THEN :genesis
                     ELSE (SELECT p.hash FROM events p WHERE p.id = e.id - 1) END,
                '') AS prev_hash,
       e.hash
  FROM events e
 WHERE e.id >= :from_id ORDER BY e.id LIMIT :batch
