-- name: lock
-- One claim by id, its row locked until the transaction ends: a second settlement
-- waits, then reads what the first one wrote.
SELECT * FROM claims WHERE id = :id FOR UPDATE
