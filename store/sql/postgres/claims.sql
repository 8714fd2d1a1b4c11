-- name: lock
-- One claim by id, its row locked until the transaction ends: a second settlement
-- waits, then reads what the first one wrote.
SELECT * FROM claims WHERE id = :id FOR UPDATE

-- name: begin
-- Begin a claim in one statement: the row (the item's hash read inside it), a hold of the
-- worst case in this connection's slot of every configured (scope, period) of the
-- pipeline and global, which budget rows it holds against, and its event. Only when
-- every such slot's grant covers the hold (each slot row locked here, so that no other
-- writer takes its room back before the hold) and the key is new; otherwise it writes
-- nothing and returns no row, and the caller takes the way that grants room or reads
-- the key's claim. `held` and `pairs` count the holds made and wanted (equal).
WITH pairs AS (
    SELECT scope, period,
           CASE period WHEN 'day' THEN CAST(:day_start AS bigint)
                       ELSE CAST(:month_start AS bigint) END AS period_start
      FROM budget_limits WHERE scope IN (CAST(:pipeline AS text), 'global')
), room AS (
    SELECT s.scope, s.period, s.period_start
      FROM budget_slots s
      JOIN pairs p ON p.scope = s.scope AND p.period = s.period AND p.period_start = s.period_start
     WHERE s.slot = pg_backend_pid()
       AND s.spent_micros + s.held_micros + CAST(:micros AS bigint) <= s.granted_micros
       FOR NO KEY UPDATE OF s
), wanted AS (
    SELECT count(*) AS n,
           'holds ' || CAST(:micros AS bigint) || ' micros in '
           || string_agg(scope || '/' || period, ', ' ORDER BY scope = 'global', scope, period)
           AS reason
      FROM pairs
), claim AS (
    INSERT INTO claims (idem_hash, request_digest, pipeline, item_id, item_hash, state,
                        provider_allowed, reserved_micros, lease_until, reason, created_at,
                        updated_at)
    SELECT CAST(:idem_hash AS text), CAST(:request_digest AS text), CAST(:pipeline AS text),
           CAST(:item_id AS bigint),
           (SELECT content_hash FROM items WHERE id = CAST(:item_id AS bigint)),
           CASE WHEN w.n > 0 THEN 'reserved' ELSE 'unbudgeted' END,
           CASE WHEN w.n > 0 THEN 1 ELSE 0 END,
           CASE WHEN w.n > 0 THEN CAST(:micros AS bigint) ELSE 0 END,
           CAST(:lease_until AS bigint), coalesce(w.reason, CAST(:no_budget AS text)),
           CAST(:now AS bigint), CAST(:now AS bigint)
      FROM wanted w
     WHERE (SELECT count(*) FROM room) = w.n
       AND (CAST(:item_id AS bigint) IS NULL
            OR EXISTS (SELECT 1 FROM items WHERE id = CAST(:item_id AS bigint)))
        ON CONFLICT (idem_hash) DO NOTHING
    RETURNING *
), held AS (
    UPDATE budget_slots s SET held_micros = s.held_micros + c.reserved_micros
      FROM room r, claim c
     WHERE s.scope = r.scope AND s.period = r.period AND s.period_start = r.period_start
       AND s.slot = pg_backend_pid()
       AND s.spent_micros + s.held_micros + c.reserved_micros <= s.granted_micros
    RETURNING c.id AS claim_id, s.scope, s.period, s.period_start, c.reserved_micros AS micros
), holds AS (
    INSERT INTO claim_holds (claim_id, scope, period, period_start, micros)
    SELECT claim_id, scope, period, period_start, micros FROM held
), event AS (
    INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
    SELECT 'claim', CAST(id AS text), NULL, state, 'system', 0, reason, created_at FROM claim
)
SELECT c.*, (SELECT count(*) FROM held) AS held, (SELECT n FROM wanted) AS pairs FROM claim c

-- name: start
-- The one gate in one statement: a reserved claim (so one with a budget: the table's
-- CHECK), within its lease, moves to started with its event. No row: nothing written, and
-- the caller locks the claim to say why it may not start.
WITH started AS (
    UPDATE claims
       SET state = 'started', reason = CAST(:reason AS text), updated_at = CAST(:now AS bigint),
           started_at = CAST(:now AS bigint)
     WHERE id = CAST(:id AS bigint) AND state = 'reserved'
       AND lease_until > CAST(:now AS bigint)
    RETURNING *
), event AS (
    INSERT INTO events (entity, entity_id, from_state, to_state, actor, attempt, reason, at)
    SELECT 'claim', CAST(id AS text), 'reserved', state, 'system', 0, reason, updated_at
      FROM started
)
SELECT * FROM started
