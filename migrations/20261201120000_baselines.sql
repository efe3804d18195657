-- Baseline runs kept for reuse: every command's run on a base commit, keyed by what decides
-- them (repository, base commit, environment, setup, commands), so a `/retry`, a
-- `/revise` or another issue planned on the same commit does not run the base again.
CREATE TABLE baselines (
    cache_key TEXT PRIMARY KEY,
    runs TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    used_at BIGINT NOT NULL
);
