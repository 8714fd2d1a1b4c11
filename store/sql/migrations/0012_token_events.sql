-- Trigger tokens are created and revoked with an audit event each (entity "token"):
-- SQLite changes a CHECK only by rebuilding the table, with the same rows and ids.
ALTER TABLE events RENAME TO events_old;

CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    entity     TEXT NOT NULL CHECK (entity IN ('item', 'claim', 'budget', 'pipeline', 'token')),
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
    hash       TEXT NOT NULL
);

INSERT INTO events (id, entity, entity_id, from_state, to_state, actor, attempt, reason, at,
                    prev_hash, hash)
SELECT id, entity, entity_id, from_state, to_state, actor, attempt, reason, at, prev_hash, hash
  FROM events_old ORDER BY id;

-- Dropping the old table drops its triggers first, so no append-only trigger fires.
DROP TABLE events_old;

CREATE INDEX events_by_entity ON events (entity, entity_id, id);

CREATE TRIGGER events_no_update BEFORE UPDATE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;

CREATE TRIGGER events_no_delete BEFORE DELETE ON events
BEGIN
    SELECT RAISE(ABORT, 'events are append-only');
END;
