-- The tells of a draft version (pipelines/voice/sidecar.py: the card's line, whether one
-- blocks, and the hits as [rule, label, severity, start, end]), kept beside its text so
-- its card, its replay and the check before it goes out read what its drafting found;
-- NULL: none.

ALTER TABLE drafts ADD COLUMN tells TEXT CHECK (tells IS NULL OR json_valid(tells));
