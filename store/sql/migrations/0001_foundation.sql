-- Dedup memory and the run log.

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
    CHECK ((status = 'running') = (ended_at IS NULL))
);

CREATE INDEX pipeline_runs_recent ON pipeline_runs (pipeline, started_at DESC);
