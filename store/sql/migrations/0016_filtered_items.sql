-- Entries a pipeline's filter dropped: items end in `filtered` (store/machine.py declares
-- it; tests/store/test_machine.py checks this list against the declaration), and each
-- run counts them.
--
-- SQLite cannot alter a CHECK in place; adding a value to the list changes nothing on
-- disk (every stored row still passes), so the table's text is edited as SQLite's own
-- ALTER TABLE documentation allows, then RESET reloads this connection's schema and the
-- ALTER TABLE after it bumps the schema cookie, so every other connection reloads it too.
PRAGMA writable_schema = ON;

UPDATE sqlite_schema
   SET sql = replace(sql, '''failed'', ''breach'')', '''failed'', ''breach'', ''filtered'')')
 WHERE type = 'table' AND name = 'items';

PRAGMA writable_schema = RESET;

ALTER TABLE pipeline_runs ADD COLUMN filtered INTEGER NOT NULL DEFAULT 0;
