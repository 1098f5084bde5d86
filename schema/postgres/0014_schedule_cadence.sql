-- Fleet database, migration 14: an entry's shape beside `interval_minutes`
-- (see the space file's migration 12): NULL for an interval, else JSON
-- written by `schedule::cadence`, opaque to the store.
ALTER TABLE schedule_index ADD COLUMN cadence TEXT;
