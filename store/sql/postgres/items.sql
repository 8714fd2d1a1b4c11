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
