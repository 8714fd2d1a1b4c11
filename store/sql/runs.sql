-- name: start_run
-- Open a run held by :worker until :until; it stays 'running' until finish_run closes it
-- (or its lease lapses). Nothing is opened while the pipeline has a running run.
INSERT INTO pipeline_runs (pipeline, trigger, started_at, worker, lease_until)
VALUES (:pipeline, :trigger, :now, :worker, :until)
    ON CONFLICT (pipeline) WHERE status = 'running' DO NOTHING
RETURNING id

-- name: running
-- The pipeline's running run, if any.
SELECT id FROM pipeline_runs WHERE pipeline = :pipeline AND status = 'running'

-- name: finish_run
-- Close a running run with its outcome and counts.
UPDATE pipeline_runs
   SET ended_at = :now, status = :status, fetched = :fetched, new = :new,
       drafted = :drafted, failed = :failed, filtered = :filtered, skipped = :skipped, error_text = :error_text
 WHERE id = :id AND status = 'running'

-- name: close_interrupted
-- Runs left 'running' by a crash: they end as errors, with the reason.
UPDATE pipeline_runs
   SET ended_at = :now, status = 'error', error_text = 'interrupted'
 WHERE status = 'running'

-- name: close_lapsed
-- Runs whose worker stopped renewing their lease (it died): they end as errors.
UPDATE pipeline_runs
   SET ended_at = :now, status = 'error', error_text = 'interrupted: its worker stopped'
 WHERE status = 'running' AND (lease_until IS NULL OR lease_until < :now)
RETURNING pipeline

-- name: recent
-- A pipeline's runs, newest first.
SELECT * FROM pipeline_runs WHERE pipeline = :pipeline
 ORDER BY started_at DESC, id DESC LIMIT :n

-- name: last_ok
-- The newest successful run of a pipeline.
SELECT * FROM pipeline_runs WHERE pipeline = :pipeline AND status = 'ok'
 ORDER BY started_at DESC, id DESC LIMIT 1

-- name: first_error_after
-- The first failed run after a moment (the start of the investigation window).
SELECT * FROM pipeline_runs
 WHERE pipeline = :pipeline AND status = 'error' AND (started_at, id) > (:after, :after_id)
 ORDER BY started_at, id LIMIT 1

-- name: get
-- One run by id.
SELECT * FROM pipeline_runs WHERE id = :id

-- name: close_of_worker
-- Runs of a worker known to be dead (its process is gone): they end as errors now.
UPDATE pipeline_runs
   SET ended_at = :now, status = 'error', error_text = 'interrupted: its worker stopped'
 WHERE status = 'running' AND worker = :worker
RETURNING pipeline
