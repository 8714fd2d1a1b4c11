-- Indexes shaped for the operator's questions and retention's own lookups, and the
-- bytes every item keeps for good cut down.

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
UPDATE outbox SET payload = (payload::jsonb - 'text')::text WHERE kind = 'card';

-- Only pending rows wait to be sent: sent and failed ones leave the index that lists
-- them, kind by kind in the order they are sent (a dispatch backlog never slows the
-- Telegram sender's look, nor the other way round).
DROP INDEX outbox_due;
CREATE INDEX outbox_due ON outbox (kind, id, next_attempt_at) WHERE state = 'pending';

-- Events without UNIQUE (hash), and new events without a copy of the previous event's
-- hash (readers derive it from the event before; every hash still covers it). The
-- index cost a third of each event's bytes and the copy another fifth, and neither
-- guarded anything the chain does not: ids are the primary key and order the chain,
-- and verification recomputes every hash.
ALTER TABLE events DROP CONSTRAINT events_hash_key;
ALTER TABLE events ALTER COLUMN prev_hash DROP NOT NULL;
