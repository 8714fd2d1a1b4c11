-- The budget ledger: configured limits, one budget row per scope per period
-- instance, idempotent claims and the budget rows each claim holds against.
-- The claim state list in the CHECK is store/ledger/machine.py's check_constraint();
-- tests/store/test_ledger.py fails on any drift. Money is integer micros (1 USD = 1e6).

CREATE TABLE budget_limits (
    scope        TEXT NOT NULL,
    period       TEXT NOT NULL CHECK (period IN ('day', 'month')),
    limit_micros INTEGER NOT NULL CHECK (limit_micros >= 0),
    set_by       TEXT NOT NULL,
    set_at       INTEGER NOT NULL,
    PRIMARY KEY (scope, period)
) WITHOUT ROWID;

CREATE TABLE budgets (
    scope        TEXT NOT NULL,
    period       TEXT NOT NULL CHECK (period IN ('day', 'month')),
    period_start INTEGER NOT NULL,
    limit_micros INTEGER NOT NULL CHECK (limit_micros >= 0),
    spent_micros INTEGER NOT NULL DEFAULT 0 CHECK (spent_micros >= 0),
    held_micros  INTEGER NOT NULL DEFAULT 0 CHECK (held_micros >= 0),
    PRIMARY KEY (scope, period, period_start),
    FOREIGN KEY (scope, period) REFERENCES budget_limits (scope, period)
) WITHOUT ROWID;

CREATE TABLE claims (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    idem_hash        TEXT NOT NULL UNIQUE,
    request_digest   TEXT NOT NULL,
    pipeline         TEXT NOT NULL,
    item_id          INTEGER REFERENCES items (id),
    item_hash        TEXT,
    state            TEXT NOT NULL CHECK (state IN ('reserved', 'started', 'settled', 'released', 'uncertain', 'unbudgeted')),
    provider_allowed INTEGER NOT NULL CHECK (provider_allowed IN (0, 1)),
    reserved_micros  INTEGER NOT NULL CHECK (reserved_micros >= 0),
    actual_micros    INTEGER CHECK (actual_micros >= 0),
    lease_until      INTEGER NOT NULL,
    evidence         TEXT,
    usage            TEXT CHECK (usage IS NULL OR json_valid(usage)),
    reason           TEXT,
    created_at       INTEGER NOT NULL,
    started_at       INTEGER,
    ended_at         INTEGER,
    updated_at       INTEGER NOT NULL,
    CHECK ((state = 'settled') = (actual_micros IS NOT NULL)),
    CHECK (provider_allowed = 1 OR state = 'unbudgeted')
);

CREATE INDEX claims_by_lease ON claims (lease_until) WHERE state IN ('reserved', 'started');
CREATE INDEX claims_by_state ON claims (state, pipeline);

CREATE TABLE claim_holds (
    claim_id     INTEGER NOT NULL REFERENCES claims (id),
    scope        TEXT NOT NULL,
    period       TEXT NOT NULL,
    period_start INTEGER NOT NULL,
    micros       INTEGER NOT NULL CHECK (micros >= 0),
    PRIMARY KEY (claim_id, scope, period),
    FOREIGN KEY (scope, period, period_start) REFERENCES budgets (scope, period, period_start)
) WITHOUT ROWID;
