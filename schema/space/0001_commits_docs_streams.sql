-- Space file, migration 1: the commit log, document heads, stream events
-- and the execution lease. One SQLite file per space; `PRAGMA user_version`
-- records the last applied migration.

-- One row per commit. `seq` is space-global, gap-free and assigned inside the
-- committing transaction as max(seq) + 1.
CREATE TABLE commits (
    seq        INTEGER PRIMARY KEY,
    class      TEXT    NOT NULL CHECK (class IN ('authored', 'derived', 'system')),
    principal  TEXT    NOT NULL,          -- did:key of the author, or 'server'
    session    TEXT,                      -- session id when a client authored it
    at_ms      INTEGER NOT NULL,          -- injected-clock time of the commit
    op_count   INTEGER NOT NULL,
    event_count INTEGER NOT NULL
);

-- The operations of each commit, in order: the replayable log that clients
-- resume from. `value` is the JSON written (NULL for a delete).
CREATE TABLE commit_ops (
    seq     INTEGER NOT NULL REFERENCES commits(seq),
    idx     INTEGER NOT NULL,
    doc_id  TEXT    NOT NULL,
    op      TEXT    NOT NULL CHECK (op IN ('set', 'patch', 'delete')),
    path    TEXT,                         -- JSON array of segments, for a patch
    value   TEXT,
    PRIMARY KEY (seq, idx)
) WITHOUT ROWID;

-- Current head of every document: its value, the seq that wrote it and a
-- per-document revision counter. A deleted document keeps its row (value
-- NULL) so its revision history stays monotonic.
CREATE TABLE docs (
    id     TEXT    PRIMARY KEY,
    value  TEXT,
    seq    INTEGER NOT NULL,
    rev    INTEGER NOT NULL
) WITHOUT ROWID;

-- Every event ever appended, in seq order per stream. `event_id` makes an
-- append idempotent.
CREATE TABLE events (
    event_id    TEXT    PRIMARY KEY,
    stream      TEXT    NOT NULL,
    seq         INTEGER NOT NULL,
    payload     TEXT    NOT NULL,
    fired_by    TEXT    NOT NULL,         -- principal, or 'server'
    fired_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX events_by_stream ON events (stream, seq);

-- Per stream: the seq of its newest event (head) and of the last event whose
-- consequences committed (watermark). head > watermark = undelivered events.
CREATE TABLE streams (
    stream        TEXT    PRIMARY KEY,
    head_seq      INTEGER NOT NULL,
    watermark_seq INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
CREATE INDEX streams_undelivered ON streams (stream) WHERE head_seq > watermark_seq;

-- Direct-engine plane: bookkeeping, never a commit. One row while a host
-- holds the space for a tenure. `tenure` increases on every acquisition and
-- fences derived commits from an earlier tenure.
CREATE TABLE execution_lease (
    space         TEXT    PRIMARY KEY,
    holder        TEXT    NOT NULL,       -- host id '/' per-process instance id
    tenure        INTEGER NOT NULL,
    expires_at_ms INTEGER NOT NULL
) WITHOUT ROWID;
