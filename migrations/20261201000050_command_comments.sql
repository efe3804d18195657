-- A command is carried out once per comment, however many deliveries carry it: the
-- delivery id is the sender's word, the comment id is the forge's.
CREATE TABLE command_comments (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    comment_id BIGINT NOT NULL,
    -- The delivery that claimed the comment: its own retries may carry on.
    delivery_id TEXT,
    claimed_at BIGINT NOT NULL,
    PRIMARY KEY (forge, repo, comment_id)
);
-- When the forge says a contract's comment was written (seconds since the epoch, the
-- forge's clock): an `/approve` written before it cannot be about that version.
ALTER TABLE contracts ADD COLUMN comment_created_at BIGINT;
