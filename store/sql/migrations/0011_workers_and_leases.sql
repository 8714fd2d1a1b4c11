-- Several workers on one store: who is alive, who leads, and who holds which work.
-- On SQLite one process holds the store, so it is always the leader and holds every
-- claim; the same rows let several processes share a PostgreSQL store.

-- Each gatehouse process that runs the engine; its heartbeat says it is alive.
CREATE TABLE workers (
    id           TEXT PRIMARY KEY,
    host         TEXT NOT NULL,
    pid          INTEGER NOT NULL,
    started_at   INTEGER NOT NULL,
    heartbeat_at INTEGER NOT NULL,
    stopped_at   INTEGER
);

-- A lease by name ('leader'): one holder for one term, until expires_at. Elected by
-- inserting the row, renewed only by its holder in its term, taken over once lapsed.
CREATE TABLE leases (
    name        TEXT PRIMARY KEY,
    holder      TEXT NOT NULL,
    term        INTEGER NOT NULL CHECK (term >= 1),
    acquired_at INTEGER NOT NULL,
    expires_at  INTEGER NOT NULL
);

-- Telegram updates already acted on: a new leader that reads them again skips them.
CREATE TABLE handled_updates (
    update_id  INTEGER PRIMARY KEY,
    handled_at INTEGER NOT NULL
);

CREATE INDEX handled_updates_by_age ON handled_updates (handled_at);

-- A dispatch row taken by a worker is its own until lease_until; then any worker may.
ALTER TABLE outbox ADD COLUMN claimed_by TEXT;
ALTER TABLE outbox ADD COLUMN lease_until INTEGER;

-- A run is held by its worker until lease_until, which the worker's heartbeat renews;
-- a run whose lease lapsed was left by a dead worker and is closed.
ALTER TABLE pipeline_runs ADD COLUMN worker TEXT;
ALTER TABLE pipeline_runs ADD COLUMN lease_until INTEGER;

-- One running run per pipeline, whichever worker started it. Runs a crash left open
-- beside a newer one are closed first, as the next start would have closed them.
UPDATE pipeline_runs SET status = 'error', ended_at = started_at, error_text = 'interrupted'
 WHERE status = 'running'
   AND id NOT IN (SELECT max(id) FROM pipeline_runs WHERE status = 'running' GROUP BY pipeline);

CREATE UNIQUE INDEX pipeline_runs_one_running ON pipeline_runs (pipeline) WHERE status = 'running';
