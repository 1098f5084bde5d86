-- Space file, migration 7: how far the commit history has been compacted
-- (spec/storage.md, *Retention*). One row.
CREATE TABLE history (
    compacted_to INTEGER NOT NULL  -- commits up to this seq have no ops kept
);
INSERT INTO history (compacted_to) VALUES (0);
