-- name: by_idem
-- The claim created under an idempotency hash, if any.
SELECT * FROM claims WHERE idem_hash = :idem_hash

-- name: get
-- One claim by id.
SELECT * FROM claims WHERE id = :id

-- name: lock
-- One claim by id, to decide on (PostgreSQL locks the row: see its override).
SELECT * FROM claims WHERE id = :id

-- name: item_hash
-- The content hash of the item a claim drafts.
SELECT content_hash FROM items WHERE id = :id

-- name: insert
-- Create a claim in its initial state; nothing when its idempotency hash has a row
-- already (another writer began the same work first: the caller reads that row).
INSERT INTO claims (idem_hash, request_digest, pipeline, item_id, item_hash, state,
                    provider_allowed, reserved_micros, lease_until, reason, created_at, updated_at)
VALUES (:idem_hash, :request_digest, :pipeline, :item_id, :item_hash, :state,
        :provider_allowed, :reserved_micros, :lease_until, :reason, :now, :now)
    ON CONFLICT (idem_hash) DO NOTHING
RETURNING *

-- name: move
-- Compare-and-set: move a claim only if it is still in the state the caller saw.
UPDATE claims
   SET state = :to_state, reason = coalesce(:reason, reason), updated_at = :now,
       started_at = CASE WHEN :to_state = 'started' THEN :now ELSE started_at END,
       ended_at = CASE WHEN :to_state IN ('settled', 'released') THEN :now ELSE ended_at END
 WHERE id = :id AND state = :from_state
RETURNING *

-- name: renew
-- A new lease for a claim still reserved (no provider call authorized yet).
UPDATE claims SET lease_until = :lease_until, updated_at = :now
 WHERE id = :id AND state = 'reserved'
RETURNING *

-- name: expired
-- Claims whose lease ran out before they finished, oldest lease first (for recover).
SELECT * FROM claims
 WHERE state IN ('reserved', 'started') AND lease_until <= :now
 ORDER BY lease_until, id LIMIT :batch

-- name: begin
-- PostgreSQL only (its override begins a claim, its holds and its event in one
-- statement); a unit never sends it to SQLite, whose statements cannot chain writes
-- (backend.chains_writes). Here it finds nothing, as the override does when it cannot.
SELECT * FROM claims WHERE 0 = 1

-- name: start
-- PostgreSQL only (its override starts a claim and writes its event in one statement);
-- never sent to SQLite (backend.chains_writes).
SELECT * FROM claims WHERE 0 = 1
