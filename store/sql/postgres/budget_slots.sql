-- PostgreSQL: the connection's slot is its backend pid (unique among live connections,
-- so two lanes never share one); a grant locks the budget row; a hold short of room takes
-- back what unlocked slots left unused, skipping locked ones (a paused worker's too).

-- name: add_hold
-- Hold micros in this connection's slot, only if its grant still covers them: the check
-- and the change are one statement. No row: the slot needs a grant first.
UPDATE budget_slots SET held_micros = held_micros + :micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start AND slot = pg_backend_pid()
   AND spent_micros + held_micros + :micros <= granted_micros
RETURNING slot

-- name: take_hold_back
-- Give back a hold this connection's slot took earlier in the same unit.
UPDATE budget_slots SET held_micros = held_micros - :micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start AND slot = pg_backend_pid()

-- name: lock_budget
-- The budget row's limit and what it granted its slots, to grant more, the row locked:
-- grants and take-backs are made one at a time. NO KEY UPDATE, as an UPDATE of it takes:
-- FOR UPDATE would also wait for every claim hold (and slot) inserted since, whose
-- foreign key check shares the row's key.
SELECT limit_micros, granted_micros FROM budgets
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   FOR NO KEY UPDATE

-- name: grant_and_hold
-- Grant this connection's slot more room and hold micros in it (opening the slot).
INSERT INTO budget_slots (scope, period, period_start, slot, granted_micros, held_micros)
VALUES (:scope, :period, :period_start, pg_backend_pid(), :granted, :micros)
    ON CONFLICT (scope, period, period_start, slot) DO UPDATE
   SET granted_micros = budget_slots.granted_micros + excluded.granted_micros,
       held_micros = budget_slots.held_micros + excluded.held_micros

-- name: free_slots
-- Slots with room granted and not used, skipping (on PostgreSQL) those another
-- transaction has locked: a hold short of room never waits on another writer.
SELECT slot, granted_micros - spent_micros - held_micros AS free_micros FROM budget_slots
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   AND granted_micros > spent_micros + held_micros
 ORDER BY slot
   FOR NO KEY UPDATE SKIP LOCKED

-- name: free_slots_waiting
-- Slots with room granted and not used, waiting (on PostgreSQL) for those another
-- transaction has locked: a lowered limit is checked against every slot.
SELECT slot, granted_micros - spent_micros - held_micros AS free_micros FROM budget_slots
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   AND granted_micros > spent_micros + held_micros
 ORDER BY slot
   FOR NO KEY UPDATE

-- name: settle_holds
-- Turn every hold of a claim into spend in this connection's slot: held -= reserved,
-- spent += actual (0 to release a hold). An actual above the reserve (a provider's
-- overrun) is granted with it, so the slot's spent + held stays within its grant; the
-- caller counts that grant in the budget rows.
INSERT INTO budget_slots (scope, period, period_start, slot, granted_micros, spent_micros, held_micros)
SELECT scope, period, period_start, pg_backend_pid(), greatest(0, :actual - micros), :actual, -micros
  FROM claim_holds WHERE claim_id = :claim_id
    ON CONFLICT (scope, period, period_start, slot) DO UPDATE
   SET granted_micros = budget_slots.granted_micros + excluded.granted_micros,
       spent_micros = budget_slots.spent_micros + excluded.spent_micros,
       held_micros = budget_slots.held_micros + excluded.held_micros
