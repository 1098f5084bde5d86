-- Fleet database, migration 18: a transaction in one statement.
-- A host remembers what it last read or wrote of a space (its head seq,
-- its schedule's revision and rows) and runs a transaction's body against
-- that, sending what it relied on as checks with the writes: one call of
-- spacewake_tx does the lock, the checks and the writes, in place of
-- BEGIN, the lock, the reads and COMMIT (spec/fleet.md, "A transaction in
-- one statement"). A check that fails writes nothing.
--
-- The schedule's revision: moved by every transaction that changes a
-- space's schedule rows, in the same update of the space's row that moves
-- its next wake (kinds space_row with "touched", and next_wake).
ALTER TABLE spaces ADD COLUMN schedule_rev BIGINT NOT NULL DEFAULT 0;

-- spacewake_write (migration 17) also moves the schedule's revision and
-- returns it ("schedule_rev"), and takes the space's wake_at_ms as the
-- caller's lock saw it (p_before) for writes that do not carry "before".
DROP FUNCTION spacewake_write(TEXT, JSONB);
CREATE FUNCTION spacewake_write(p_space TEXT, p_writes JSONB, p_before BIGINT DEFAULT NULL)
RETURNS JSONB
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  w JSONB;
  a JSONB;
  out JSONB := '{}';
  h BIGINT;
  wm BIGINT;
  v_wake BIGINT;
  v_undelivered BOOLEAN;
  v_id TEXT;
  v_rev BIGINT;
BEGIN
  FOR w IN SELECT value FROM jsonb_array_elements(p_writes) LOOP
    a := w->'a';
    CASE w->>'k'
    WHEN 'commit' THEN
      INSERT INTO commits (space, seq, class, principal, session, at_ms, op_count,
                           event_count, epoch)
      SELECT p_space, r.seq, r.class, r.principal, r.session, r.at_ms, r.op_count,
             r.event_count, r.epoch
        FROM jsonb_populate_record(NULL::commits, a) r;
    WHEN 'op' THEN
      INSERT INTO commit_ops (space, seq, idx, doc_id, op, path, value)
      SELECT p_space, r.seq, r.idx, r.doc_id, r.op, r.path, r.value
        FROM jsonb_populate_record(NULL::commit_ops, a) r;
      INSERT INTO docs AS d (space, id, value, seq, rev)
      VALUES (p_space, a->>'doc_id', a->>'value', (a->>'seq')::BIGINT, 1)
      ON CONFLICT (space, id) DO UPDATE
        SET value = excluded.value, seq = excluded.seq, rev = d.rev + 1;
    WHEN 'event' THEN
      INSERT INTO events (space, event_id, stream, seq, payload, fired_by, fired_at_ms)
      SELECT p_space, r.event_id, r.stream, r.seq, r.payload, r.fired_by, r.fired_at_ms
        FROM jsonb_populate_record(NULL::events, a) r;
      INSERT INTO streams (space, stream, head_seq, watermark_seq)
      VALUES (p_space, a->>'stream', (a->>'seq')::BIGINT, 0)
      ON CONFLICT (space, stream) DO UPDATE SET head_seq = excluded.head_seq;
    WHEN 'watermark' THEN
      UPDATE streams SET watermark_seq = (a->>'to')::BIGINT
       WHERE space = p_space AND stream = a->>'stream'
         AND head_seq >= (a->>'to')::BIGINT AND watermark_seq <= (a->>'to')::BIGINT;
      IF NOT FOUND THEN
        SELECT s.head_seq, s.watermark_seq INTO h, wm
          FROM streams s WHERE s.space = p_space AND s.stream = a->>'stream';
        RAISE EXCEPTION '%', json_build_array(a->>'stream', (a->>'to')::BIGINT, h, wm)
          USING ERRCODE = 'SW001';
      END IF;
    WHEN 'schedule' THEN
      INSERT INTO schedule_index AS s (space, piece, entry, interval_minutes,
          callback_stream, declared_at_ms, nominal_period, next_due_ms, status, wake_ms,
          fired_count, missed_count, skipped_count, last_fired_ms, backoff_factor,
          unread_fires, output_docs, output_read, pending, cadence)
      SELECT p_space, r.piece, r.entry, r.interval_minutes, r.callback_stream,
             r.declared_at_ms, r.nominal_period, r.next_due_ms, r.status, r.wake_ms,
             r.fired_count, r.missed_count, r.skipped_count, r.last_fired_ms,
             r.backoff_factor, r.unread_fires, r.output_docs, r.output_read, r.pending,
             r.cadence
        FROM jsonb_populate_record(NULL::schedule_index, a) r
      ON CONFLICT (space, piece, entry) DO UPDATE SET
        interval_minutes = excluded.interval_minutes,
        callback_stream = excluded.callback_stream,
        declared_at_ms = excluded.declared_at_ms, nominal_period = excluded.nominal_period,
        next_due_ms = excluded.next_due_ms, status = excluded.status,
        wake_ms = excluded.wake_ms, fired_count = excluded.fired_count,
        missed_count = excluded.missed_count, skipped_count = excluded.skipped_count,
        last_fired_ms = excluded.last_fired_ms, backoff_factor = excluded.backoff_factor,
        unread_fires = excluded.unread_fires, output_docs = excluded.output_docs,
        output_read = excluded.output_read, pending = excluded.pending,
        cadence = excluded.cadence;
    WHEN 'fire' THEN
      PERFORM spacewake_record_fire(p_space, a);
    WHEN 'settle' THEN
      UPDATE schedule_fires f SET outcome = r.outcome, settled_ms = r.settled_ms,
             duration_us = r.duration_us, cpu_us = r.cpu_us, error = r.error,
             logs = r.logs, commit_seq = r.commit_seq
        FROM jsonb_populate_record(NULL::schedule_fires, a) r
       WHERE f.space = p_space AND f.piece = r.piece AND f.entry = r.entry
         AND f.event_id = r.event_id AND f.outcome IN ('fired', 'retried');
      IF NOT FOUND THEN
        PERFORM spacewake_record_fire(p_space, a);
      END IF;
    WHEN 'ledger' THEN
      INSERT INTO compute_ledger AS l (space, bucket, window_start_ms, cpu_us, wall_us,
          waves, actions, commits, budget_skips, effects_requested, effects_completed,
          effects_refused, effect_bytes, prompt_tokens, completion_tokens, model_wall_us)
      SELECT p_space, r.bucket, r.window_start_ms, r.cpu_us, r.wall_us, r.waves,
             r.actions, r.commits, r.budget_skips, r.effects_requested,
             r.effects_completed, r.effects_refused, r.effect_bytes, r.prompt_tokens,
             r.completion_tokens, r.model_wall_us
        FROM jsonb_populate_record(NULL::compute_ledger, a) r
      ON CONFLICT (space, bucket, window_start_ms) DO UPDATE SET
        cpu_us = l.cpu_us + excluded.cpu_us, wall_us = l.wall_us + excluded.wall_us,
        waves = l.waves + excluded.waves, actions = l.actions + excluded.actions,
        commits = l.commits + excluded.commits,
        budget_skips = l.budget_skips + excluded.budget_skips,
        effects_requested = l.effects_requested + excluded.effects_requested,
        effects_completed = l.effects_completed + excluded.effects_completed,
        effects_refused = l.effects_refused + excluded.effects_refused,
        effect_bytes = l.effect_bytes + excluded.effect_bytes,
        prompt_tokens = l.prompt_tokens + excluded.prompt_tokens,
        completion_tokens = l.completion_tokens + excluded.completion_tokens,
        model_wall_us = l.model_wall_us + excluded.model_wall_us;
    WHEN 'cost' THEN
      INSERT INTO action_costs AS c (space, window_start_ms, piece, action, kind, pattern,
          cpu_us, wall_us, runs)
      SELECT p_space, r.window_start_ms, r.piece, r.action, r.kind, r.pattern, r.cpu_us,
             r.wall_us, r.runs
        FROM jsonb_populate_record(NULL::action_costs, a) r
      ON CONFLICT (space, window_start_ms, piece, action) DO UPDATE SET
        cpu_us = c.cpu_us + excluded.cpu_us, wall_us = c.wall_us + excluded.wall_us,
        runs = c.runs + excluded.runs;
    WHEN 'action_state' THEN
      INSERT INTO action_state (space, node, inputs_hash, seq)
      VALUES (p_space, a->>'node', a->>'inputs_hash', (a->>'seq')::BIGINT)
      ON CONFLICT (space, node) DO UPDATE
        SET inputs_hash = excluded.inputs_hash, seq = excluded.seq;
    WHEN 'space_row' THEN
      UPDATE spaces SET head_seq = (a->>'head')::BIGINT,
             undelivered = EXISTS (SELECT 1 FROM streams t
                                    WHERE t.space = p_space AND t.head_seq > t.watermark_seq),
             next_wake_ms = CASE WHEN (a->>'touched')::BOOLEAN
                                 THEN (SELECT MIN(i.wake_ms) FROM schedule_index i
                                        WHERE i.space = p_space)
                                 ELSE next_wake_ms END,
             schedule_rev = schedule_rev + CASE WHEN (a->>'touched')::BOOLEAN
                                                THEN 1 ELSE 0 END
       WHERE id = p_space
       RETURNING undelivered, wake_at_ms, id, schedule_rev
            INTO v_undelivered, v_wake, v_id, v_rev;
      PERFORM spacewake_notice(v_id, v_wake, coalesce((a->>'before')::BIGINT, p_before));
      out := out || jsonb_build_object('undelivered', v_undelivered, 'wake_at_ms', v_wake,
                                       'schedule_rev', v_rev);
    WHEN 'next_wake' THEN
      UPDATE spaces SET next_wake_ms = (SELECT MIN(i.wake_ms) FROM schedule_index i
                                         WHERE i.space = p_space),
             schedule_rev = schedule_rev + 1
       WHERE id = p_space
       RETURNING wake_at_ms, id, schedule_rev INTO v_wake, v_id, v_rev;
      PERFORM spacewake_notice(v_id, v_wake, coalesce((a->>'before')::BIGINT, p_before));
      out := out || jsonb_build_object('wake_at_ms', v_wake, 'schedule_rev', v_rev);
    WHEN 'release' THEN
      IF (a->>'if_idle')::BOOLEAN AND coalesce((out->>'undelivered')::BOOLEAN, true) THEN
        out := out || jsonb_build_object('released', false);
      ELSE
        UPDATE execution_lease SET expires_at = to_timestamp(0)
         WHERE space = p_space AND holder = a->>'holder' AND epoch = (a->>'epoch')::BIGINT;
        out := out || jsonb_build_object('released', FOUND);
      END IF;
    END CASE;
  END LOOP;
  RETURN out;
END
$$;

-- Locks the space's row and checks what a transaction relied on, from
-- p_check (each key optional):
--   "live": [holder, epoch]   that lease is live (a derived commit's, a
--                             plane write's under a tenure);
--   "adopt": [holder, epoch]  the same, for a taking that works under the
--                             lease its claim took (returns its expiry);
--   "head": seq               the space's head seq is this;
--   "rev": n                  its schedule's revision is this.
-- Raises SQLSTATE SW002 (the message names what moved) when the space
-- changed since the caller read it, SW003 when the lease is not live and
-- SW004 when there is no such space; nothing is written then. Returns
-- "before" (wake_at_ms under the lock), "head", "rev" and, for "adopt",
-- "lease_expires_ms" (ms, the database's clock).
CREATE FUNCTION spacewake_check(p_space TEXT, p_check JSONB)
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

-- A whole transaction in one call (autocommit): spacewake_check, then
-- spacewake_write. Returns both results as one object.
CREATE FUNCTION spacewake_tx(p_space TEXT, p_check JSONB, p_writes JSONB)
RETURNS JSONB
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  c JSONB;
BEGIN
  c := spacewake_check(p_space, p_check);
  RETURN c || spacewake_write(p_space, p_writes, (c->>'before')::BIGINT);
END
$$;
