-- Executions ("runs") carry their lane: the installation (GitHub) or top-level group
-- (GitLab) they work for. Lanes take turns for run slots, least recently served first,
-- and MAX_RUNS_PER_INSTALLATION bounds how many of one lane run at once.
ALTER TABLE jobs ADD COLUMN lane TEXT;
CREATE INDEX jobs_by_lane ON jobs (lane, state);

CREATE TABLE lanes (
    lane TEXT PRIMARY KEY,
    -- The turn in which a run of this lane was last started: one more than the latest
    -- turn of any lane, so the lane served longest ago goes next.
    turn BIGINT NOT NULL
);
