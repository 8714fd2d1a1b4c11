-- name: save
-- Keep what one claim's provider call produced; the first record wins.
INSERT INTO llm_outputs (claim_id, text, model, request_id, error, created_at)
VALUES (:claim_id, :text, :model, :request_id, :error, :now)
    ON CONFLICT (claim_id) DO NOTHING

-- name: get
-- The output recorded for a claim, if any.
SELECT * FROM llm_outputs WHERE claim_id = :claim_id

-- name: shown
-- Whether a draft version of the item was made from this claim's output.
SELECT 1 FROM drafts
 WHERE item_id = :item_id AND json_extract(provenance, '$.claim') = :claim_id
 LIMIT 1

-- name: refuse_unshown
-- Refuse every kept, usable output of an item that no draft shows (a fresh draft was asked for).
UPDATE llm_outputs SET error = :error
 WHERE error IS NULL
   AND claim_id IN (SELECT id FROM claims WHERE item_id = :item_id)
   AND NOT EXISTS (SELECT 1 FROM drafts d
                    WHERE d.item_id = :item_id
                      AND json_extract(d.provenance, '$.claim') = llm_outputs.claim_id)

-- name: prune
-- Outputs older than the cutoff whose claim is over (settled, released or unbudgeted);
-- an uncertain claim's output stays: it is evidence for the operator who reconciles it.
DELETE FROM llm_outputs WHERE claim_id IN (
    SELECT o.claim_id FROM llm_outputs o
     WHERE o.created_at < :cutoff
       AND (SELECT c.state FROM claims c WHERE c.id = o.claim_id)
           IN ('settled', 'released', 'unbudgeted')
     ORDER BY o.created_at LIMIT :batch)
