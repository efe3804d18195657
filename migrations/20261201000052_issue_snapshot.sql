-- The issue's title and text when planwright was asked to start (the label, or `/plan`):
-- the planner reads these, so an edit after the maintainer's decision is not planned
-- from unseen. NULL for sessions started before this was recorded.
ALTER TABLE sessions ADD COLUMN issue_title TEXT;
ALTER TABLE sessions ADD COLUMN issue_body TEXT;
