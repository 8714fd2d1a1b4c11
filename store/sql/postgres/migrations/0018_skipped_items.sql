-- Entries a pipeline's triage scored below its threshold end in `skipped` (store/machine.py
-- declares it; tests/store/test_machine.py checks this list against the declaration).
ALTER TABLE items DROP CONSTRAINT items_state_check;
ALTER TABLE items ADD CONSTRAINT items_state_check CHECK (state IN ('new', 'drafting', 'awaiting_approval', 'approved', 'dispatching', 'dispatched', 'rejected', 'expired', 'failed', 'breach', 'filtered', 'skipped'));

ALTER TABLE pipeline_runs ADD COLUMN skipped BIGINT NOT NULL DEFAULT 0;
