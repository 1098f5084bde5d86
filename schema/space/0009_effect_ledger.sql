-- Space file, migration 9: the ledger books effects beside compute
-- (spec/effects.md, *The ledger*): per window and bucket, the effect
-- requests sent, answered and refused, the bytes received, and for model
-- calls the prompt and completion tokens and the model's wall time.
ALTER TABLE compute_ledger ADD COLUMN effects_requested INTEGER NOT NULL DEFAULT 0;
ALTER TABLE compute_ledger ADD COLUMN effects_completed INTEGER NOT NULL DEFAULT 0;
ALTER TABLE compute_ledger ADD COLUMN effects_refused   INTEGER NOT NULL DEFAULT 0;
ALTER TABLE compute_ledger ADD COLUMN effect_bytes      INTEGER NOT NULL DEFAULT 0;
ALTER TABLE compute_ledger ADD COLUMN prompt_tokens     INTEGER NOT NULL DEFAULT 0;
ALTER TABLE compute_ledger ADD COLUMN completion_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE compute_ledger ADD COLUMN model_wall_us     INTEGER NOT NULL DEFAULT 0;
