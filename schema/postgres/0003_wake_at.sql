-- PostgreSQL store, migration 3: one column saying when a space next needs
-- a host — now (0) while it has undelivered events, else its next wake —
-- kept by the database itself, so the fleet's claim reads due spaces in
-- that order straight from one index instead of sorting every candidate.

ALTER TABLE spaces ADD COLUMN wake_at_ms BIGINT
    GENERATED ALWAYS AS (CASE WHEN undelivered THEN 0 ELSE next_wake_ms END) STORED;
CREATE INDEX spaces_wake_at ON spaces (wake_at_ms)
    WHERE wake_at_ms IS NOT NULL AND quarantined IS NULL;
-- The claim no longer reads these.
DROP INDEX spaces_due;
DROP INDEX spaces_undelivered;
