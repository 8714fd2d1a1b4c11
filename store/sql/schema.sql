-- The canonical schema: what replaying every migration produces.
-- tests/test_migrations.py builds one database from this file and one from the
-- migrations and requires the two to be identical; edit both together.

CREATE TABLE schema_migrations (
    version    INTEGER PRIMARY KEY,
    name       TEXT NOT NULL,
    applied_at INTEGER NOT NULL
);

CREATE TABLE seen_items (
    pipeline TEXT NOT NULL,
    scope    TEXT NOT NULL,
    item_id  TEXT NOT NULL,
    seen_at  INTEGER NOT NULL,
    PRIMARY KEY (pipeline, scope, item_id)
) WITHOUT ROWID;

CREATE TABLE pipeline_runs (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline   TEXT NOT NULL,
    trigger    TEXT NOT NULL CHECK (trigger IN ('schedule', 'manual', 'replay')),
    started_at INTEGER NOT NULL,
    ended_at   INTEGER,
    status     TEXT NOT NULL DEFAULT 'running' CHECK (status IN ('running', 'ok', 'error')),
    fetched    INTEGER NOT NULL DEFAULT 0,
    new        INTEGER NOT NULL DEFAULT 0,
    drafted    INTEGER NOT NULL DEFAULT 0,
    failed     INTEGER NOT NULL DEFAULT 0,
    error_text TEXT,
    -- The worker running it and until when its lease holds (migration 0011).
    worker      TEXT,
    lease_until INTEGER,
    -- Entries the pipeline's filter dropped (migration 0016).
    filtered    INTEGER NOT NULL DEFAULT 0,
    -- Entries the pipeline's triage skipped (migration 0017).
    skipped     INTEGER NOT NULL DEFAULT 0,
    CHECK ((status = 'running') = (ended_at IS NULL))
);

CREATE INDEX pipeline_runs_recent ON pipeline_runs (pipeline, started_at DESC);
CREATE UNIQUE INDEX pipeline_runs_one_running ON pipeline_runs (pipeline) WHERE status = 'running';

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
    -- NULL: the previous event's hash, derived when read (rows written before
    -- migration 0006 store it; it is covered by `hash` either way).
    prev_hash  TEXT,
    -- Both NULL until the sealer gives the event its place in the chain and its hash.
    seq        INTEGER,
    hash       TEXT,
    CHECK ((seq IS NULL) = (hash IS NULL))
);

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

CREATE TABLE items (
    id                 INTEGER PRIMARY KEY AUTOINCREMENT,
    pipeline           TEXT NOT NULL,
    scope              TEXT NOT NULL,
    source_id          TEXT NOT NULL,
    payload            TEXT NOT NULL CHECK (json_valid(payload)),
    content_hash       TEXT NOT NULL,
    state              TEXT NOT NULL CHECK (state IN ('new', 'drafting', 'awaiting_approval', 'approved', 'dispatching', 'dispatched', 'rejected', 'expired', 'failed', 'breach', 'filtered', 'skipped')),
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
CREATE INDEX items_pending ON items (state, last_transition_at, id);

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
    sent_at         INTEGER,
    claimed_by      TEXT,
    lease_until     INTEGER
);

CREATE INDEX outbox_due ON outbox (kind, id, next_attempt_at) WHERE state = 'pending';
CREATE INDEX outbox_by_item ON outbox (item_id);
CREATE INDEX outbox_prunable ON outbox (state, sent_at) WHERE kind != 'dispatch';

-- The budget ledger (migration 0003).
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
CREATE INDEX claims_by_created ON claims (created_at, pipeline, state, actual_micros, reserved_micros);

CREATE TABLE claim_holds (
    claim_id     INTEGER NOT NULL REFERENCES claims (id),
    scope        TEXT NOT NULL,
    period       TEXT NOT NULL,
    period_start INTEGER NOT NULL,
    micros       INTEGER NOT NULL CHECK (micros >= 0),
    PRIMARY KEY (claim_id, scope, period),
    FOREIGN KEY (scope, period, period_start) REFERENCES budgets (scope, period, period_start)
) WITHOUT ROWID;

