-- name: runs_by_outcome
-- Finished runs per pipeline and status, with their item counts summed (cast back to
-- bigint: PostgreSQL sums bigints as numeric).
SELECT pipeline, status, count(*), CAST(sum(fetched) AS bigint), CAST(sum(new) AS bigint),
       CAST(sum(drafted) AS bigint), CAST(sum(failed) AS bigint)
  FROM pipeline_runs WHERE status != 'running' GROUP BY pipeline, status

-- name: sla_warned
-- The state of each item past the warning share or lead of its deadline but not yet past
-- it (the share's product truncated toward zero, as SQLite's CAST AS INTEGER does).
SELECT state FROM items
 WHERE deadline IS NOT NULL AND deadline > :now
   AND (deadline - CAST(:warn_lead AS bigint) <= :now
        OR last_transition_at
           + CAST(trunc((deadline - last_transition_at) * CAST(:warn_share AS double precision)) AS bigint)
           <= :now)
