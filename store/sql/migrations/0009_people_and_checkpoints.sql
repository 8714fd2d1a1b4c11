-- The operators' names as Telegram last gave them, so every reply can say who acted
-- ("Ana (@ana)") instead of a numeric id, also after a restart.
CREATE TABLE people (
    user_id    INTEGER PRIMARY KEY,
    first_name TEXT,
    username   TEXT,
    updated_at INTEGER NOT NULL
);

-- Signed heads of the event chain: a checkpoint says "event N had hash H", signed with
-- the bot's Ed25519 key. An export that ends before a checkpoint's event was cut short.
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
