-- name: insert
-- Append one unsealed event: the sealer gives it its place in the chain and its hash.
INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
VALUES (:entity, :entity_id, :from_state, :to_state, :actor, :attempt, :reason, :at)

-- name: insert_many
-- Append several unsealed events in one statement, alike but for what :moved gives each
-- (a JSON array of {"entity_id", "from_state", "attempt"}), in its order.
INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
SELECT :entity, m.value ->> '$.entity_id', m.value ->> '$.from_state', :to_state, :actor,
       m.value ->> '$.attempt', :reason, :at
  FROM json_each(:moved) AS m ORDER BY m.key

-- name: lock_head
-- Take the newest sealed event for this sealer alone until it commits (no-op on SQLite,
-- whose one writer runs one sealing unit at a time).
SELECT seq FROM events WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1

-- name: sealed_head
-- The newest sealed event: the link the next sealed one chains to.
SELECT seq, hash FROM events WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1

-- name: unsealed
-- The oldest unsealed events, in the order they were written, with every hashed field.
SELECT id, entity, entity_id, from_state, to_state, actor, attempt, reason, at, prev_hash
  FROM events WHERE seq IS NULL ORDER BY id LIMIT :limit

-- name: seal
-- Seal a batch of events in one statement, each once (the trigger allows no other
-- change): :seals is a JSON array of {"id", "seq", "hash"}; the rows changed are those
-- this sealer sealed. The unary + keeps the planner off events_by_seq: without
-- statistics it took every unsealed event by `seq IS NULL` there and searched the JSON
-- for each (2,000 events held the writer for seconds); so each is looked up by its id.
UPDATE events SET seq = s.value ->> '$.seq', hash = s.value ->> '$.hash'
  FROM json_each(:seals) AS s
 WHERE events.id = s.value ->> '$.id' AND +events.seq IS NULL

-- name: any_unsealed
-- Whether any event waits to be sealed: one look at the partial index events_unsealed.
SELECT id FROM events WHERE seq IS NULL LIMIT 1

-- name: unsealed_span
-- The oldest and newest unsealed events' ids, and how many wait (the partial index
-- events_unsealed holds only these rows).
SELECT min(id), max(id), count(*) FROM events WHERE seq IS NULL

-- name: oldest_unsealed
-- When the oldest unsealed event was written, and how many wait (the partial index
-- events_unsealed holds only these rows, so this stays cheap at any size).
SELECT min(at), count(*) FROM events WHERE seq IS NULL

-- name: for_entity
-- One entity's events, oldest first; sealed ones with the hash they chain to.
SELECT e.id, e.seq, e.entity, e.entity_id, e.from_state, e.to_state, e.actor, e.attempt,
       e.reason, e.at,
       CASE WHEN e.seq IS NULL THEN NULL
            ELSE coalesce(e.prev_hash,
                          CASE WHEN e.seq = 1 THEN :genesis
                               ELSE (SELECT p.hash FROM events p WHERE p.seq = e.seq - 1) END,
                          '') END AS prev_hash,
       e.hash
  FROM events e
 WHERE e.entity = :entity AND e.entity_id = :entity_id ORDER BY e.id

-- name: all_from
-- Sealed events from a place in the chain on, in chain order (`id` is the place), each
-- with the hash it chains to (to verify).
SELECT e.seq AS id, e.entity, e.entity_id, e.from_state, e.to_state, e.actor, e.attempt,
       e.reason, e.at,
       coalesce(e.prev_hash,
                CASE WHEN e.seq = 1 THEN :genesis
                     ELSE (SELECT p.hash FROM events p WHERE p.seq = e.seq - 1) END,
                '') AS prev_hash,
       e.hash
  FROM events e
 WHERE e.seq >= :from_id ORDER BY e.seq LIMIT :batch

-- name: half_sealed
-- Rows that are neither sealed nor unsealed as the sealer leaves them (a hash without a
-- place, or a place without a hash): only a hand behind the program's back makes them.
SELECT id FROM events WHERE (seq IS NULL) <> (hash IS NULL) ORDER BY id LIMIT 1

-- name: last_entry
-- When an entity last entered a state by an automatic actor (for the floor).
SELECT at FROM events
 WHERE entity = :entity AND entity_id = :entity_id AND to_state = :to_state
   AND actor IN ('system', 'scheduler', 'sweep')
 ORDER BY id DESC LIMIT 1

-- name: newest_checkpoint
-- The newest signed head: a sealed chain that ends before it was cut short, and what
-- its signature covers (checked with the caller's key).
SELECT event_id, hash, signed_at, key_id, signature FROM audit_checkpoints ORDER BY id DESC LIMIT 1
