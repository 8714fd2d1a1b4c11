-- The Edit prompts the bot has asked and not yet seen answered: an operator's reply to
-- one names the prompt's message, and this row says which item and draft version it
-- replaces. Kept here, not in the bot's memory, so a reply after a restart still works.

CREATE TABLE edit_prompts (
    chat_id    BIGINT NOT NULL,
    message_id BIGINT NOT NULL,
    item_id    BIGINT NOT NULL REFERENCES items (id),
    version    BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (chat_id, message_id)
);
