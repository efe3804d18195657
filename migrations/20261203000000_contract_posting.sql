-- Set before a contract's comment is posted: a retry after a crash looks for the comment
-- only when a post may have been made.
ALTER TABLE contracts ADD COLUMN posting INTEGER NOT NULL DEFAULT 0;
