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
