-- PostgreSQL store, migration 2: when each lease was last taken or renewed
-- (the database's clock), for the fleet view: which hosts hold how many
-- spaces, and when each last renewed one.

ALTER TABLE execution_lease ADD COLUMN renewed_at TIMESTAMPTZ;
UPDATE execution_lease SET renewed_at = expires_at;
CREATE INDEX execution_lease_by_holder ON execution_lease (holder);
