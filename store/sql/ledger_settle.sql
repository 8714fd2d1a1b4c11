-- name: settle
-- Compare-and-set: record the actual cost and its evidence, exactly once.
UPDATE claims
   SET state = 'settled', actual_micros = :actual_micros, evidence = :evidence, usage = :usage,
       reason = coalesce(:reason, reason), updated_at = :now, ended_at = :now
 WHERE id = :id AND state = :from_state
RETURNING *

-- name: complete
-- PostgreSQL only (its override settles a started claim with everything that goes with
-- it in one statement); never sent to SQLite (backend.chains_writes).
SELECT * FROM claims WHERE 0 = 1
