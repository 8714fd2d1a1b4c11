-- name: save
-- Keep what one claim's provider call produced; the first record wins.
INSERT INTO llm_outputs (claim_id, text, model, request_id, error, created_at)
VALUES (:claim_id, :text, :model, :request_id, :error, :now)
    ON CONFLICT (claim_id) DO NOTHING

-- name: get
-- The output recorded for a claim, if any.
SELECT * FROM llm_outputs WHERE claim_id = :claim_id

-- name: prune
-- Outputs older than the cutoff whose claim is over (settled, released or unbudgeted);
-- an uncertain claim's output stays: it is evidence for the operator who reconciles it.
DELETE FROM llm_outputs WHERE claim_id IN (
    SELECT o.claim_id FROM llm_outputs o
     WHERE o.created_at < :cutoff
       AND (SELECT c.state FROM claims c WHERE c.id = o.claim_id)
           IN ('settled', 'released', 'unbudgeted')
     ORDER BY o.created_at LIMIT :batch)
