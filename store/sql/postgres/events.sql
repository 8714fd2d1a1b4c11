-- name: lock_head
-- Seal for this sealer alone until it commits: a deposed leader's sealer, the new one's
-- and the witness seal one after the other, the second from the head the first left.
-- An advisory lock, not a row lock on the head: a chain with no sealed event has no row
-- to lock, and a head sealed meanwhile is a new row the waiter never locked. Writers
-- never take it, so they never wait on this. The key spells "gh-seals".
SELECT pg_advisory_xact_lock(7451255557129858163)

-- name: seal
-- Seal a batch of events in one statement, each once (the trigger allows no other
-- change): :seals is a JSON array of {"id", "seq", "hash"}.
UPDATE events SET seq = s.seq, hash = s.hash
  FROM json_to_recordset(CAST(:seals AS json)) AS s (id bigint, seq bigint, hash text)
 WHERE events.id = s.id AND events.seq IS NULL

-- name: insert_many
-- Append several unsealed events in one statement, alike but for what :moved gives each
-- (a JSON array of {"entity_id", "from_state", "attempt"}), in its order.
INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
SELECT :entity, m.entity_id, m.from_state, :to_state, :actor, m.attempt, :reason, :at
  FROM ROWS FROM (json_to_recordset(CAST(:moved AS json))
                  AS (entity_id text, from_state text, attempt bigint)) WITH ORDINALITY
       AS m (entity_id, from_state, attempt, n)
 ORDER BY m.n
