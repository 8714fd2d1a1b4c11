-- name: notify
-- Tell the other processes sharing the store that a channel has news, at commit. SQLite
-- has one process, woken by its own commits: nothing to send (PostgreSQL overrides this).
SELECT :channel
