-- name: settle
-- Compare-and-set: record the actual cost and its evidence, exactly once.
UPDATE claims
   SET state = 'settled', actual_micros = :actual_micros, evidence = :evidence, usage = :usage,
       reason = coalesce(:reason, reason), updated_at = :now, ended_at = :now
 WHERE id = :id AND state = :from_state
RETURNING *
