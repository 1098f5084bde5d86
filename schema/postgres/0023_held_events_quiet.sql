-- Fleet database, migration 23: no notice for a held space's own events.
--
-- A commit that gives a space undelivered events moves its wake_at_ms to
-- 0, "needs a host now", and spacewake_notice told every listening host
-- (migration 17). When the commit runs under the space's live lease (its
-- checks hold "live" or "adopt": a tenure's firing, a wave, a client's
-- commit through the tenure) the events are the holder's to deliver: no
-- other host can claim the space while that lease is live, and if the
-- holder dies each host's waker already looks again when the lease
-- expires (PgStore::next_claimable_ms). The notice only woke every other
-- host's waker for a pass that could find nothing, once per wake in a
-- herd on a fleet.
--
-- spacewake_check marks the transaction as holding the space's lease
-- (a transaction-local setting, spacewake.holding) once it has checked
-- that lease, and spacewake_notice sends no notice for a wake at 0 of the
-- space the transaction holds. A notice of a later wake moved earlier (a
-- schedule changed under the lease) is still sent: the holder may park
-- before it falls due.

CREATE OR REPLACE FUNCTION spacewake_check(p_space TEXT, p_check JSONB)
RETURNS JSONB
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  h BIGINT;
  wk BIGINT;
  rev BIGINT;
  l JSONB;
  v_exp BIGINT;
BEGIN
  SELECT s.head_seq, s.wake_at_ms, s.schedule_rev INTO h, wk, rev
    FROM spaces s WHERE s.id = p_space FOR UPDATE;
  IF NOT FOUND THEN
    RAISE EXCEPTION '%', p_space USING ERRCODE = 'SW004';
  END IF;
  l := coalesce(p_check->'live', p_check->'adopt');
  IF l IS NOT NULL THEN
    SELECT (extract(epoch FROM x.expires_at) * 1000)::BIGINT INTO v_exp
      FROM execution_lease x
     WHERE x.space = p_space AND x.holder = l->>0 AND x.epoch = (l->>1)::BIGINT
       AND x.expires_at > clock_timestamp();
    IF NOT FOUND THEN
      RAISE EXCEPTION 'the lease of % at epoch % is no longer held', l->>0, l->>1
        USING ERRCODE = 'SW003';
    END IF;
    PERFORM set_config('spacewake.holding', p_space, true);
  END IF;
  IF p_check ? 'head' AND h <> (p_check->>'head')::BIGINT THEN
    RAISE EXCEPTION 'space % moved on since it was read (head seq % to %)',
      p_space, p_check->>'head', h
      USING ERRCODE = 'SW002';
  END IF;
  IF p_check ? 'rev' AND rev <> (p_check->>'rev')::BIGINT THEN
    RAISE EXCEPTION 'the schedule of space % changed since it was read (revision % to %)',
      p_space, p_check->>'rev', rev
      USING ERRCODE = 'SW002';
  END IF;
  RETURN jsonb_build_object('before', wk, 'head', h, 'rev', rev,
                            'lease_expires_ms', v_exp);
END
$$;

CREATE OR REPLACE FUNCTION spacewake_notice(p_space TEXT, p_wake BIGINT, p_before BIGINT)
RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF p_wake IS NOT NULL AND (p_before IS NULL OR p_wake < p_before)
     AND NOT (p_wake = 0 AND current_setting('spacewake.holding', true) IS NOT DISTINCT FROM p_space) THEN
    PERFORM pg_notify('spacewake_wake', GREATEST(p_wake, 0)::TEXT || ' ' || p_space);
  END IF;
END
$$;
