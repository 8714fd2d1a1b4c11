-- Operator decisions beyond one tap: a reason with a reject, a note with a redraft,
-- decisions on a listed set of items, reminders and escalation, and decisions made
-- from a terminal, whose events name the Unix user ("cli:<user>").

-- Prompts answered by a reply other than an Edit: a typed reject reason, a redraft note.
CREATE TABLE reply_prompts (
    chat_id    INTEGER NOT NULL,
    message_id INTEGER NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('reject', 'redraft')),
    item_id    INTEGER NOT NULL REFERENCES items (id),
    attempt    INTEGER NOT NULL,
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);

-- The reviewer's note for one attempt's draft: the LLM drafter reads it as an instruction.
CREATE TABLE redraft_notes (
    item_id    INTEGER NOT NULL REFERENCES items (id),
    attempt    INTEGER NOT NULL,
    note       TEXT NOT NULL,
    actor      TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (item_id, attempt)
);

-- A list of item versions shown with "Approve all" / "Reject all": a decision taken from
-- it applies to exactly these versions, as a card's buttons apply to the card's version.
CREATE TABLE bulk_offers (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline   TEXT,
    items      TEXT NOT NULL CHECK (json_valid(items)),
    created_at INTEGER NOT NULL,
    decided_at INTEGER
);

-- Reminders and escalations sent for an item's stay awaiting approval (once each).
CREATE TABLE approval_nudges (
    item_id    INTEGER NOT NULL REFERENCES items (id),
    attempt    INTEGER NOT NULL,
    kind       TEXT NOT NULL CHECK (kind IN ('remind', 'escalate')),
    at         INTEGER NOT NULL,
    PRIMARY KEY (item_id, attempt, kind)
);

-- Events may name a terminal user: the table is rebuilt with the same rows.
ALTER TABLE events RENAME TO events_old;

CREATE TABLE events (
    id         INTEGER PRIMARY KEY,
    entity     TEXT NOT NULL CHECK (entity IN ('item', 'claim', 'budget', 'pipeline')),
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
