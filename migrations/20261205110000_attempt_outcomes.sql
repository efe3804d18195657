-- The executor model an attempt ran on (`provider:model`; NULL for the command executor,
-- which names none, and for runs from before it was recorded) and the rung of the
-- executor ladder it ran on (0: the first).
ALTER TABLE runs ADD COLUMN model TEXT;
ALTER TABLE runs ADD COLUMN rung BIGINT NOT NULL DEFAULT 0;

-- One row per attempt that ended, verified or not: what routing learns from and what a
-- repository's page and `/metrics` show. Written when the attempt's run ends (source
-- `run`) or by an evaluation (`eval`); kept per repository, so one repository's record
-- never routes another's. No foreign keys: an evaluation's attempts have no session.
CREATE TABLE attempt_outcomes (
    run_id TEXT PRIMARY KEY,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    session_id TEXT,
    contract_version BIGINT,
    -- low | medium | high
    risk TEXT NOT NULL,
    executor TEXT NOT NULL,
    model TEXT,
    rung BIGINT NOT NULL DEFAULT 0,
    -- 1: verification passed and the reviewer accepted.
    verified BIGINT NOT NULL,
    -- 1 when the attempt came to a judgement of the model's work (verified, failed its
    -- checks, refused, rejected, or stopped without a result); 0 when it was cancelled
    -- or the infrastructure failed it: those say nothing of the model.
    judged BIGINT NOT NULL,
    -- Why it was not verified, in a few words; NULL when it was.
    why_not TEXT,
    -- accepted | rejected | none (no review)
    verdict TEXT NOT NULL,
    attempt BIGINT NOT NULL,
    planner_tokens BIGINT NOT NULL DEFAULT 0,
    planner_microusd BIGINT NOT NULL DEFAULT 0,
    scout_tokens BIGINT NOT NULL DEFAULT 0,
    scout_microusd BIGINT NOT NULL DEFAULT 0,
    executor_tokens BIGINT NOT NULL DEFAULT 0,
    executor_microusd BIGINT NOT NULL DEFAULT 0,
    reviewer_tokens BIGINT NOT NULL DEFAULT 0,
    reviewer_microusd BIGINT NOT NULL DEFAULT 0,
    wall_ms BIGINT NOT NULL,
    -- NULL when the attempt's checkout could not be read.
    files_changed BIGINT,
    -- run | eval
    source TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX attempt_outcomes_by_repo ON attempt_outcomes (forge, repo, risk, created_at);
