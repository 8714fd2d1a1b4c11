-- name: in_state
-- Items of one state (optionally one pipeline), oldest transition first.
SELECT * FROM items
 WHERE state = :state AND (CAST(:pipeline AS text) IS NULL OR pipeline = :pipeline)
 ORDER BY last_transition_at, id LIMIT :limit

-- name: sla_due
-- Items in a transient state past their deadline, its warning share or its warning lead
-- (the share's product truncated toward zero, as SQLite's CAST AS INTEGER does).
SELECT * FROM items
 WHERE deadline IS NOT NULL
   AND (deadline <= :now
        OR deadline - CAST(:warn_lead AS bigint) <= :now
        OR last_transition_at
           + CAST(trunc((deadline - last_transition_at) * CAST(:warn_share AS double precision)) AS bigint)
           <= :now)
 ORDER BY deadline, id

-- name: lock
-- One item by id, its row locked until the transaction ends: a second decision on it
-- waits, then reads what the first one wrote.
SELECT * FROM items WHERE id = :id FOR UPDATE

-- name: move_many
-- The compare-and-set of `move` for several items at once (a tick's chunk): :seen is a
-- JSON array of {"id", "state", "attempt", "version"} as the caller read each item;
-- :bump 1 takes each to its next draft version. Returns the items moved.
UPDATE items
   SET state = :to_state, reason = :reason, last_transition_at = :now, deadline = :deadline,
       version = items.version + :bump
  FROM json_to_recordset(CAST(:seen AS json)) AS s (id bigint, state text, attempt bigint, version bigint)
 WHERE items.id = s.id AND items.state = s.state AND items.attempt = s.attempt
   AND items.version = s.version
   AND (CAST(:floor_from AS bigint) IS NULL OR coalesce((
        SELECT e.at FROM events e
         WHERE e.entity = 'item' AND e.entity_id = CAST(items.id AS text)
           AND e.to_state = :to_state AND e.actor IN ('system', 'scheduler', 'sweep')
         ORDER BY e.id DESC LIMIT 1), :floor_from) <= :floor_from)
RETURNING items.*

-- name: create_many
-- Record a chunk of fetched items in one statement (:fetched, a JSON array of
-- {"source_id", "payload", "content_hash"}); those already known are left alone (one
-- writer of two inserting the same id at once sees it as new), and only the rows
-- inserted come back.
INSERT INTO items (pipeline, scope, source_id, payload, content_hash, state, created_at, last_transition_at)
SELECT :pipeline, :scope, f.source_id, f.payload, f.content_hash, 'new', :now, :now
  FROM ROWS FROM (json_to_recordset(CAST(:fetched AS json))
                  AS (source_id text, payload text, content_hash text)) WITH ORDINALITY
       AS f (source_id, payload, content_hash, n)
 ORDER BY f.n
    ON CONFLICT (pipeline, scope, source_id) DO NOTHING
RETURNING *
