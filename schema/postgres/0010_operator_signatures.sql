-- PostgreSQL store, migration 10: the operator actions the fleet accepted,
-- by their decoded 64-byte ed25519 signature, shared by every host, so a
-- captured action is refused on any host of the fleet and after any
-- restart while its time window lasts. Rows older than twice the window
-- are forgotten when the next action is recorded.
CREATE TABLE operator_signatures (
    signature BYTEA PRIMARY KEY,
    seen_ms   BIGINT NOT NULL
);
CREATE INDEX operator_signatures_seen ON operator_signatures (seen_ms);
