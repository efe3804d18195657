-- The work waiting for a worker, for autoscalers (KEDA's PostgreSQL scaler, or anything
-- that runs SQL). A stable interface: its name and columns keep their meaning across
-- releases, whatever happens to the tables behind it (README, "Running on Kubernetes").
-- Runs are executions (jobs with a lane), which take MAX_RUNS slots per worker; jobs are
-- every other job (webhooks' follow-ups, planning, publishing), which take WORKERS slots.
-- Waiting counts queued ones, those held back for a retry's backoff or a rate limit's
-- reset included; running counts those a worker holds a lease on.
CREATE VIEW planwright_work_waiting AS
SELECT
    (SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND lane IS NOT NULL) AS runs_waiting,
    (SELECT COUNT(*) FROM jobs WHERE state = 'running' AND lane IS NOT NULL) AS runs_running,
    (SELECT COUNT(*) FROM jobs WHERE state = 'queued' AND lane IS NULL) AS jobs_waiting,
    (SELECT COUNT(*) FROM jobs WHERE state = 'running' AND lane IS NULL) AS jobs_running;
