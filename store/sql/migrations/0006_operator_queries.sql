-- Indexes shaped for the operator's questions, and retention's own lookups.

-- /pending: items of one state, the longest-waiting first, read straight off the index.
CREATE INDEX items_pending ON items (state, last_transition_at, id);

-- /budget: spend by pipeline since the period began, without reading the claim rows.
CREATE INDEX claims_by_created ON claims (created_at, pipeline, state, actual_micros, reserved_micros);

-- Retention: provider outputs past their age, oldest first.
CREATE INDEX llm_outputs_by_age ON llm_outputs (created_at);

-- Retention: sent messages by age (never dispatch rows, kept as the record of what went
-- out, so they stay out of this index and it stays as small as what awaits pruning).
CREATE INDEX outbox_prunable ON outbox (state, sent_at) WHERE kind != 'dispatch';

-- A card no longer repeats its draft's text: readers join the draft row instead.
UPDATE outbox SET payload = json_remove(payload, '$.text') WHERE kind = 'card';
