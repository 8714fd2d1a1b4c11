-- A budget's spend and holds are counted in slots, one per writing connection, summed on
-- read (as item_counts are), so writers at once never wait on one (scope, period) row.
-- Each slot spends only what the budget row granted it: a slot keeps
-- spent + held <= granted (the CHECK), and the budget row keeps the sum of its slots'
-- grants within the limit (granted_micros, changed only under the row's lock), so the
-- budget is never overspent however many slots there are. A slot's own figures mean
-- nothing alone: a hold taken in one slot may be settled or released in another, so a
-- slot's held (and then its granted) can be negative.
--
-- What the budget rows counted moves to slot 0, granted exactly what it used; the row
-- remembers the highest alert threshold already crossed (alerted_pct), so a settlement
-- reads whether to alert with the sums it reads anyway.

CREATE TABLE budget_slots (
    scope          TEXT NOT NULL,
    period         TEXT NOT NULL,
    period_start   BIGINT NOT NULL,
    slot           BIGINT NOT NULL,
    granted_micros BIGINT NOT NULL,
    spent_micros   BIGINT NOT NULL DEFAULT 0 CHECK (spent_micros >= 0),
    held_micros    BIGINT NOT NULL DEFAULT 0,
    CHECK (spent_micros + held_micros <= granted_micros),
    PRIMARY KEY (scope, period, period_start, slot),
    FOREIGN KEY (scope, period, period_start) REFERENCES budgets (scope, period, period_start)
);

INSERT INTO budget_slots (scope, period, period_start, slot, granted_micros, spent_micros, held_micros)
SELECT scope, period, period_start, 0, spent_micros + held_micros, spent_micros, held_micros
  FROM budgets;

ALTER TABLE budgets ADD COLUMN granted_micros BIGINT NOT NULL DEFAULT 0;
ALTER TABLE budgets ADD COLUMN alerted_pct INTEGER NOT NULL DEFAULT 0;

UPDATE budgets
   SET granted_micros = spent_micros + held_micros,
       alerted_pct = CASE
           WHEN spent_micros * 100 >= limit_micros * 100 THEN 100
           WHEN spent_micros * 100 >= limit_micros * 80 THEN 80
           WHEN spent_micros * 100 >= limit_micros * 50 THEN 50
           ELSE 0 END;

ALTER TABLE budgets DROP COLUMN spent_micros;
ALTER TABLE budgets DROP COLUMN held_micros;
