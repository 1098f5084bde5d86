-- Space file, migration 12: an entry's shape beside `interval_minutes`.
-- NULL for an interval (every row before this migration); for a calendar
-- entry, JSON written by `schedule::cadence` ({"cron": "...", "timeZone":
-- "..."}) with `interval_minutes` 0. The store keeps it opaque.
ALTER TABLE schedule_index ADD COLUMN cadence TEXT;
