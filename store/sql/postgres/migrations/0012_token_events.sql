-- Trigger tokens are created and revoked with an audit event each (entity "token").
ALTER TABLE events DROP CONSTRAINT events_entity_check;
ALTER TABLE events ADD CONSTRAINT events_entity_check
    CHECK (entity IN ('item', 'claim', 'budget', 'pipeline', 'token'));
