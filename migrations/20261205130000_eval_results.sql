-- One row per finished run of an evaluation (`planwright eval`): which task, arm and
-- repeat, its grade and planwright's verdict, and the whole record as JSON. A row is
-- written only once the run is graded, so an interrupted evaluation starts again from
-- the runs without one and never pays twice for a finished one.

CREATE TABLE eval_results (
    evaluation TEXT NOT NULL,
    task TEXT NOT NULL,
    arm TEXT NOT NULL,
    repeat_no BIGINT NOT NULL,
    at BIGINT NOT NULL,
    -- resolved | unresolved | no_verdict
    grade TEXT NOT NULL,
    cost_microusd BIGINT NOT NULL,
    record TEXT NOT NULL,
    PRIMARY KEY (evaluation, task, arm, repeat_no)
);
