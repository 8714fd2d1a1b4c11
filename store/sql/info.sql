-- name: schema_version
-- The newest migration applied.
SELECT coalesce(max(version), 0) FROM schema_migrations

-- name: size
-- The database's bytes, and those of them free for reuse (after pruning).
SELECT p.page_count * s.page_size, f.freelist_count * s.page_size
  FROM pragma_page_count() p, pragma_page_size() s, pragma_freelist_count() f
