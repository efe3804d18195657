-- The repository's settings as the contract's base commit held them (JSON), recorded at
-- planning and carried out after approval instead of the default branch's. NULL for
-- contracts planned before this was recorded: those read the settings at run time.
ALTER TABLE contracts ADD COLUMN settings TEXT;
