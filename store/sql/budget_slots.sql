-- A budget row's slots (store/ledger/slots.py): each writing connection holds and
-- settles in a slot of its own, so writers at once never wait on one row. SQLite has one
-- writer and one slot (0); PostgreSQL's queries name the connection's slot by its
-- backend pid (store/sql/postgres/budget_slots.sql).

-- name: add_hold
-- Hold micros in this connection's slot, only if its grant still covers them: the check
-- and the change are one statement. No row: the slot needs a grant first.
UPDATE budget_slots SET held_micros = held_micros + :micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start AND slot = 0
   AND spent_micros + held_micros + :micros <= granted_micros
RETURNING slot

-- name: take_hold_back
-- Give back a hold this connection's slot took earlier in the same unit.
UPDATE budget_slots SET held_micros = held_micros - :micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start AND slot = 0

-- name: lock_budget
-- The budget row's limit and what it granted its slots, to grant more (PostgreSQL locks
-- the row: grants and take-backs are made one at a time).
SELECT limit_micros, granted_micros FROM budgets
 WHERE scope = :scope AND period = :period AND period_start = :period_start

-- name: add_granted
-- Count micros granted to slots (negative: taken back from them) in the budget row.
UPDATE budgets SET granted_micros = granted_micros + :micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start

-- name: grant_and_hold
-- Grant this connection's slot more room and hold micros in it (opening the slot).
INSERT INTO budget_slots (scope, period, period_start, slot, granted_micros, held_micros)
VALUES (:scope, :period, :period_start, 0, :granted, :micros)
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

-- name: free_slots_waiting
-- Slots with room granted and not used, waiting (on PostgreSQL) for those another
-- transaction has locked: a lowered limit is checked against every slot.
SELECT slot, granted_micros - spent_micros - held_micros AS free_micros FROM budget_slots
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   AND granted_micros > spent_micros + held_micros
 ORDER BY slot

-- name: take_back
-- Take a slot's unused room back (the caller counts it in the budget row).
UPDATE budget_slots SET granted_micros = granted_micros - :free_micros
 WHERE scope = :scope AND period = :period AND period_start = :period_start AND slot = :slot

-- name: set_row_limit
-- Apply a new limit to the period instance already open, only if what its slots were
-- granted (after `taken` micros taken back from them) fits under it.
UPDATE budgets SET limit_micros = :limit_micros, granted_micros = granted_micros - :taken
 WHERE scope = :scope AND period = :period AND period_start = :period_start
   AND granted_micros - :taken <= :limit_micros
RETURNING limit_micros

-- name: settle_holds
-- Turn every hold of a claim into spend in this connection's slot: held -= reserved,
-- spent += actual (0 to release a hold). An actual above the reserve (a provider's
-- overrun) is granted with it, so the slot's spent + held stays within its grant; the
-- caller counts that grant in the budget rows.
INSERT INTO budget_slots (scope, period, period_start, slot, granted_micros, spent_micros, held_micros)
SELECT scope, period, period_start, 0, max(0, :actual - micros), :actual, -micros
  FROM claim_holds WHERE claim_id = :claim_id
    ON CONFLICT (scope, period, period_start, slot) DO UPDATE
   SET granted_micros = budget_slots.granted_micros + excluded.granted_micros,
       spent_micros = budget_slots.spent_micros + excluded.spent_micros,
       held_micros = budget_slots.held_micros + excluded.held_micros
