-- What planner sessions need beyond the foundation: the planner's dossier (so a restarted
-- planning job resumes), the stage a failed session resumes with /retry, and where each
-- contract comment can be read.
ALTER TABLE sessions ADD COLUMN dossier TEXT;
ALTER TABLE sessions ADD COLUMN resume_state TEXT;
ALTER TABLE contracts ADD COLUMN comment_url TEXT;
