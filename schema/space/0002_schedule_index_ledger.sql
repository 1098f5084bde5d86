-- Space file, migration 2: the rest of the direct-engine plane. Written by
-- index hooks inside commit transactions and by plane-only bookkeeping;
-- never part of a commit.

-- One row per declared [SCHEDULE] entry of a piece.
CREATE TABLE schedule_index (
    space              TEXT    NOT NULL,
    piece              TEXT    NOT NULL,  -- the piece's result document id
    entry              INTEGER NOT NULL,  -- position in the [SCHEDULE] list
    interval_minutes   INTEGER NOT NULL,  -- as declared (60..44640)
    callback_stream    TEXT    NOT NULL,
    declared_at_ms     INTEGER NOT NULL,  -- anchor of the nominal grid
    nominal_period     INTEGER NOT NULL,  -- index of the next nominal grid point
    next_due_ms        INTEGER NOT NULL,  -- nominal time + jitter (+ back-off)
    status             TEXT    NOT NULL DEFAULT 'active'
                       CHECK (status IN ('active', 'paused', 'dead')),
    attempts           INTEGER NOT NULL DEFAULT 0,  -- failed deliveries of the current occurrence
    fired_count        INTEGER NOT NULL DEFAULT 0,
    missed_count       INTEGER NOT NULL DEFAULT 0,  -- periods coalesced after downtime
    skipped_count      INTEGER NOT NULL DEFAULT 0,  -- wakes declined for budget
    last_fired_ms      INTEGER,
    backoff_factor     INTEGER NOT NULL DEFAULT 1,  -- 1, 2, 4, ... up to the cap
    unread_fires       INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (piece, entry)
) WITHOUT ROWID;
CREATE INDEX schedule_index_due ON schedule_index (next_due_ms) WHERE status = 'active';

-- Compute spent per bucket ('scheduled' | 'session') and window.
CREATE TABLE compute_ledger (
    space           TEXT    NOT NULL,
    bucket          TEXT    NOT NULL CHECK (bucket IN ('scheduled', 'session')),
    window_start_ms INTEGER NOT NULL,
    cpu_us          INTEGER NOT NULL DEFAULT 0,
    wall_us         INTEGER NOT NULL DEFAULT 0,
    waves           INTEGER NOT NULL DEFAULT 0,
    actions         INTEGER NOT NULL DEFAULT 0,
    commits         INTEGER NOT NULL DEFAULT 0,
    budget_skips    INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (bucket, window_start_ms)
) WITHOUT ROWID;

-- Per-space policy overrides (e.g. a scheduled CPU budget), set by operators.
CREATE TABLE space_policy (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;
