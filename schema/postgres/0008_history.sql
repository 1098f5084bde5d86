-- PostgreSQL store, migration 8: how far each space's commit history has
-- been compacted (spec/storage.md, *Retention*), as the space files'
-- `history` table records it: commits up to this seq have no operations
-- kept, and delivered events up to it no payload.
ALTER TABLE spaces ADD COLUMN compacted_to BIGINT NOT NULL DEFAULT 0;
