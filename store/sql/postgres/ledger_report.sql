-- name: pipelines_by_spend
-- Pipelines ranked by what their claims begun since a moment spent (then hold); sums
-- cast back to bigint (PostgreSQL sums bigints as numeric).
SELECT pipeline,
       CAST(coalesce(sum(actual_micros), 0) AS bigint) AS spent_micros,
       CAST(coalesce(sum(CASE WHEN state IN ('reserved', 'started', 'uncertain') THEN reserved_micros END), 0) AS bigint) AS held_micros,
       count(*) AS claims
  FROM claims
 WHERE created_at >= :since
 GROUP BY pipeline
 ORDER BY spent_micros DESC, held_micros DESC, pipeline
