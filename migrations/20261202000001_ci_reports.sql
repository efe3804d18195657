-- Failures of other checks on the heads planwright pushed, one report (and comment) per
-- commit and source, kept distilled so that the next round on the pull request gets
-- them as evidence.
CREATE TABLE ci_reports (
    forge TEXT NOT NULL,
    repo TEXT NOT NULL,
    sha TEXT NOT NULL,
    -- `check_suite:<id>`, `status:<context>`, `pipeline:<id>`.
    source TEXT NOT NULL,
    session_id TEXT NOT NULL,
    pull_number BIGINT NOT NULL,
    evidence TEXT NOT NULL,
    -- The contract version whose round was given it; NULL until one was.
    taken_by BIGINT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (forge, repo, sha, source)
);
CREATE INDEX ci_reports_by_session ON ci_reports (session_id);
-- A failed check names a commit: finding the session that pushed it must not scan runs.
CREATE INDEX runs_by_head ON runs (head_sha);
