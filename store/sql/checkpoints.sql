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
-- The newest sealed event (its place in the chain and its hash): what a checkpoint signs.
SELECT seq, hash FROM events WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1

-- name: events_from
-- Sealed events from a place in the chain on, in chain order (`id` is the place), each
-- with the hash it chains to (to export; unsealed ones follow once sealed).
SELECT e.seq AS id, e.entity, e.entity_id, e.from_state, e.to_state, e.actor, e.attempt,
       e.reason, e.at,
       coalesce(e.prev_hash,
                CASE WHEN e.seq = 1 THEN :genesis
                     ELSE (SELECT p.hash FROM events p WHERE p.seq = e.seq - 1) END,
                '') AS prev_hash,
       e.hash
  FROM events e
 WHERE e.seq >= :from_id ORDER BY e.seq LIMIT :batch
