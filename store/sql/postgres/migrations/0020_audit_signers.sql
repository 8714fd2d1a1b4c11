-- The workers' public signing keys, each endorsed by the deployment key (an Ed25519 key
-- every worker derives from the secret they share outside the database), so that a
-- verify on any worker trusts the checkpoints another leader signed. A row proves
-- nothing by being here: a verify trusts a key only when its endorsement checks with
-- the deployment key it derives itself (an attacker who can write here cannot sign).
CREATE TABLE audit_signers (
    key_id        TEXT PRIMARY KEY,
    public_key    TEXT NOT NULL,
    endorsed_by   TEXT NOT NULL,
    endorsement   TEXT NOT NULL,
    worker        TEXT NOT NULL,
    registered_at BIGINT NOT NULL
);
