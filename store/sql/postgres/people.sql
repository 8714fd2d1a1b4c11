-- name: many
-- The people with these ids (a JSON array), those known.
SELECT * FROM people
 WHERE user_id IN (SELECT CAST(value AS bigint) FROM json_array_elements_text(CAST(:ids AS json)))
