-- name: find
-- A signing key by its id.
SELECT * FROM audit_signers WHERE key_id = :key_id

-- name: insert
-- Keep a worker's public signing key and its endorsement.
INSERT INTO audit_signers (key_id, public_key, endorsed_by, endorsement, worker, registered_at)
VALUES (:key_id, :public_key, :endorsed_by, :endorsement, :worker, :registered_at)

-- name: endorse_again
-- A key endorsed anew (the deployment key changed with its secret), by the worker named.
UPDATE audit_signers
   SET public_key = :public_key, endorsed_by = :endorsed_by, endorsement = :endorsement,
       worker = :worker, registered_at = :registered_at
 WHERE key_id = :key_id

-- name: all
-- Every signing key the store holds, oldest first.
SELECT * FROM audit_signers ORDER BY registered_at, key_id
