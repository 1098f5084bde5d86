-- PostgreSQL store, migration 4: one row per host process of the fleet,
-- written when it opens the store and at each heartbeat, so the fleet view
-- shows a host that holds no lease as alive too.

CREATE TABLE hosts (
    holder     TEXT        PRIMARY KEY,  -- host id '/' per-process instance id
    started_at TIMESTAMPTZ NOT NULL,
    last_seen  TIMESTAMPTZ NOT NULL
);
