-- name: limits_for
-- The configured limits of some scopes (a JSON array), global last.
SELECT scope, period FROM budget_limits
 WHERE scope IN (SELECT value FROM json_array_elements_text(CAST(:scopes AS json)))
 ORDER BY scope = 'global', scope, period
