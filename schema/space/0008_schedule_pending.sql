-- Space file, migration 8: each undelivered occurrence of a schedule entry
-- keeps its own delivery state (spec/scheduling.md, *Delivery*), so two
-- occurrences that fail close together are both retried. A JSON array of
-- {occurrence, period, attempts, inflight, retryDueMs}, oldest first; NULL
-- when nothing is pending. `attempts`, `retry_due_ms` and `inflight_event`
-- stay as its summary (the most attempts, the earliest retry, the newest
-- event in flight); `retry_due_ms` is what the wake directory reads. A row
-- written before this migration has its one occurrence in those columns
-- and is read as that one pending occurrence.
ALTER TABLE schedule_index ADD COLUMN pending TEXT;
