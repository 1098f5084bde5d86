-- PostgreSQL store, migration 7: each undelivered occurrence of a schedule
-- entry keeps its own delivery state, as in the space files' migration 8
-- (a JSON array, oldest first; NULL when nothing is pending). `attempts`,
-- `retry_due_ms` and `inflight_event` stay as its summary; `retry_due_ms`
-- is what the wake directory reads.
ALTER TABLE schedule_index ADD COLUMN pending TEXT;
