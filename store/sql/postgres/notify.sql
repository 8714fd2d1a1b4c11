-- name: notify
-- Tell every process LISTENing on the channel, when this transaction commits (never on
-- rollback; the server merges repeats within one transaction).
SELECT pg_notify(:channel, '')
