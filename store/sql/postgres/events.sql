-- name: lock_head
-- Take the newest sealed event for this sealer alone until it commits: a deposed
-- leader's sealer and the new one's then seal one after the other, the second from the
-- head the first left. Writers never touch sealed rows, so they never wait on this.
SELECT seq FROM events WHERE seq IS NOT NULL ORDER BY seq DESC LIMIT 1 FOR UPDATE
