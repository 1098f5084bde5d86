-- Whether a space may carry its own scheduled-budget policy, so the waker
-- can skip opening a space's file just to find it has none.
-- NULL: unknown (rows from before this migration; the first check settles
-- it); 0: no override; 1: may have one (set before the policy is written,
-- never cleared: over-inclusive is safe, under-inclusive is not).
ALTER TABLE spaces ADD COLUMN budget_policy INTEGER;
