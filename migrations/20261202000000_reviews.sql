-- Each pull request review planwright acted on, claimed once (in the transaction that
-- starts its round, or before its one refusal), so a redelivered webhook acts on nothing.
CREATE TABLE reviews (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    review_id BIGINT NOT NULL,
    session_id TEXT NOT NULL,
    -- The contract version the review's round plans; NULL when it started none.
    version BIGINT,
    -- A review that arrived while a round was running waits here (its feedback, the
    -- inline comments it owes answers and its author, as JSON) until the run ends.
    queued TEXT,
    claimed_at BIGINT NOT NULL,
    PRIMARY KEY (forge, repo, review_id)
);

-- The inline comments a revision round was asked to address, answered in their own
-- threads once the round is published.
CREATE TABLE review_comments (
    session_id TEXT NOT NULL,
    version BIGINT NOT NULL,
    comment_id BIGINT NOT NULL,
    -- The forge's thread of the comment (a GitLab discussion); NULL on GitHub.
    thread TEXT,
    path TEXT NOT NULL,
    answered_at BIGINT,
    PRIMARY KEY (session_id, version, comment_id)
);
