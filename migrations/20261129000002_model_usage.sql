-- One row per model call: who it was for (session, run, role), which model, the tokens
-- it used by kind and what they cost. Sessions' and runs' totals are sums over these rows.
-- No foreign keys: a call may be made before its session row exists (e.g. `solve`).

CREATE TABLE model_usage (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    session_id TEXT,
    run_id TEXT,
    -- planner | scout | executor | reviewer
    role TEXT NOT NULL,
    provider TEXT NOT NULL,
    model TEXT NOT NULL,
    input_tokens BIGINT NOT NULL,
    output_tokens BIGINT NOT NULL,
    cache_read_tokens BIGINT NOT NULL,
    cache_write_tokens BIGINT NOT NULL,
    cost_microusd BIGINT NOT NULL
);
CREATE INDEX model_usage_by_session ON model_usage (session_id, at);
CREATE INDEX model_usage_by_run ON model_usage (run_id, at);
