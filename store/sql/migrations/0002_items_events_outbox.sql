-- Items and their state machine, draft versions, operator votes, the audit
-- chain and the outbox. The state lists in the CHECK constraints are those
-- store/machine.py declares; tests/store/test_machine.py fails on any drift.

CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    entity     TEXT NOT NULL CHECK (entity IN ('item', 'claim', 'budget', 'pipeline')),
    entity_id  TEXT NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    actor      TEXT NOT NULL CHECK (
        actor IN ('system', 'scheduler', 'sweep', 'cli')
        OR (actor GLOB 'operator:[0-9]*' AND substr(actor, 10) NOT GLOB '*[^0-9]*')),
    attempt    INTEGER NOT NULL DEFAULT 0,
    reason     TEXT,
    at         INTEGER NOT NULL,
    prev_hash  TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE
);

CREATE INDEX events_by_entity ON events (entity, entity_id, id);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TABLE items (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline           TEXT NOT NULL,
    scope              TEXT NOT NULL,
    source_id          TEXT NOT NULL,
    payload            TEXT NOT NULL CHECK (json_valid(payload)),
    content_hash       TEXT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('new', 'drafting', 'awaiting_approval', 'approved', 'dispatching', 'dispatched', 'rejected', 'expired', 'failed', 'breach')),
    attempt            INTEGER NOT NULL DEFAULT 1 CHECK (attempt >= 1),
    version            INTEGER NOT NULL DEFAULT 0 CHECK (version >= 0),
    reason             TEXT,
    created_at         INTEGER NOT NULL,
    last_transition_at INTEGER NOT NULL,
    deadline           INTEGER,
    UNIQUE (pipeline, scope, source_id)
);

CREATE INDEX items_by_state ON items (pipeline, state);
CREATE INDEX items_by_deadline ON items (deadline) WHERE deadline IS NOT NULL;

CREATE TABLE drafts (
    item_id      INTEGER NOT NULL REFERENCES items (id),
    version      INTEGER NOT NULL CHECK (version >= 1),
    text         TEXT NOT NULL,
    content_hash TEXT NOT NULL,
    provenance   TEXT NOT NULL CHECK (json_valid(provenance)),
    cost_micros  INTEGER,
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (item_id, version)
);

CREATE TABLE votes (
    item_id  INTEGER NOT NULL REFERENCES items (id),
    attempt  INTEGER NOT NULL,
    version  INTEGER NOT NULL,
    operator INTEGER NOT NULL,
    decision TEXT NOT NULL CHECK (decision IN ('approve', 'reject')),
    at       INTEGER NOT NULL,
    PRIMARY KEY (item_id, attempt, version, operator)
);

CREATE TABLE outbox (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    kind            TEXT NOT NULL CHECK (kind IN ('card', 'card_edit', 'alert', 'dispatch')),
    target          TEXT NOT NULL,
    item_id         INTEGER REFERENCES items (id),
    payload         TEXT NOT NULL CHECK (json_valid(payload)),
    dedupe_key      TEXT UNIQUE,
    state           TEXT NOT NULL DEFAULT 'pending' CHECK (state IN ('pending', 'sent', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at INTEGER NOT NULL,
    last_error      TEXT,
    external_id     TEXT,
    created_at      INTEGER NOT NULL,
    sent_at         INTEGER
);

CREATE INDEX outbox_due ON outbox (state, next_attempt_at, id);
CREATE INDEX outbox_by_item ON outbox (item_id);
