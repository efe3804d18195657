-- What carrying out a contract needs beyond the foundation's runs table: where a run's
-- workspace is (so publishing resumes after a restart with the very result it verified)
-- and what its verification and review found (JSON, rendered again when publishing).
ALTER TABLE runs ADD COLUMN workspace TEXT;
ALTER TABLE runs ADD COLUMN outcome TEXT;
-- 1 once `/retry` gave the contract version fresh attempts: the run no longer counts
-- against `max_attempts`.
ALTER TABLE runs ADD COLUMN retired BIGINT NOT NULL DEFAULT 0;
-- The pull (merge) request a session published, so `/revise` on it finds the session.
ALTER TABLE sessions ADD COLUMN pull_number BIGINT;
