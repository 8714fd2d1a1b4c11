-- name: size
-- The database's bytes; the free space inside its tables is VACUUM's to reuse, not counted.
SELECT pg_database_size(current_database()), 0
