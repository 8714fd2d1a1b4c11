-- Entries a pipeline's filter dropped: items end in `filtered` (store/machine.py declares
-- it; tests/store/test_machine.py checks this list against the declaration), and each
-- run counts them.
ALTER TABLE items DROP CONSTRAINT items_state_check;
ALTER TABLE items ADD CONSTRAINT items_state_check CHECK (state IN ('new', 'drafting', 'awaiting_approval', 'approved', 'dispatching', 'dispatched', 'rejected', 'expired', 'failed', 'breach', 'filtered'));

ALTER TABLE pipeline_runs ADD COLUMN filtered BIGINT NOT NULL DEFAULT 0;
