-- name: set_due
-- Record when the next run is due (and, when starting one, that it started).
UPDATE pipeline_state
   SET next_due_at = :next_due_at,
       last_started_at = coalesce(CAST(:started_at AS bigint), last_started_at),
       run_requested_at = CASE WHEN CAST(:started_at AS bigint) IS NULL THEN run_requested_at ELSE NULL END
 WHERE pipeline = :pipeline

-- name: claim
-- Start a due run: record the start and the next due time, only if the row is as the
-- scheduler read it (another worker that started the same run changed it first).
UPDATE pipeline_state
   SET next_due_at = :next_due_at, last_started_at = :now, run_requested_at = NULL
 WHERE pipeline = :pipeline AND paused = 0
   AND next_due_at IS NOT DISTINCT FROM CAST(:seen_due AS bigint)
   AND run_requested_at IS NOT DISTINCT FROM CAST(:seen_requested AS bigint)
