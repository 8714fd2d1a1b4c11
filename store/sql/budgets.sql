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
-- One period instance's budget row.
SELECT * FROM budgets WHERE scope = :scope AND period = :period AND period_start = :period_start

-- name: set_row_limit
-- Apply a new limit to the period instance already open, only if what it spent and
-- holds still fits (a hold committed since the caller looked may no longer).
UPDATE budgets SET limit_micros = :limit_micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   AND spent_micros + held_micros <= :limit_micros
RETURNING *

-- name: add_hold
-- Hold micros against a budget row, only if spent + held stays within the limit: the
-- check and the change are one statement, so writers at once never grant past it.
UPDATE budgets SET held_micros = held_micros + :micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   AND spent_micros + held_micros + :micros <= limit_micros
RETURNING *

-- name: insert_claim_hold
-- Record which budget row a claim holds against, and how much.
INSERT INTO claim_holds (claim_id, scope, period, period_start, micros)
VALUES (:claim_id, :scope, :period, :period_start, :micros)

-- name: claim_holds
-- The budget rows a claim holds (or held) against.
SELECT * FROM claim_holds WHERE claim_id = :claim_id ORDER BY scope = 'global', scope, period

-- name: release_hold
-- Give a hold back to its budget row.
UPDATE budgets SET held_micros = held_micros - :micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start

-- name: settle_hold
-- Turn a hold into spend: held -= reserved, spent += actual.
UPDATE budgets SET held_micros = held_micros - :micros, spent_micros = spent_micros + :actual
 WHERE scope = :scope AND period = :period AND period_start = :period_start
RETURNING *

-- name: current
-- Every configured limit with its current period instance (zeros when not open yet).
SELECT l.scope, l.period,
       CASE l.period WHEN 'day' THEN :day_start ELSE :month_start END AS period_start,
       coalesce(b.limit_micros, l.limit_micros) AS limit_micros,
       coalesce(b.spent_micros, 0) AS spent_micros,
       coalesce(b.held_micros, 0) AS held_micros
  FROM budget_limits l
  LEFT JOIN budgets b
    ON b.scope = l.scope AND b.period = l.period
   AND b.period_start = CASE l.period WHEN 'day' THEN :day_start ELSE :month_start END
 ORDER BY l.scope = 'global' DESC, l.scope, l.period
