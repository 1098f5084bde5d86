-- Host directory, migration 4: the operator actions this host accepted,
-- by their decoded 64-byte ed25519 signature (never its text, which has
-- other spellings: padding, whitespace), so a captured action is refused
-- again inside its time window, also after a restart. Rows older than
-- twice the window are forgotten when the next action is recorded: by
-- then the signature's own time makes it stale.
CREATE TABLE operator_signatures (
    signature BLOB PRIMARY KEY,
    seen_ms   INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX operator_signatures_seen ON operator_signatures (seen_ms);
