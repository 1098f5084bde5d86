-- Space file, migration 10: each fire keeps what its wake's delivery did
-- (spec/scheduling.md, *What each fire's record says*). A fire is written `fired` (or
-- `retried`) with its wake and settled in the wave's own transaction as
-- `delivered`, `failed` or `deadLettered`, with the callback's wall and CPU
-- time, the error that failed it, the lines it logged (a JSON array of
-- {level, text}, at most 20 of 500 characters) and the commit it made.
ALTER TABLE schedule_fires ADD COLUMN settled_ms  INTEGER;
ALTER TABLE schedule_fires ADD COLUMN duration_us INTEGER;
ALTER TABLE schedule_fires ADD COLUMN cpu_us      INTEGER;
ALTER TABLE schedule_fires ADD COLUMN error       TEXT;
ALTER TABLE schedule_fires ADD COLUMN logs        TEXT;
ALTER TABLE schedule_fires ADD COLUMN commit_seq  INTEGER;
