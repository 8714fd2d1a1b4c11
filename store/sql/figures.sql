-- name: items_in_state
-- One pipeline's items in one state: the sum of its counter's slots, never the items.
SELECT coalesce(sum(n), 0) FROM item_counts WHERE pipeline = :pipeline AND state = :state

-- name: runs_by_outcome
-- Finished runs per pipeline and status, with their item counts summed.
SELECT pipeline, status, count(*), sum(fetched), sum(new), sum(drafted), sum(failed)
  FROM pipeline_runs WHERE status != 'running' GROUP BY pipeline, status

-- name: outbox_pending
-- Rows waiting to be sent per kind, and when the oldest was queued (read off outbox_due).
SELECT kind, count(*), min(created_at) FROM outbox WHERE state = 'pending' GROUP BY kind

-- name: claims_in_state
-- One pipeline's claims in one state: a range of claims_by_state.
SELECT count(*) FROM claims WHERE state = :state AND pipeline = :pipeline

-- name: sla_warned
-- The state of each item past the warning share or lead of its deadline but not yet past
-- it: a range of items_by_deadline (items with a future deadline: those still in flight).
SELECT state FROM items
 WHERE deadline IS NOT NULL AND deadline > :now
   AND (deadline - :warn_lead <= :now
        OR last_transition_at + CAST((deadline - last_transition_at) * :warn_share AS INTEGER) <= :now)

-- name: spend_by_day
-- Each scope's day budgets since a day: spent (its slots summed) and limit, oldest first.
SELECT b.scope, b.period_start, CAST(coalesce(sum(s.spent_micros), 0) AS BIGINT), b.limit_micros
  FROM budgets b
  LEFT JOIN budget_slots s
    ON s.scope = b.scope AND s.period = b.period AND s.period_start = b.period_start
 WHERE b.period = 'day' AND b.period_start >= :since
 GROUP BY b.scope, b.period_start, b.limit_micros
 ORDER BY b.scope, b.period_start

-- name: runs_by_day
-- Runs started since a moment, per UTC day and status.
SELECT started_at / 86400000 AS day, status, count(*) FROM pipeline_runs
 WHERE started_at >= :since GROUP BY day, status ORDER BY day

-- name: approval_waits
-- How long each decision since a moment waited, from entering awaiting_approval to
-- approved or rejected (milliseconds), with its UTC day. Only events after :first_id
-- are read (a range of the primary key), so the cost is bounded however long the log.
SELECT d.at / 86400000 AS day, d.at - w.at AS waited_ms
  FROM events d
  JOIN events w ON w.id = (SELECT max(e.id) FROM events e
                            WHERE e.entity = 'item' AND e.entity_id = d.entity_id
                              AND e.id < d.id AND e.to_state = 'awaiting_approval')
 WHERE d.id > :first_id AND d.at >= :since
   -- Only items are ever awaiting_approval; naming no entity keeps the plan on the id range.
   AND d.from_state = 'awaiting_approval' AND d.to_state IN ('approved', 'rejected')

-- name: last_event
-- The newest event's id.
SELECT coalesce(max(id), 0) FROM events

-- name: event_time
-- When the first event from an id on was written (a primary key lookup).
SELECT id, at FROM events WHERE id >= :id ORDER BY id LIMIT 1
