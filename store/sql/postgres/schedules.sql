-- name: set_due
-- Record when the next run is due (and, when starting one, that it started).
UPDATE pipeline_state
   SET next_due_at = :next_due_at,
       last_started_at = coalesce(CAST(:started_at AS bigint), last_started_at),
       run_requested_at = CASE WHEN CAST(:started_at AS bigint) IS NULL THEN run_requested_at ELSE NULL END
 WHERE pipeline = :pipeline
