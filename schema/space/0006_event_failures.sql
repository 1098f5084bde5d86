-- Space file, migration 6: events whose wave failed its tenure, and the
-- dead letters an event becomes after its retries (spec/serving-loop.md,
-- *Dead letters*).

-- One row per undelivered event that was in a wave that failed its tenure
-- (commit refused, lease lost, the wave outliving its lease). Deleted when
-- the event is delivered or dead-lettered.
CREATE TABLE event_failures (
    event_id   TEXT    PRIMARY KEY,
    stream     TEXT    NOT NULL,
    seq        INTEGER NOT NULL,    -- the commit that appended the event
    attempts   INTEGER NOT NULL,    -- failed waves it was in
    last_error TEXT    NOT NULL,
    last_ms    INTEGER NOT NULL
) WITHOUT ROWID;

-- Events consumed without delivery after their retries: the watermark moved
-- past them in the transaction that wrote the row.
CREATE TABLE dead_letters (
    event_id          TEXT    PRIMARY KEY,
    stream            TEXT    NOT NULL,
    seq               INTEGER NOT NULL,
    payload           TEXT    NOT NULL,  -- JSON
    fired_by          TEXT    NOT NULL,
    attempts          INTEGER NOT NULL,
    error             TEXT    NOT NULL,  -- the last failure
    dead_lettered_ms  INTEGER NOT NULL
) WITHOUT ROWID;
