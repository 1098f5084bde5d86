-- PostgreSQL store, migration 1: the spaces of a fleet, their commit logs,
-- document heads, stream events and execution leases, in tables shared by
-- every space (keyed by `space`). `store_meta.schema_version` records the
-- last applied migration; migrations run under an advisory lock, so hosts
-- starting together apply each one once.

CREATE TABLE store_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- One row per space. `head_seq` is the space's newest commit: a commit locks
-- this row, takes head_seq + 1 and writes it back, so seqs are gap-free and
-- commits of one space are serialised. The directory columns (next wake,
-- undelivered) are written in the same transaction as the commit that
-- changes them.
CREATE TABLE spaces (
    id            TEXT    PRIMARY KEY,
    owner         TEXT    NOT NULL,
    created_at_ms BIGINT  NOT NULL,
    head_seq      BIGINT  NOT NULL DEFAULT 0,
    next_wake_ms  BIGINT,
    undelivered   BOOLEAN NOT NULL DEFAULT false,
    quarantined   TEXT
);
CREATE INDEX spaces_due ON spaces (next_wake_ms)
    WHERE next_wake_ms IS NOT NULL AND quarantined IS NULL;
CREATE INDEX spaces_undelivered ON spaces (id)
    WHERE undelivered AND quarantined IS NULL;

CREATE TABLE commits (
    space       TEXT    NOT NULL REFERENCES spaces (id),
    seq         BIGINT  NOT NULL,
    class       TEXT    NOT NULL CHECK (class IN ('authored', 'derived', 'system')),
    principal   TEXT    NOT NULL,
    session     TEXT,
    at_ms       BIGINT  NOT NULL,
    op_count    INTEGER NOT NULL,
    event_count INTEGER NOT NULL,
    -- The lease epoch a derived commit was written under.
    epoch       BIGINT,
    PRIMARY KEY (space, seq)
);

CREATE TABLE commit_ops (
    space  TEXT    NOT NULL,
    seq    BIGINT  NOT NULL,
    idx    INTEGER NOT NULL,
    doc_id TEXT    NOT NULL,
    op     TEXT    NOT NULL CHECK (op IN ('set', 'patch', 'delete')),
    path   TEXT,
    value  TEXT,
    PRIMARY KEY (space, seq, idx)
);

CREATE TABLE docs (
    space TEXT   NOT NULL,
    id    TEXT   NOT NULL,
    value TEXT,
    seq   BIGINT NOT NULL,
    rev   BIGINT NOT NULL,
    PRIMARY KEY (space, id)
);

CREATE TABLE events (
    space       TEXT   NOT NULL,
    event_id    TEXT   NOT NULL,
    stream      TEXT   NOT NULL,
    seq         BIGINT NOT NULL,
    payload     TEXT   NOT NULL,
    fired_by    TEXT   NOT NULL,
    fired_at_ms BIGINT NOT NULL,
    PRIMARY KEY (space, event_id)
);
CREATE INDEX events_by_stream ON events (space, stream, seq);

CREATE TABLE streams (
    space         TEXT   NOT NULL,
    stream        TEXT   NOT NULL,
    head_seq      BIGINT NOT NULL,
    watermark_seq BIGINT NOT NULL DEFAULT 0,
    PRIMARY KEY (space, stream)
);

-- The execution lease: `epoch` rises with every taking; expiry is on the
-- database's clock, so no host's clock arbitrates between hosts. A released
-- lease keeps its epoch and expires at the Unix epoch.
CREATE TABLE execution_lease (
    space      TEXT        PRIMARY KEY REFERENCES spaces (id),
    holder     TEXT        NOT NULL,
    epoch      BIGINT      NOT NULL,
    expires_at TIMESTAMPTZ NOT NULL
);
