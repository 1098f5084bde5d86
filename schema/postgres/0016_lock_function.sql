-- Fleet database, migration 16: a transaction's first step in one
-- statement. Every writing transaction locks its space's row and then,
-- while a host works under a lease, checks that lease (spec/fleet.md,
-- "Leases and the fencing argument"). The check must read the lease after
-- the lock is granted: one plain statement would read it from a snapshot
-- taken before waiting for the lock. In a volatile PL/pgSQL function each
-- statement takes a fresh snapshot, so the order holds in one round trip.
--
-- spacewake_lock(space, holder, epoch): the space's head seq and wake_at_ms
-- under its row lock (no row: no such space), then the lease:
--   * holder NULL: not read (the lease columns are NULL);
--   * epoch given: lease_live says whether the lease row shows holder at
--     epoch, unexpired (the other columns are NULL);
--   * epoch NULL: the lease row as it is, for a caller about to take it
--     (lease_holder, lease_live: unexpired, lease_released: given back).
CREATE FUNCTION spacewake_lock(p_space TEXT, p_holder TEXT, p_epoch BIGINT)
RETURNS TABLE (head_seq BIGINT, wake_at_ms BIGINT, lease_live BOOLEAN,
               lease_holder TEXT, lease_released BOOLEAN)
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  SELECT s.head_seq, s.wake_at_ms INTO head_seq, wake_at_ms
    FROM spaces s WHERE s.id = p_space FOR UPDATE;
  IF NOT FOUND THEN
    RETURN;
  END IF;
  IF p_holder IS NULL THEN
    RETURN NEXT;
    RETURN;
  END IF;
  IF p_epoch IS NOT NULL THEN
    lease_live := EXISTS (SELECT 1 FROM execution_lease l
      WHERE l.space = p_space AND l.holder = p_holder AND l.epoch = p_epoch
        AND l.expires_at > clock_timestamp());
  ELSE
    SELECT l.holder, l.expires_at > clock_timestamp(), l.expires_at = to_timestamp(0)
      INTO lease_holder, lease_live, lease_released
      FROM execution_lease l WHERE l.space = p_space;
  END IF;
  RETURN NEXT;
END
$$;
