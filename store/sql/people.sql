-- name: remember
-- Keep an operator's names as their latest update gave them.
INSERT INTO people (user_id, first_name, username, updated_at)
VALUES (:user_id, :first_name, :username, :now)
    ON CONFLICT (user_id)
    DO UPDATE SET first_name = excluded.first_name, username = excluded.username,
                  updated_at = excluded.updated_at

-- name: many
-- The people with these ids (a JSON array), those known.
SELECT * FROM people WHERE user_id IN (SELECT value FROM json_each(:ids))
