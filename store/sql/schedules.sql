-- name: all
-- Every pipeline's scheduler row.
SELECT * FROM pipeline_state

-- name: ensure
-- Create a pipeline's row the first time the scheduler sees it.
INSERT INTO pipeline_state (pipeline, next_due_at) VALUES (:pipeline, :next_due_at)
    ON CONFLICT (pipeline) DO NOTHING

-- name: set_due
-- Record when the next run is due (and, when starting one, that it started).
UPDATE pipeline_state
   SET next_due_at = :next_due_at, last_started_at = coalesce(:started_at, last_started_at),
       run_requested_at = CASE WHEN :started_at IS NULL THEN run_requested_at ELSE NULL END
 WHERE pipeline = :pipeline

-- name: set_paused
-- Pause or resume; returns the row only if it changed.
UPDATE pipeline_state SET paused = :paused WHERE pipeline = :pipeline AND paused != :paused
RETURNING pipeline

-- name: request_run
-- Ask for a manual run at the scheduler's next look.
UPDATE pipeline_state SET run_requested_at = :now WHERE pipeline = :pipeline

-- name: source_state
-- A source's saved state (e.g. its ETag).
SELECT state FROM source_state WHERE pipeline = :pipeline AND scope = :scope

-- name: save_source_state
-- Replace a source's saved state.
INSERT INTO source_state (pipeline, scope, state, updated_at) VALUES (:pipeline, :scope, :state, :now)
    ON CONFLICT (pipeline, scope) DO UPDATE SET state = excluded.state, updated_at = excluded.updated_at

-- name: claim
-- Start a due run: record the start and the next due time, only if the row is as the
-- scheduler read it (another worker that started the same run changed it first).
UPDATE pipeline_state
   SET next_due_at = :next_due_at, last_started_at = :now, run_requested_at = NULL
 WHERE pipeline = :pipeline AND paused = 0
   AND next_due_at IS NOT DISTINCT FROM :seen_due
   AND run_requested_at IS NOT DISTINCT FROM :seen_requested
