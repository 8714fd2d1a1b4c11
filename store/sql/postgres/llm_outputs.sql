-- name: shown
-- Whether a draft version of the item was made from this claim's output.
SELECT 1 FROM drafts
 WHERE item_id = :item_id
   AND CAST(CAST(provenance AS json) ->> 'claim' AS bigint) = CAST(:claim_id AS bigint)
 LIMIT 1

-- name: refuse_unshown
-- Refuse every kept, usable output of an item that no draft shows (a fresh draft was asked for).
UPDATE llm_outputs SET error = :error
 WHERE error IS NULL
   AND claim_id IN (SELECT id FROM claims WHERE item_id = :item_id)
   AND NOT EXISTS (SELECT 1 FROM drafts d
                    WHERE d.item_id = :item_id
                      AND CAST(CAST(d.provenance AS json) ->> 'claim' AS bigint) = llm_outputs.claim_id)
