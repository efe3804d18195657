-- Secrets the deployment makes for itself and shares between its processes (the key of
-- the pages' session cookie).
CREATE TABLE secrets (
    name TEXT PRIMARY KEY,
    value TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
