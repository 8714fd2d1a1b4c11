-- Callers of the HTTP trigger: one bearer token each, kept only as its SHA-256 (a token
-- is 256 random bits, so a fast hash is as safe as a slow one), and the first answer to
-- each Idempotency-Key a caller sent, so a retry gets that answer back.

CREATE TABLE api_tokens (
    id         INTEGER PRIMARY KEY AUTOINCREMENT,
    name       TEXT NOT NULL,
    hash       TEXT NOT NULL UNIQUE,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);

-- A name names one live token; a revoked token's name may be given to a new one.
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
