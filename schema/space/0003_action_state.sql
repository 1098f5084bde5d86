-- Space file, migration 3: per-action state on the direct-engine plane.
-- One row per derivation node: a hash of the input values it last ran on.
-- On re-activation a node whose current inputs hash the same is not re-run.
-- Fail open: a missing row means "recompute".
CREATE TABLE action_state (
    node        TEXT    PRIMARY KEY,      -- the node's output document id
    inputs_hash TEXT    NOT NULL,         -- blake3 of the canonical JSON inputs
    seq         INTEGER NOT NULL          -- head seq when it was recorded
) WITHOUT ROWID;
