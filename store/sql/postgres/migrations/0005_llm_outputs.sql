-- What a paid LLM call produced, kept with its budget claim: a retry of the same
-- attempt reuses it instead of paying twice, and an output that failed validation
-- stays here for the operator to read (`error` says why it was refused).

CREATE TABLE llm_outputs (
    claim_id   BIGINT PRIMARY KEY REFERENCES claims (id),
    text       TEXT NOT NULL,
    model      TEXT NOT NULL,
    request_id TEXT,
    error      TEXT,
    created_at BIGINT NOT NULL
);
