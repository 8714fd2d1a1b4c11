-- name: create
-- A new live token under a name; nothing when a live token has the name already.
INSERT INTO api_tokens (name, hash, created_at) VALUES (:name, :hash, :now)
    ON CONFLICT DO NOTHING
RETURNING id, name, created_at, revoked_at

-- name: revoke
-- Revoke the live token of a name.
UPDATE api_tokens SET revoked_at = :now WHERE name = :name AND revoked_at IS NULL
RETURNING id, name, created_at, revoked_at

-- name: all
-- Every token, live and revoked, oldest first (never their hashes).
SELECT id, name, created_at, revoked_at FROM api_tokens ORDER BY id

-- name: live_by_hash
-- The live token with this hash, if any.
SELECT id, name, created_at, revoked_at FROM api_tokens
 WHERE hash = :hash AND revoked_at IS NULL

-- name: remembered
-- The first answer given to a caller's idempotency key.
SELECT request_hash, status, answer FROM api_requests
 WHERE token_id = :token_id AND idem_key = :idem_key

-- name: remember
-- Keep the first answer to a caller's idempotency key; nothing when one is kept already.
INSERT INTO api_requests (token_id, idem_key, request_hash, status, answer, created_at)
VALUES (:token_id, :idem_key, :request_hash, :status, :answer, :now)
    ON CONFLICT (token_id, idem_key) DO NOTHING
RETURNING status

-- name: forget_before
-- Idempotency keys past their keeping time.
DELETE FROM api_requests WHERE created_at < :before
