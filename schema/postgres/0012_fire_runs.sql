-- Fleet database, migration 12: each fire keeps what its wake's delivery
-- did, as space-file migration 10 does (spec/scheduling.md, *What each fire's record says*).
ALTER TABLE schedule_fires ADD COLUMN settled_ms  BIGINT;
ALTER TABLE schedule_fires ADD COLUMN duration_us BIGINT;
ALTER TABLE schedule_fires ADD COLUMN cpu_us      BIGINT;
ALTER TABLE schedule_fires ADD COLUMN error       TEXT;
ALTER TABLE schedule_fires ADD COLUMN logs        TEXT;
ALTER TABLE schedule_fires ADD COLUMN commit_seq  BIGINT;
