-- name: open
-- Open one slot of a schedule at its time; nothing when it is open already (the
-- window is opened again at every look), so only a slot made now is returned.
INSERT INTO slots (schedule, slot_at, state, changed_at) VALUES (:schedule, :slot_at, 'open', :now)
    ON CONFLICT (schedule, slot_at) DO NOTHING
RETURNING *

-- name: get
-- One slot by id.
SELECT * FROM slots WHERE id = :id

-- name: move
-- Compare-and-set transition: only if the slot is still where the caller judged it, so
-- of two workers firing one slot, one moves it and the other moves nothing.
UPDATE slots
   SET state = :to, item_id = :item_id, attempt = attempt + :bump, changed_at = :now,
       reason = :reason
 WHERE id = :id AND state = :from_state AND item_id IS NOT DISTINCT FROM :seen_item
RETURNING *

-- name: hold
-- Compare-and-set of an open slot's item (scheduled, moved, pulled, posted now).
UPDATE slots SET item_id = :item_id
 WHERE id = :id AND state = 'open' AND item_id IS NOT DISTINCT FROM :seen_item
RETURNING *

-- name: next_free
-- The first empty open slot after every slot holding an item (FIFO: a new item never
-- goes ahead of one queued before it), not before now.
SELECT * FROM slots
 WHERE schedule = :schedule AND state = 'open' AND item_id IS NULL AND slot_at >= :now
   AND slot_at > coalesce((SELECT slot_at FROM slots
                            WHERE schedule = :schedule AND state = 'open'
                              AND item_id IS NOT NULL
                            ORDER BY slot_at DESC LIMIT 1), -1)
 ORDER BY slot_at
 LIMIT 1

-- name: of_item
-- The slot that holds an item (open, firing or substituting: machine.HOLDING), if any.
SELECT * FROM slots
 WHERE item_id = :item_id AND state IN ('open', 'firing', 'substituting')

-- name: open_from
-- A schedule's open slots from a time on, in order: the queue laid out over them.
SELECT * FROM slots
 WHERE schedule = :schedule AND state = 'open' AND slot_at >= :slot_at
 ORDER BY slot_at

-- name: stuck
-- Slots in a transient state (machine.TRANSIENT) since before a time, oldest first.
SELECT * FROM slots
 WHERE state IN ('firing', 'substituting') AND changed_at < :before
 ORDER BY changed_at, id

-- name: due
-- Open slots whose time has come, oldest first.
SELECT * FROM slots WHERE state = 'open' AND slot_at <= :now ORDER BY slot_at, id

-- name: upcoming
-- A schedule's slots from a time on, in order: what /queue pages through.
SELECT * FROM slots
 WHERE schedule = :schedule AND slot_at >= :since
 ORDER BY slot_at
 LIMIT :limit
