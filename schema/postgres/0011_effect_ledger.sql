-- Fleet database, migration 11: the ledger books effects beside compute,
-- as the space file's migration 9 does (spec/effects.md, *The ledger*).
ALTER TABLE compute_ledger
    ADD COLUMN effects_requested BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN effects_completed BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN effects_refused   BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN effect_bytes      BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN prompt_tokens     BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN completion_tokens BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN model_wall_us     BIGINT NOT NULL DEFAULT 0;
