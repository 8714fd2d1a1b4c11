-- Publishing slots (store.queue): one row per posting time of a named schedule, its
-- state CHECK built from store/queue/machine.py's STATES (tests/store/queue/test_machine.py
-- compares them), and "slot" as an entity of the audit log: every slot mutation writes
-- its event in the same transaction. SQLite changes a CHECK only by rebuilding the
-- table, with the same rows and ids.
ALTER TABLE events RENAME TO events_old;

CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    entity     TEXT NOT NULL CHECK (entity IN ('item', 'claim', 'budget', 'pipeline', 'token', 'slot')),
    entity_id  TEXT NOT NULL,
    from_state TEXT,
    to_state   TEXT NOT NULL,
    actor      TEXT NOT NULL CHECK (
        actor IN ('system', 'scheduler', 'sweep', 'cli')
        OR (actor GLOB 'operator:[0-9]*' AND substr(actor, 10) NOT GLOB '*[^0-9]*')
        OR (actor GLOB 'cli:?*' AND length(actor) <= 68
            AND substr(actor, 5) NOT GLOB '*[^A-Za-z0-9._-]*')),
    attempt    INTEGER NOT NULL DEFAULT 0,
    reason     TEXT,
    at         INTEGER NOT NULL,
    prev_hash  TEXT,
    seq        INTEGER,
    hash       TEXT,
    CHECK ((seq IS NULL) = (hash IS NULL))
);

INSERT INTO events (id, entity, entity_id, from_state, to_state, actor, attempt, reason, at,
                    prev_hash, seq, hash)
SELECT id, entity, entity_id, from_state, to_state, actor, attempt, reason, at, prev_hash, seq, hash
  FROM events_old ORDER BY id;

-- Dropping the old table drops its triggers first, so no append-only trigger fires.
DROP TABLE events_old;

CREATE INDEX events_by_entity ON events (entity, entity_id, id);
CREATE UNIQUE INDEX events_by_seq ON events (seq);
CREATE INDEX events_unsealed ON events (id) WHERE seq IS NULL;

-- The one UPDATE allowed: sealing an unsealed event, once, leaving its fields as written.
CREATE TRIGGER events_no_update BEFORE UPDATE ON events
WHEN NOT (OLD.seq IS NULL AND NEW.seq IS NOT NULL
          AND NEW.id IS OLD.id AND NEW.entity IS OLD.entity AND NEW.entity_id IS OLD.entity_id
          AND NEW.from_state IS OLD.from_state AND NEW.to_state IS OLD.to_state
          AND NEW.actor IS OLD.actor AND NEW.attempt IS OLD.attempt
          AND NEW.reason IS OLD.reason AND NEW.at IS OLD.at AND NEW.prev_hash IS OLD.prev_hash)
BEGIN
    SELECT RAISE(ABORT, 'events are append-only (an unsealed event may only be sealed, once)');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

-- changed_at: when the slot entered its state (the floor and the sweep count from it);
-- attempt: how many times it started firing. An item is in at most one slot that still
-- holds it (open, firing, substituting: machine.HOLDING).
CREATE TABLE slots (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    schedule   TEXT NOT NULL,
    slot_at    INTEGER NOT NULL,
    state      TEXT NOT NULL CHECK (state IN ('open', 'firing', 'substituting', 'fired', 'expired', 'breach')),
    item_id    INTEGER REFERENCES items (id),
    attempt    INTEGER NOT NULL DEFAULT 0 CHECK (attempt >= 0),
    changed_at INTEGER NOT NULL,
    reason     TEXT,
    UNIQUE (schedule, slot_at)
);

CREATE UNIQUE INDEX slots_by_item ON slots (item_id)
    WHERE item_id IS NOT NULL AND state IN ('open', 'firing', 'substituting');
CREATE INDEX slots_transient ON slots (changed_at) WHERE state IN ('firing', 'substituting');
CREATE INDEX slots_open ON slots (slot_at) WHERE state = 'open';
