-- PostgreSQL store, migration 5: the direct-engine plane of every space,
-- in shared tables keyed by `space` like the core's. Its rows are written
-- by index hooks inside a commit's transaction and by plane-only
-- transactions, each under the space row's lock, so a space's plane and
-- its `spaces.next_wake_ms` move together.

-- One row per declared schedule entry of a piece.
CREATE TABLE schedule_index (
    space            TEXT    NOT NULL REFERENCES spaces (id),
    piece            TEXT    NOT NULL,
    entry            INTEGER NOT NULL,
    interval_minutes INTEGER NOT NULL,
    callback_stream  TEXT    NOT NULL,
    declared_at_ms   BIGINT  NOT NULL,
    nominal_period   BIGINT  NOT NULL,
    next_due_ms      BIGINT  NOT NULL,
    status           TEXT    NOT NULL DEFAULT 'active'
                     CHECK (status IN ('active', 'paused', 'dead')),
    attempts         INTEGER NOT NULL DEFAULT 0,
    fired_count      BIGINT  NOT NULL DEFAULT 0,
    missed_count     BIGINT  NOT NULL DEFAULT 0,
    skipped_count    BIGINT  NOT NULL DEFAULT 0,
    last_fired_ms    BIGINT,
    backoff_factor   INTEGER NOT NULL DEFAULT 1,
    unread_fires     INTEGER NOT NULL DEFAULT 0,
    retry_due_ms     BIGINT,
    inflight_event   TEXT,
    output_docs      TEXT,
    output_read      BOOLEAN NOT NULL DEFAULT true,
    PRIMARY KEY (space, piece, entry)
);

-- The newest fires of each entry.
CREATE TABLE schedule_fires (
    space          TEXT    NOT NULL,
    piece          TEXT    NOT NULL,
    entry          INTEGER NOT NULL,
    fired_ms       BIGINT  NOT NULL,
    event_id       TEXT    NOT NULL,
    period         BIGINT  NOT NULL,
    due_ms         BIGINT  NOT NULL,
    missed_periods BIGINT  NOT NULL,
    outcome        TEXT    NOT NULL,
    PRIMARY KEY (space, piece, entry, fired_ms, event_id, outcome)
);

-- Compute spent per bucket and window.
CREATE TABLE compute_ledger (
    space           TEXT   NOT NULL,
    bucket          TEXT   NOT NULL CHECK (bucket IN ('scheduled', 'session')),
    window_start_ms BIGINT NOT NULL,
    cpu_us          BIGINT NOT NULL DEFAULT 0,
    wall_us         BIGINT NOT NULL DEFAULT 0,
    waves           BIGINT NOT NULL DEFAULT 0,
    actions         BIGINT NOT NULL DEFAULT 0,
    commits         BIGINT NOT NULL DEFAULT 0,
    budget_skips    BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (space, bucket, window_start_ms)
);

-- Per-action attribution of metered compute, per window.
CREATE TABLE action_costs (
    space           TEXT   NOT NULL,
    window_start_ms BIGINT NOT NULL,
    piece           TEXT   NOT NULL,
    action          TEXT   NOT NULL,
    kind            TEXT   NOT NULL,
    pattern         TEXT   NOT NULL,
    cpu_us          BIGINT NOT NULL DEFAULT 0,
    wall_us         BIGINT NOT NULL DEFAULT 0,
    runs            BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (space, window_start_ms, piece, action)
);

-- The inputs hash each derivation node last ran on.
CREATE TABLE action_state (
    space       TEXT   NOT NULL,
    node        TEXT   NOT NULL,
    inputs_hash TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    PRIMARY KEY (space, node)
);

-- Per-space policy overrides (a scheduled CPU budget).
CREATE TABLE space_policy (
    space TEXT NOT NULL,
    key   TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (space, key)
);

-- Undelivered events whose waves failed their tenure.
CREATE TABLE event_failures (
    space      TEXT    NOT NULL,
    event_id   TEXT    NOT NULL,
    stream     TEXT    NOT NULL,
    seq        BIGINT  NOT NULL,
    attempts   INTEGER NOT NULL,
    last_error TEXT    NOT NULL,
    last_ms    BIGINT  NOT NULL,
    PRIMARY KEY (space, event_id)
);

-- Events consumed without delivery after their retries.
CREATE TABLE dead_letters (
    space            TEXT    NOT NULL,
    event_id         TEXT    NOT NULL,
    stream           TEXT    NOT NULL,
    seq              BIGINT  NOT NULL,
    payload          TEXT    NOT NULL,
    fired_by         TEXT    NOT NULL,
    attempts         INTEGER NOT NULL,
    error            TEXT    NOT NULL,
    dead_lettered_ms BIGINT  NOT NULL,
    PRIMARY KEY (space, event_id)
);
