-- name: save
-- Keep what one claim's provider call produced; the first record wins.
INSERT INTO llm_outputs (claim_id, text, model, request_id, error, created_at)
VALUES (:claim_id, :text, :model, :request_id, :error, :now)
    ON CONFLICT (claim_id) DO NOTHING

-- name: get
-- The output recorded for a claim, if any.
SELECT * FROM llm_outputs WHERE claim_id = :claim_id
