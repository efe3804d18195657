-- A call's worst-case cost, held against its run's and session's budgets from before it
-- is sent until its usage is recorded: budgets are checked against what is spent plus
-- what is held, so concurrent calls cannot all pass a check made before any of them is
-- recorded. A hold left by a process that died keeps counting (it can only refuse early).
CREATE TABLE model_holds (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    session_id TEXT,
    run_id TEXT,
    cost_microusd BIGINT NOT NULL,
    tokens BIGINT NOT NULL
);
CREATE INDEX model_holds_by_session ON model_holds (session_id);
CREATE INDEX model_holds_by_run ON model_holds (run_id);

-- One row per budget (`run:<id>`, `session:<id>`), written first by every hold on it, so
-- holds on one budget take turns: on its row lock on PostgreSQL, on the write lock on
-- SQLite; every process sharing the database agrees.
CREATE TABLE model_budget_locks (
    scope TEXT PRIMARY KEY,
    holds BIGINT NOT NULL
);
