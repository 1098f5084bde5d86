-- Fleet database, migration 20: room on each page of spaces for updates in
-- place. A wake updates its space's row three times; the update that does
-- not move wake_at_ms (the wake's in-flight mark) can then be a HOT update,
-- which adds no entry to spaces_wake_at for the claim to step over.
ALTER TABLE spaces SET (fillfactor = 50);
