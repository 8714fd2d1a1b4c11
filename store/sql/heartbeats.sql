-- name: beat
-- A worker says it is alive (its row is made the first time).
INSERT INTO workers (id, host, pid, started_at, heartbeat_at) VALUES (:id, :host, :pid, :now, :now)
    ON CONFLICT (id) DO UPDATE SET heartbeat_at = excluded.heartbeat_at, stopped_at = NULL

-- name: renew_run
-- A run the worker is running stays its own for another lease.
UPDATE pipeline_runs SET lease_until = :until
 WHERE id = :run AND worker = :id AND status = 'running'

-- name: stopped
-- A worker stopped cleanly.
UPDATE workers SET stopped_at = :now, heartbeat_at = :now WHERE id = :id

-- name: all
-- Workers heard from since :since, the most recently started first.
SELECT id, host, pid, started_at, heartbeat_at, stopped_at FROM workers
 WHERE heartbeat_at >= :since ORDER BY started_at DESC, id

-- name: prune
-- Forget workers not heard from since :before.
DELETE FROM workers WHERE heartbeat_at < :before
