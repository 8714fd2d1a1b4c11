-- Indexes shaped for the operator's questions and retention's own lookups, and the
-- bytes every item keeps for good cut down.

-- /pending: items of one state, the longest-waiting first, read straight off the index.
CREATE INDEX items_pending ON items (state, last_transition_at, id);

-- /budget: spend by pipeline since the period began, without reading the claim rows.
CREATE INDEX claims_by_created ON claims (created_at, pipeline, state, actual_micros, reserved_micros);

-- Retention: provider outputs past their age, oldest first.
CREATE INDEX llm_outputs_by_age ON llm_outputs (created_at);

-- Retention: sent messages by age (never dispatch rows, kept as the record of what went
-- out, so they stay out of this index and it stays as small as what awaits pruning).
CREATE INDEX outbox_prunable ON outbox (state, sent_at) WHERE kind != 'dispatch';

-- A card no longer repeats its draft's text: readers join the draft row instead.
UPDATE outbox SET payload = json_remove(payload, '$.text') WHERE kind = 'card';

-- Only pending rows wait to be sent: sent and failed ones leave the index that lists
-- them, kind by kind in the order they are sent (a dispatch backlog never slows the
-- Telegram sender's look, nor the other way round).
DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (kind, id, next_attempt_at) WHERE state = 'pending';

-- Events without UNIQUE (hash), and new events without a copy of the previous event's
-- hash (readers derive it from the event before; every hash still covers it). The
-- index cost a third of each event's bytes and the copy another fifth, and neither
-- guarded anything the chain does not: ids are the primary key and order the chain,
-- and verification recomputes every hash. The table is rebuilt with the same rows.
ALTER TABLE events RENAME TO events_old;

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
