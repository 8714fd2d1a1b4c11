-- The scheduler's memory per pipeline, and each source's own small state (ETags).

CREATE TABLE pipeline_state (
    pipeline         TEXT PRIMARY KEY,
    paused           BIGINT NOT NULL DEFAULT 0 CHECK (paused IN (0, 1)),
    last_started_at  BIGINT,
    next_due_at      BIGINT,
    run_requested_at BIGINT
);

CREATE TABLE source_state (
    pipeline   TEXT NOT NULL,
    scope      TEXT NOT NULL,
    state      TEXT NOT NULL CHECK (json_valid(state)),
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (pipeline, scope)
);
