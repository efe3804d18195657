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

-- The claim's search for the oldest due job reads this index in order instead of
-- sorting every due job.
CREATE INDEX jobs_due ON jobs (state, run_at, id);
-- Runs are few among the jobs: their search reads only them.
CREATE INDEX jobs_runs_due ON jobs (state, run_at) WHERE lane IS NOT NULL;
-- jobs_due reads in the same order and more.
DROP INDEX jobs_ready;
