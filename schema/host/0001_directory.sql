-- Host directory, migration 1. One small file per data directory listing
-- every space and, per space, a projection of what it needs from the host,
-- so boot discovery and the waker never open every space file.
--
-- Invariant (early, never late): next_wake_ms is never later than the
-- space's true earliest due schedule entry, and undelivered is 1 whenever the
-- space truly has undelivered events. Writers move an entry earlier before
-- the space commit that causes it, and later only after that commit.

CREATE TABLE host_meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE spaces (
    id           TEXT    PRIMARY KEY,
    owner        TEXT    NOT NULL,
    created_ms   INTEGER NOT NULL,
    next_wake_ms INTEGER,                 -- NULL: nothing scheduled
    undelivered  INTEGER NOT NULL DEFAULT 0,
    quarantined  TEXT                     -- reason, when the file was set aside
) WITHOUT ROWID;
CREATE INDEX spaces_by_next_wake ON spaces (next_wake_ms) WHERE next_wake_ms IS NOT NULL;
CREATE INDEX spaces_undelivered ON spaces (undelivered) WHERE undelivered = 1;
