-- Space file, migration 4: delivery state of schedule entries and a bounded
-- history of their fires.

-- A failed occurrence waits for its retry here (1, 5, 30 minutes); the
-- directory's next wake covers it. NULL: no retry pending.
ALTER TABLE schedule_index ADD COLUMN retry_due_ms INTEGER;
-- The wake event whose delivery is under way: recorded durably before its
-- handler runs, so a process that dies mid-wave is seen as a failed attempt
-- at the next activation instead of a crash loop.
ALTER TABLE schedule_index ADD COLUMN inflight_event TEXT;
-- What the entry's last delivered wave wrote (a JSON array of document ids)
-- and whether a session has read any of it since: unread output backs the
-- entry off.
ALTER TABLE schedule_index ADD COLUMN output_docs TEXT;
ALTER TABLE schedule_index ADD COLUMN output_read INTEGER NOT NULL DEFAULT 1;
DROP INDEX schedule_index_due;
CREATE INDEX schedule_index_due ON schedule_index (next_due_ms) WHERE status = 'active';
CREATE INDEX schedule_index_retry ON schedule_index (retry_due_ms) WHERE retry_due_ms IS NOT NULL;

-- The most recent fires of each entry (the host keeps the last 20).
CREATE TABLE schedule_fires (
    piece          TEXT    NOT NULL,
    entry          INTEGER NOT NULL,
    fired_ms       INTEGER NOT NULL,
    event_id       TEXT    NOT NULL,
    period         INTEGER NOT NULL,
    due_ms         INTEGER NOT NULL,
    missed_periods INTEGER NOT NULL,
    outcome        TEXT    NOT NULL,  -- fired | retried | suppressed | skippedBudget | failed | deadLettered
    PRIMARY KEY (piece, entry, fired_ms, event_id, outcome)
) WITHOUT ROWID;
