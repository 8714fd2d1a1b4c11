-- The scheduler's memory per pipeline, and each source's own small state (ETags).

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
