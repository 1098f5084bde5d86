-- PostgreSQL store, migration 9: the live leases found from an index on
-- their expiry, so a host's "when may I next have something to do" reads
-- the leases live now and the first unheld wake in order, instead of
-- joining every space that has a wake with its lease row.
CREATE INDEX execution_lease_expiry ON execution_lease (expires_at);
