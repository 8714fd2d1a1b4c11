-- name: nudges_of
-- The reminders and escalations already sent for some items (ids as a JSON array).
SELECT item_id, attempt, kind FROM approval_nudges
 WHERE item_id IN (SELECT CAST(value AS bigint)
                     FROM json_array_elements_text(CAST(:ids AS json)))
