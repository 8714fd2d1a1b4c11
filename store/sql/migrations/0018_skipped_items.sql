-- Entries a pipeline's triage scored below its threshold end in `skipped` (store/machine.py
-- declares it; tests/store/test_machine.py checks this list against the declaration).
--
-- As in 0016: adding a value to the CHECK changes nothing on disk, so the table's text is
-- edited, RESET reloads this connection's schema, and the ALTER TABLE after it bumps the
-- schema cookie so every other connection reloads it too.
PRAGMA writable_schema = ON;

UPDATE sqlite_schema
   SET sql = replace(sql, '''breach'', ''filtered'')', '''breach'', ''filtered'', ''skipped'')')
 WHERE type = 'table' AND name = 'items';

PRAGMA writable_schema = RESET;

ALTER TABLE pipeline_runs ADD COLUMN skipped INTEGER NOT NULL DEFAULT 0;
