-- The environment each run used: `reference@digest` of its image, or `host`, so a run
-- can be reproduced and the pull request can say where its results came from.
ALTER TABLE runs ADD COLUMN environment TEXT;
