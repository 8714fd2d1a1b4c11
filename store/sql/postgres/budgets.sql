-- name: limits_for
-- The configured limits of some scopes (a JSON array), global last.
SELECT scope, period FROM budget_limits
 WHERE scope IN (SELECT value FROM json_array_elements_text(CAST(:scopes AS json)))
 ORDER BY scope = 'global', scope, period

-- name: current
-- Every configured limit with its current period instance, its slots summed (zeros when
-- not open yet);
-- the period starts typed, so the CASE compares bigints.
SELECT l.scope, l.period,
       CASE l.period WHEN 'day' THEN CAST(:day_start AS bigint) ELSE CAST(:month_start AS bigint) END AS period_start,
       coalesce(b.limit_micros, l.limit_micros) AS limit_micros,
       coalesce(b.alerted_pct, 0) AS alerted_pct,
       CAST(coalesce(sum(s.spent_micros), 0) AS bigint) AS spent_micros,
       CAST(coalesce(sum(s.held_micros), 0) AS bigint) AS held_micros
  FROM budget_limits l
  LEFT JOIN budgets b
    ON b.scope = l.scope AND b.period = l.period
   AND b.period_start = CASE l.period WHEN 'day' THEN CAST(:day_start AS bigint) ELSE CAST(:month_start AS bigint) END
  LEFT JOIN budget_slots s
    ON s.scope = b.scope AND s.period = b.period AND s.period_start = b.period_start
 GROUP BY l.scope, l.period, l.limit_micros, b.limit_micros, b.alerted_pct
 ORDER BY l.scope = 'global' DESC, l.scope, l.period
