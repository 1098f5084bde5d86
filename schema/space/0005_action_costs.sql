-- Space file, migration 5: per-action attribution of metered compute, per
-- window, for diagnosis (the ledger itself is per bucket, per window).
CREATE TABLE action_costs (
    window_start_ms INTEGER NOT NULL,
    piece           TEXT    NOT NULL,  -- the piece instance
    action          TEXT    NOT NULL,  -- node or stream id
    kind            TEXT    NOT NULL,  -- derivation | handler
    pattern         TEXT    NOT NULL,  -- export name @ program hash prefix
    cpu_us          INTEGER NOT NULL DEFAULT 0,
    wall_us         INTEGER NOT NULL DEFAULT 0,
    runs            INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (window_start_ms, piece, action)
) WITHOUT ROWID;
