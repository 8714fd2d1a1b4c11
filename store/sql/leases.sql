-- name: renew
-- Extend the lease its holder holds in this term, if it has not lapsed yet.
UPDATE leases SET expires_at = :until
 WHERE name = :name AND holder = :holder AND term = :term AND expires_at >= :now
RETURNING term

-- name: elect
-- Take a lease nobody ever held (the first worker to insert the row wins).
INSERT INTO leases (name, holder, term, acquired_at, expires_at)
VALUES (:name, :holder, 1, :now, :until)
    ON CONFLICT (name) DO NOTHING
RETURNING term

-- name: take_over
-- Take a lapsed lease in a new term; a concurrent taker finds it renewed and gets nothing.
-- :steal takes it even before it lapses: only where no other worker can be alive.
UPDATE leases SET holder = :holder, term = term + 1, acquired_at = :now, expires_at = :until
 WHERE name = :name AND (expires_at < :now OR :steal = 1)
RETURNING term

-- name: release
-- Give the lease up at a clean stop, so the next worker need not wait for it to lapse.
UPDATE leases SET expires_at = :now - 1
 WHERE name = :name AND holder = :holder AND term = :term

-- name: get
-- The lease as it stands.
SELECT name, holder, term, acquired_at, expires_at FROM leases WHERE name = :name
