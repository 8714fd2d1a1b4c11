-- name: create_many
-- Record a chunk of fetched items in one statement (:fetched, a JSON array of
-- {"source_id", "payload", "content_hash"}); those already known are left alone, and
-- only the rows inserted come back.
INSERT INTO items (pipeline, scope, source_id, payload, content_hash, state, created_at, last_transition_at)
SELECT :pipeline, :scope, f.value ->> '$.source_id', f.value ->> '$.payload',
       f.value ->> '$.content_hash', 'new', :now, :now
  FROM json_each(:fetched) AS f WHERE true ORDER BY f.key
    ON CONFLICT (pipeline, scope, source_id) DO NOTHING
RETURNING *

-- name: get
-- One item by id.
SELECT * FROM items WHERE id = :id

-- name: lock
-- One item by id, to decide on (PostgreSQL locks the row: see its override), with the
-- tells of the version it is at (a decision reads them in this same statement).
SELECT items.*,
       (SELECT d.tells FROM drafts d WHERE d.item_id = items.id AND d.version = items.version)
           AS shown_tells
FROM items WHERE id = :id

-- name: move
-- Compare-and-set: move an item only if it is still where the caller saw it and, with
-- :floor_from set (an automatic move), its last automatic entry into :to_state was no
-- later than that (store.items.machine.FLOOR): one statement where a read and a write
-- were two. :bump 1 takes it to its next draft version, :again 1 to its next attempt (a
-- replay). The caller holds the item's row, and builds the moved one from it.
UPDATE items
   SET state = :to_state, reason = :reason, last_transition_at = :now, deadline = :deadline,
       version = version + :bump, attempt = attempt + :again
 WHERE id = :id AND state = :from_state AND attempt = :attempt AND version = :version
   AND (CAST(:floor_from AS BIGINT) IS NULL OR coalesce((
        SELECT e.at FROM events e
         WHERE e.entity = 'item' AND e.entity_id = CAST(:id AS TEXT) AND e.to_state = :to_state
           AND e.actor IN ('system', 'scheduler', 'sweep')
         ORDER BY e.id DESC LIMIT 1), :floor_from) <= :floor_from)

-- name: move_many
-- The compare-and-set of `move` for several items at once (a tick's chunk): :seen is a
-- JSON array of `move`'s parameters, one object per item ("id", "from_state", "attempt",
-- "version" as the caller read it; "to_state", "reason", "now", "deadline", "floor_from",
-- "bump", "again"). Returns the items moved.
UPDATE items
   SET state = s.value ->> '$.to_state', reason = s.value ->> '$.reason',
       last_transition_at = s.value ->> '$.now', deadline = s.value ->> '$.deadline',
       version = items.version + (s.value ->> '$.bump'),
       attempt = items.attempt + (s.value ->> '$.again')
  FROM json_each(:seen) AS s
 WHERE items.id = s.value ->> '$.id' AND items.state = s.value ->> '$.from_state'
   AND items.attempt = s.value ->> '$.attempt' AND items.version = s.value ->> '$.version'
   AND (s.value ->> '$.floor_from' IS NULL OR coalesce((
        SELECT e.at FROM events e
         WHERE e.entity = 'item' AND e.entity_id = CAST(items.id AS TEXT)
           AND e.to_state = s.value ->> '$.to_state' AND e.actor IN ('system', 'scheduler', 'sweep')
         ORDER BY e.id DESC LIMIT 1), s.value ->> '$.floor_from') <= s.value ->> '$.floor_from')
RETURNING *

-- name: set_version
-- Point the item at its newest draft version.
UPDATE items SET version = :version WHERE id = :id AND version = :version - 1

-- name: insert_draft
-- One draft version, as stored.
INSERT INTO drafts (item_id, version, text, content_hash, provenance, cost_micros, created_at, image_url, tells)
VALUES (:item_id, :version, :text, :content_hash, :provenance, :cost_micros, :now, :image_url, :tells)
RETURNING *

-- name: draft
-- One draft version of an item.
SELECT * FROM drafts WHERE item_id = :item_id AND version = :version

-- name: drafts
-- Several draft versions at once: :wanted is a JSON array of {"item_id", "version"}.
SELECT d.* FROM drafts d
  JOIN json_each(:wanted) AS w
    ON d.item_id = w.value ->> '$.item_id' AND d.version = w.value ->> '$.version'

-- name: vote
-- One operator's decision on one draft version, and (a JSON array) the operators who
-- approved it so far, this one too, as `approvals` lists them; a repeat is ignored and
-- returns no row.
INSERT INTO votes (item_id, attempt, version, operator, decision, at)
VALUES (:item_id, :attempt, :version, :operator, :decision, :now)
    ON CONFLICT DO NOTHING
RETURNING (SELECT json_group_array(v.operator) FROM (
             SELECT operator FROM votes
              WHERE item_id = :item_id AND attempt = :attempt AND version = :version
                AND decision = 'approve'
              ORDER BY at, operator) AS v) AS approvals

-- name: approvals
-- The operators who approved one draft version of one attempt.
SELECT operator FROM votes
 WHERE item_id = :item_id AND attempt = :attempt AND version = :version AND decision = 'approve'
 ORDER BY at, operator

-- name: in_state
-- Items of one state (optionally one pipeline), oldest transition first.
SELECT * FROM items
 WHERE state = :state AND (:pipeline IS NULL OR pipeline = :pipeline)
 ORDER BY last_transition_at, id LIMIT :limit

-- name: sla_due
-- Items in a transient state past their deadline, its warning share or its warning lead
-- (store.items.machine.WARN_LEAD before it, in ms), soonest first.
SELECT * FROM items
 WHERE deadline IS NOT NULL
   AND (deadline <= :now
        OR deadline - :warn_lead <= :now
        OR last_transition_at + CAST((deadline - last_transition_at) * :warn_share AS INTEGER) <= :now)
 ORDER BY deadline, id

-- name: count_in_state
-- How many items one pipeline has in one state: a range of items_by_state, never the table.
SELECT count(*) FROM items WHERE pipeline = :pipeline AND state = :state

-- name: approved_since
-- Approved or dispatched drafts of a pipeline since a moment (for the duplicate gate).
SELECT i.id, i.source_id, d.text FROM items i
  JOIN drafts d ON d.item_id = i.id AND d.version = i.version
 WHERE i.pipeline = :pipeline AND i.state IN ('approved', 'dispatching', 'dispatched')
   AND i.last_transition_at >= :since AND i.id != :exclude
 ORDER BY i.id DESC LIMIT :limit

-- name: undrafted_by_pipeline
-- How many items each scheduled pipeline has in new or drafting (what a crash left),
-- one index seek per pipeline.
SELECT p.pipeline, count(i.id) FROM pipeline_state p
  JOIN items i ON i.pipeline = p.pipeline AND i.state IN ('new', 'drafting')
 GROUP BY p.pipeline

-- name: voted
-- One operator's vote on one draft version of one attempt, if any.
SELECT decision FROM votes
 WHERE item_id = :item_id AND attempt = :attempt AND version = :version AND operator = :operator

-- name: forget_votes
-- An undone decision: its version's votes no longer count, so each may be cast again.
DELETE FROM votes WHERE item_id = :item_id AND attempt = :attempt AND version = :version
