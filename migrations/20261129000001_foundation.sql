-- The foundation: the webhook inbox, the durable job queue, sessions with their contracts
-- and runs, installations, and the append-only audit log.
-- Portable between SQLite and PostgreSQL: TEXT ids, BIGINT milliseconds since the epoch.

CREATE TABLE deliveries (
    id TEXT PRIMARY KEY,
    forge TEXT NOT NULL,
    -- The forge's delivery id (GitHub X-GitHub-Delivery, GitLab Idempotency-Key or
    -- X-Gitlab-Event-UUID); a delivery without one gets our id here.
    delivery_key TEXT NOT NULL,
    event TEXT NOT NULL,
    action TEXT,
    repo TEXT,
    installation_id BIGINT,
    -- queued: acted on, jobs enqueued; ignored: accepted, nothing to do;
    -- rejected: signature valid but the body could not be read (see error).
    status TEXT NOT NULL,
    error TEXT,
    payload TEXT NOT NULL,
    received_at BIGINT NOT NULL,
    UNIQUE (forge, delivery_key)
);
CREATE INDEX deliveries_by_time ON deliveries (received_at);

CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    payload TEXT NOT NULL,
    -- queued | running | done | dead
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL,
    max_attempts BIGINT NOT NULL,
    run_at BIGINT NOT NULL,
    -- A fresh token per claim: only its holder may heartbeat or finish the job.
    lease_token TEXT,
    lease_owner TEXT,
    lease_expires_at BIGINT,
    last_error TEXT,
    delivery_id TEXT REFERENCES deliveries (id),
    session_id TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    finished_at BIGINT
);
CREATE INDEX jobs_ready ON jobs (state, run_at);
CREATE INDEX jobs_leases ON jobs (state, lease_expires_at);
CREATE INDEX jobs_by_delivery ON jobs (delivery_id);

CREATE TABLE installations (
    forge TEXT NOT NULL,
    installation_id BIGINT NOT NULL,
    account TEXT NOT NULL,
    -- active | suspended | deleted
    state TEXT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (forge, installation_id)
);

CREATE TABLE installation_repositories (
    forge TEXT NOT NULL,
    installation_id BIGINT NOT NULL,
    repo TEXT NOT NULL,
    added_at BIGINT NOT NULL,
    PRIMARY KEY (forge, installation_id, repo)
);

CREATE TABLE sessions (
    id TEXT PRIMARY KEY,
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    issue_number BIGINT NOT NULL,
    installation_id BIGINT,
    state TEXT NOT NULL,
    -- 1 until the session ends; at most one active session per issue.
    active BIGINT NOT NULL,
    triggered_by TEXT NOT NULL,
    status_comment_id TEXT,
    failure TEXT,
    cost_microusd BIGINT NOT NULL DEFAULT 0,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);
CREATE UNIQUE INDEX sessions_one_active_per_issue
    ON sessions (forge, repo, issue_number) WHERE active = 1;

CREATE TABLE contracts (
    session_id TEXT NOT NULL REFERENCES sessions (id),
    version BIGINT NOT NULL,
    sha256 TEXT NOT NULL,
    body TEXT NOT NULL,
    base_branch TEXT NOT NULL,
    base_sha TEXT NOT NULL,
    comment_id TEXT,
    created_at BIGINT NOT NULL,
    superseded_at BIGINT,
    approved_by TEXT,
    approved_at BIGINT,
    PRIMARY KEY (session_id, version)
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY,
    session_id TEXT NOT NULL REFERENCES sessions (id),
    contract_version BIGINT NOT NULL,
    attempt BIGINT NOT NULL,
    executor TEXT NOT NULL,
    state TEXT NOT NULL,
    branch TEXT,
    head_sha TEXT,
    input_tokens BIGINT NOT NULL DEFAULT 0,
    output_tokens BIGINT NOT NULL DEFAULT 0,
    cost_microusd BIGINT NOT NULL DEFAULT 0,
    report TEXT,
    started_at BIGINT NOT NULL,
    finished_at BIGINT
);
CREATE INDEX runs_by_session ON runs (session_id);

-- Who decided and who did what. Rows are only ever inserted.
CREATE TABLE audit_log (
    id TEXT PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    session_id TEXT,
    delivery_id TEXT,
    detail TEXT NOT NULL
);
CREATE INDEX audit_by_session ON audit_log (session_id, at);
