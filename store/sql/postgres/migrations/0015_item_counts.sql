-- How many items each pipeline has in each state, kept by triggers as items are created
-- and move, so /metrics and /status read a few rows instead of counting a million. A
-- count is the sum of its slots: each connection adds to a slot of its own (its backend
-- pid), so concurrent writers never wait on one counter row.

CREATE TABLE item_counts (
    pipeline TEXT NOT NULL,
    state    TEXT NOT NULL,
    slot     INTEGER NOT NULL,
    n        BIGINT NOT NULL,
    PRIMARY KEY (pipeline, state, slot)
);

INSERT INTO item_counts (pipeline, state, slot, n)
SELECT pipeline, state, 0, count(*) FROM items GROUP BY pipeline, state;

CREATE FUNCTION items_count() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    mine INTEGER := pg_backend_pid() % 64;
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.state IS NOT DISTINCT FROM NEW.state THEN
            RETURN NULL;
        END IF;
        INSERT INTO item_counts (pipeline, state, slot, n) VALUES (OLD.pipeline, OLD.state, mine, -1)
            ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = item_counts.n - 1;
    END IF;
    INSERT INTO item_counts (pipeline, state, slot, n) VALUES (NEW.pipeline, NEW.state, mine, 1)
        ON CONFLICT (pipeline, state, slot) DO UPDATE SET n = item_counts.n + 1;
    RETURN NULL;
END;
$$;

CREATE TRIGGER items_counted AFTER INSERT OR UPDATE OF state ON items
    FOR EACH ROW EXECUTE FUNCTION items_count();
