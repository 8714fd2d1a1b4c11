-- name: complete
-- complete() in one statement: a started claim whose item still has the content it began
-- with (stored now and as drafted) is settled at the actual cost, its output kept (when
-- :text is given), every hold turned into spend in this connection's slot (an overrun
-- granted with it, as settle_holds does), and its event written. One row: the claim with
-- `budgets`, the rows it held against with this spend counted (their thresholds). No
-- row: nothing written, and the caller takes the way that locks the claim and says why.
WITH settled AS (
    UPDATE claims c
       SET state = 'settled', actual_micros = CAST(:actual_micros AS bigint),
           evidence = CAST(:evidence AS text), usage = CAST(:usage AS text),
           reason = 'actual ' || CAST(:actual_micros AS bigint) || ' of ' || c.reserved_micros
                    || ' micros held; evidence ' || CAST(:evidence AS text)
                    || CASE WHEN CAST(:actual_micros AS bigint) > c.reserved_micros
                            THEN '; OVERRUN by ' || (CAST(:actual_micros AS bigint) - c.reserved_micros)
                                 || ' micros'
                            ELSE '' END,
           updated_at = CAST(:now AS bigint), ended_at = CAST(:now AS bigint)
     WHERE c.id = CAST(:id AS bigint) AND c.state = 'started'
       AND (c.item_id IS NULL
            OR (c.item_hash = CAST(:item_hash AS text)
                AND c.item_hash = (SELECT i.content_hash FROM items i WHERE i.id = c.item_id)))
    RETURNING c.*
), kept AS (
    INSERT INTO llm_outputs (claim_id, text, model, request_id, error, created_at)
    SELECT id, CAST(:text AS text), CAST(:model AS text), CAST(:request_id AS text),
           CAST(:error AS text), CAST(:now AS bigint)
      FROM settled WHERE CAST(:text AS text) IS NOT NULL
        ON CONFLICT (claim_id) DO NOTHING
), spent AS (
    INSERT INTO budget_slots (scope, period, period_start, slot, granted_micros, spent_micros,
                              held_micros)
    SELECT h.scope, h.period, h.period_start, pg_backend_pid(),
           greatest(0, s.actual_micros - h.micros), s.actual_micros, -h.micros
      FROM claim_holds h JOIN settled s ON s.id = h.claim_id
        ON CONFLICT (scope, period, period_start, slot) DO UPDATE
       SET granted_micros = budget_slots.granted_micros + excluded.granted_micros,
           spent_micros = budget_slots.spent_micros + excluded.spent_micros,
           held_micros = budget_slots.held_micros + excluded.held_micros
), event AS (
    INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
    SELECT 'claim', CAST(id AS text), 'started', state, 'system', 0, reason, updated_at
      FROM settled
), budgets_after AS (
    -- The slots as this statement found them, plus what it settles (its writes are not
    -- visible to itself).
    SELECT b.scope, b.period, b.period_start, b.limit_micros, b.alerted_pct,
           coalesce(sum(x.spent_micros), 0) + s.actual_micros AS spent_micros,
           coalesce(sum(x.held_micros), 0) - h.micros AS held_micros
      FROM settled s
      JOIN claim_holds h ON h.claim_id = s.id
      JOIN budgets b
        ON b.scope = h.scope AND b.period = h.period AND b.period_start = h.period_start
      LEFT JOIN budget_slots x
        ON x.scope = b.scope AND x.period = b.period AND x.period_start = b.period_start
     GROUP BY b.scope, b.period, b.period_start, b.limit_micros, b.alerted_pct,
              s.actual_micros, h.micros
)
SELECT s.*,
       (SELECT coalesce(json_agg(a ORDER BY a.scope = 'global', a.scope, a.period), '[]')
          FROM budgets_after a) AS budgets
  FROM settled s
