-- name: upsert_limit
-- Configure a scope's limit for one kind of period; the operator and time are kept.
INSERT INTO budget_limits (scope, period, limit_micros, set_by, set_at)
VALUES (:scope, :period, :limit_micros, :actor, :now)
    ON CONFLICT (scope, period) DO UPDATE
   SET limit_micros = excluded.limit_micros, set_by = excluded.set_by, set_at = excluded.set_at

-- name: get_limit
-- One configured limit.
SELECT * FROM budget_limits WHERE scope = :scope AND period = :period

-- name: limits_for
-- The configured limits of some scopes (a JSON array), global last.
SELECT scope, period FROM budget_limits
 WHERE scope IN (SELECT value FROM json_each(:scopes))
 ORDER BY scope = 'global', scope, period

-- name: ensure_row
-- Open a period instance's budget row with the configured limit, if it is not open yet.
INSERT INTO budgets (scope, period, period_start, limit_micros)
SELECT scope, period, :period_start, limit_micros FROM budget_limits
 WHERE scope = :scope AND period = :period
    ON CONFLICT (scope, period, period_start) DO NOTHING

-- name: get_row
-- One period instance's budget row, with what its slots spent and hold (summed).
SELECT b.scope, b.period, b.period_start, b.limit_micros, b.granted_micros, b.alerted_pct,
       CAST(coalesce(sum(s.spent_micros), 0) AS BIGINT) AS spent_micros,
       CAST(coalesce(sum(s.held_micros), 0) AS BIGINT) AS held_micros
  FROM budgets b
  LEFT JOIN budget_slots s
    ON s.scope = b.scope AND s.period = b.period AND s.period_start = b.period_start
 WHERE b.scope = :scope AND b.period = :period AND b.period_start = :period_start
 GROUP BY b.scope, b.period, b.period_start, b.limit_micros, b.granted_micros, b.alerted_pct

-- name: claim_rows
-- The budget rows a claim holds (or held) against, with what their slots spent and hold.
SELECT b.scope, b.period, b.period_start, b.limit_micros, b.granted_micros, b.alerted_pct,
       CAST(coalesce(sum(s.spent_micros), 0) AS BIGINT) AS spent_micros,
       CAST(coalesce(sum(s.held_micros), 0) AS BIGINT) AS held_micros
  FROM claim_holds h
  JOIN budgets b
    ON b.scope = h.scope AND b.period = h.period AND b.period_start = h.period_start
  LEFT JOIN budget_slots s
    ON s.scope = b.scope AND s.period = b.period AND s.period_start = b.period_start
 WHERE h.claim_id = :claim_id
 GROUP BY b.scope, b.period, b.period_start, b.limit_micros, b.granted_micros, b.alerted_pct
 ORDER BY b.scope = 'global', b.scope, b.period

-- name: mark_alerted
-- Record that spend crossed a threshold, once: only the first writer to see it gets the row.
UPDATE budgets SET alerted_pct = :pct
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   AND alerted_pct < :pct
RETURNING alerted_pct

-- name: set_alerted
-- The highest threshold the spend has reached under a new limit: a limit lowered past
-- spend alerts only when new spend crosses a line; one raised lets its lines alert again.
UPDATE budgets SET alerted_pct = :pct
 WHERE scope = :scope AND period = :period AND period_start = :period_start

-- name: insert_claim_hold
-- Record which budget row a claim holds against, and how much.
INSERT INTO claim_holds (claim_id, scope, period, period_start, micros)
VALUES (:claim_id, :scope, :period, :period_start, :micros)

-- name: claim_holds
-- The budget rows a claim holds (or held) against.
SELECT * FROM claim_holds WHERE claim_id = :claim_id ORDER BY scope = 'global', scope, period

-- name: current
-- Every configured limit with its current period instance, its slots summed (zeros when
-- not open yet).
SELECT l.scope, l.period,
       CASE l.period WHEN 'day' THEN :day_start ELSE :month_start END AS period_start,
       coalesce(b.limit_micros, l.limit_micros) AS limit_micros,
       coalesce(b.alerted_pct, 0) AS alerted_pct,
       CAST(coalesce(sum(s.spent_micros), 0) AS BIGINT) AS spent_micros,
       CAST(coalesce(sum(s.held_micros), 0) AS BIGINT) AS held_micros
  FROM budget_limits l
  LEFT JOIN budgets b
    ON b.scope = l.scope AND b.period = l.period
   AND b.period_start = CASE l.period WHEN 'day' THEN :day_start ELSE :month_start END
  LEFT JOIN budget_slots s
    ON s.scope = b.scope AND s.period = b.period AND s.period_start = b.period_start
 GROUP BY l.scope, l.period, l.limit_micros, b.limit_micros, b.alerted_pct
 ORDER BY l.scope = 'global' DESC, l.scope, l.period
