-- How many items each pipeline has in each state, kept by triggers as items are created
-- and move, so /metrics and /status read a few rows instead of counting a million. A
-- count is the sum of its slots: one writer (slot 0) here; PostgreSQL's connections
-- each add to a slot of their own, so concurrent writers never wait on one counter row.

CREATE TABLE item_counts (
    pipeline TEXT NOT NULL,
    state    TEXT NOT NULL,
    slot     INTEGER NOT NULL,
    n        INTEGER NOT NULL,
    PRIMARY KEY (pipeline, state, slot)
) WITHOUT ROWID;

INSERT INTO item_counts (pipeline, state, slot, n)
SELECT pipeline, state, 0, count(*) FROM items GROUP BY pipeline, state;

CREATE TRIGGER items_counted AFTER INSERT ON items
BEGIN
    INSERT INTO item_counts (pipeline, state, slot, n) VALUES (new.pipeline, new.state, 0, 1)
        ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = n + 1;
END;

CREATE TRIGGER items_counted_moved AFTER UPDATE OF state ON items
WHEN old.state IS NOT new.state
BEGIN
    INSERT INTO item_counts (pipeline, state, slot, n) VALUES (old.pipeline, old.state, 0, -1)
        ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = n - 1;
    INSERT INTO item_counts (pipeline, state, slot, n) VALUES (new.pipeline, new.state, 0, 1)
        ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = n + 1;
END;
