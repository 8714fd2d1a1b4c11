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
-- waits, then reads what the first one wrote; with the tells of the version it is at.
SELECT items.*,
       (SELECT d.tells FROM drafts d WHERE d.item_id = items.id AND d.version = items.version)
           AS shown_tells
FROM items WHERE id = :id FOR UPDATE OF items

-- name: move
-- The compare-and-set of store/sql/items.sql's `move`, writing in the same statement
-- what goes with the move: its event (from :from_state, the state the item left) and
-- the outbox rows queued with it (:queue, a JSON array of {"item_id", "kind", "target",
-- "payload", "dedupe_key", "due"}; a row whose dedupe_key is taken is left out). One row
-- comes back if the item moved, with the kinds queued; none if it did not, and then
-- nothing was written.
WITH moved AS (
  UPDATE items
     SET state = :to_state, reason = :reason, last_transition_at = :now, deadline = :deadline,
         version = version + :bump, attempt = attempt + :again
   WHERE id = :id AND state = :from_state AND attempt = :attempt AND version = :version
     AND (CAST(:floor_from AS bigint) IS NULL OR coalesce((
          SELECT e.at FROM events e
           WHERE e.entity = 'item' AND e.entity_id = CAST(:id AS text) AND e.to_state = :to_state
             AND e.actor IN ('system', 'scheduler', 'sweep')
           ORDER BY e.id DESC LIMIT 1), :floor_from) <= :floor_from)
  RETURNING id, attempt),
logged AS (
  INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
  SELECT 'item', CAST(moved.id AS text), :from_state, :to_state, :actor, moved.attempt,
         :reason, :now
    FROM moved),
queued AS (
  INSERT INTO outbox (kind, target, item_id, payload, dedupe_key, next_attempt_at, created_at)
  SELECT q.kind, q.target, moved.id, q.payload, q.dedupe_key, q.due, :now
    FROM moved
    JOIN ROWS FROM (json_to_recordset(CAST(:queue AS json))
                    AS (item_id bigint, kind text, target text, payload text,
                        dedupe_key text, due bigint)) WITH ORDINALITY
         AS q (item_id, kind, target, payload, dedupe_key, due, n) ON q.item_id = moved.id
   ORDER BY q.n
      ON CONFLICT (dedupe_key) DO NOTHING
  RETURNING kind)
SELECT moved.id, ARRAY(SELECT kind FROM queued) AS queued FROM moved

-- name: move_many
-- The compare-and-set of `move` for several items at once (a tick's chunk): :seen is a
-- JSON array of `move`'s parameters, one object per item (store/sql/items.sql). Each item
-- moved gets its event (from the state it left) and its rows of :queue (as `move`),
-- written by this same statement. Returns the items moved, in :seen's order, each with
-- the kinds queued for it.
WITH seen AS (
  SELECT * FROM ROWS FROM (json_to_recordset(CAST(:seen AS json))
                           AS (id bigint, from_state text, attempt bigint, version bigint,
                               to_state text, reason text, now bigint, deadline bigint,
                               floor_from bigint, bump bigint, again bigint, actor text))
                WITH ORDINALITY
                AS s (id, from_state, attempt, version, to_state, reason, now, deadline,
                      floor_from, bump, again, actor, n)),
moved AS (
  UPDATE items
     SET state = s.to_state, reason = s.reason, last_transition_at = s.now,
         deadline = s.deadline, version = items.version + s.bump,
         attempt = items.attempt + s.again
    FROM seen s
   WHERE items.id = s.id AND items.state = s.from_state AND items.attempt = s.attempt
     AND items.version = s.version
     AND (s.floor_from IS NULL OR coalesce((
          SELECT e.at FROM events e
           WHERE e.entity = 'item' AND e.entity_id = CAST(items.id AS text)
             AND e.to_state = s.to_state AND e.actor IN ('system', 'scheduler', 'sweep')
           ORDER BY e.id DESC LIMIT 1), s.floor_from) <= s.floor_from)
  RETURNING items.*, s.from_state, s.actor, s.n),
logged AS (
  INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
  SELECT 'item', CAST(moved.id AS text), moved.from_state, moved.state, moved.actor,
         moved.attempt, moved.reason, moved.last_transition_at
    FROM moved ORDER BY moved.n),
queued AS (
  INSERT INTO outbox (kind, target, item_id, payload, dedupe_key, next_attempt_at, created_at)
  SELECT q.kind, q.target, moved.id, q.payload, q.dedupe_key, q.due, moved.last_transition_at
    FROM moved
    JOIN ROWS FROM (json_to_recordset(CAST(:queue AS json))
                    AS (item_id bigint, kind text, target text, payload text,
                        dedupe_key text, due bigint)) WITH ORDINALITY
         AS q (item_id, kind, target, payload, dedupe_key, due, n) ON q.item_id = moved.id
   ORDER BY moved.n, q.n
      ON CONFLICT (dedupe_key) DO NOTHING
  RETURNING item_id, kind)
SELECT moved.*, ARRAY(SELECT kind FROM queued WHERE queued.item_id = moved.id) AS queued
  FROM moved ORDER BY moved.n

-- name: create_many
-- Record a chunk of fetched items in one statement (:fetched, a JSON array of
-- {"source_id", "payload", "content_hash"}), each with its event (to new, by :actor,
-- for :reason) in the order given; those already known are left alone (one writer of
-- two inserting the same id at once sees it as new), and only the rows inserted come back.
WITH fetched AS (
  SELECT * FROM ROWS FROM (json_to_recordset(CAST(:fetched AS json))
                           AS (source_id text, payload text, content_hash text))
                WITH ORDINALITY AS f (source_id, payload, content_hash, n)),
created AS (
  INSERT INTO items (pipeline, scope, source_id, payload, content_hash, state, created_at,
                     last_transition_at)
  SELECT :pipeline, :scope, f.source_id, f.payload, f.content_hash, 'new', :now, :now
    FROM fetched f ORDER BY f.n
      ON CONFLICT (pipeline, scope, source_id) DO NOTHING
  RETURNING *),
logged AS (
  INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
  SELECT 'item', CAST(c.id AS text), NULL, 'new', :actor, c.attempt, :reason, :now
    FROM created c JOIN fetched f ON f.source_id = c.source_id ORDER BY f.n)
SELECT * FROM created

-- name: vote
-- One operator's decision on one draft version, and (a JSON array) the operators who
-- approved it so far, this one too, as `approvals` lists them; a repeat is ignored and
-- returns no row. (The item is locked first, so no other vote on it is in flight.)
WITH cast_vote AS (
  INSERT INTO votes (item_id, attempt, version, operator, decision, at)
  VALUES (:item_id, :attempt, :version, :operator, :decision, :now)
      ON CONFLICT DO NOTHING
  RETURNING operator, decision, at)
SELECT CAST(coalesce(json_agg(v.operator ORDER BY v.at, v.operator), '[]') AS text) AS approvals
  FROM (SELECT operator, at FROM votes
         WHERE item_id = :item_id AND attempt = :attempt AND version = :version
           AND decision = 'approve'
        UNION ALL
        SELECT operator, at FROM cast_vote WHERE decision = 'approve') AS v
HAVING EXISTS (SELECT 1 FROM cast_vote)

-- name: drafts
-- Several draft versions at once: :wanted is a JSON array of {"item_id", "version"}.
SELECT d.* FROM drafts d
  JOIN json_to_recordset(CAST(:wanted AS json)) AS w (item_id bigint, version bigint)
    ON d.item_id = w.item_id AND d.version = w.version