CREATE TABLE pipeline_state (
    pipeline         TEXT PRIMARY KEY,
    paused           INTEGER NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    last_started_at  INTEGER,
    next_due_at      INTEGER,
    run_requested_at INTEGER
);

CREATE TABLE source_state (
    pipeline   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (json_valid(state)),
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (pipeline, scope)
);

CREATE TABLE llm_outputs (
    claim_id   INTEGER PRIMARY KEY REFERENCES claims (id),
    text       TEXT NOT NULL,
    model      TEXT NOT NULL,
    request_id TEXT,
    error      TEXT,
    created_at INTEGER NOT NULL
);

CREATE TABLE edit_prompts (
    chat_id    INTEGER NOT NULL,
    message_id INTEGER NOT NULL,
    item_id    INTEGER NOT NULL REFERENCES items (id),
    version    INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);

CREATE INDEX llm_outputs_by_age ON llm_outputs (created_at);

CREATE TABLE api_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

CREATE UNIQUE INDEX api_tokens_live_name ON api_tokens (name) WHERE revoked_at IS NULL;

CREATE TABLE api_requests (
    token_id     INTEGER NOT NULL REFERENCES api_tokens (id),
    idem_key     TEXT NOT NULL,
    request_hash TEXT NOT NULL,
    status       INTEGER NOT NULL,
    answer       TEXT NOT NULL CHECK (json_valid(answer)),
    created_at   INTEGER NOT NULL,
    PRIMARY KEY (token_id, idem_key)
) WITHOUT ROWID;

CREATE INDEX api_requests_by_age ON api_requests (created_at);
-- Operators' names and signed chain heads (migration 0009).
CREATE TABLE people (
    user_id    INTEGER PRIMARY KEY,
    first_name TEXT,
    username   TEXT,
    updated_at INTEGER NOT NULL
);

CREATE TABLE audit_checkpoints (
    id        INTEGER PRIMARY KEY AUTOINCREMENT,
    event_id  INTEGER NOT NULL,
    hash      TEXT NOT NULL,
    signed_at INTEGER NOT NULL,
    key_id    TEXT NOT NULL,
    signature TEXT NOT NULL
);

CREATE INDEX audit_checkpoints_by_event ON audit_checkpoints (event_id);

CREATE TRIGGER audit_checkpoints_no_update BEFORE UPDATE ON audit_checkpoints
BEGIN
    SELECT RAISE(ABORT, 'checkpoints are append-only');
END;

CREATE TRIGGER audit_checkpoints_no_delete BEFORE DELETE ON audit_checkpoints
BEGIN
    SELECT RAISE(ABORT, 'checkpoints are append-only');
END;

-- Operator decisions (migration 0010).
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

-- Workers, the leader's lease and handled Telegram updates (migration 0011).
CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    stopped_at   INTEGER
);

CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    term        INTEGER NOT NULL CHECK (term >= 1),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

CREATE TABLE handled_updates (
    update_id  INTEGER PRIMARY KEY,
    handled_at INTEGER NOT NULL
);

CREATE INDEX handled_updates_by_age ON handled_updates (handled_at);

CREATE TABLE forum_topics (
    chat_id    INTEGER NOT NULL,
    name       TEXT NOT NULL,
    thread_id  INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (chat_id, name)
);

CREATE TABLE chat_moves (
    old_id   INTEGER PRIMARY KEY,
    new_id   INTEGER NOT NULL,
    moved_at INTEGER NOT NULL
);

CREATE TABLE item_counts (
    pipeline TEXT NOT NULL,
    state    TEXT NOT NULL,
    slot     INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (pipeline, state, slot)
) WITHOUT ROWID;

CREATE TRIGGER items_counted AFTER INSERT ON items
BEGIN
    INSERT INTO item_counts (pipeline, state, slot, n) VALUES (new.pipeline, new.state, 0, 1)
        ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER items_counted_moved AFTER UPDATE OF state ON items
WHEN old.state IS NOT new.state
BEGIN
    INSERT INTO item_counts (pipeline, state, slot, n) VALUES (old.pipeline, old.state, 0, -1)
        ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = n - 1;
    INSERT INTO item_counts (pipeline, state, slot, n) VALUES (new.pipeline, new.state, 0, 1)
        ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = n + 1;
END;
