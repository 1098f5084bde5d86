-- Fleet database, migration 17: a transaction's writes sent at once.
-- A commit's rows (the commit, its operations, events, stream heads and
-- watermarks, the plane's rows) are not read back by the transaction that
-- writes them, so the host gathers them and sends them in one call, with
-- the space row's final update, instead of one round trip each
-- (spec/fleet.md, "Writes sent at once"). A read inside the transaction
-- of a table with gathered writes sends them first.
--
-- spacewake_write(space, writes): applies `writes`, a JSON array of
-- {"k": kind, "a": arguments}, in order, in the caller's transaction
-- (which holds the space row's lock). Arguments are objects keyed by the
-- columns they fill. Kinds:
--   commit, op (a logged operation and its document), event (and its
--   stream's head), watermark (moved forward, never past the head;
--   refused with SQLSTATE SW001, its message [stream, to, head, watermark],
--   head and watermark null for a stream with no events), schedule (an entry's row), fire (a fire's row; "keep" prunes
--   the entry's history to its newest rows), settle (the outcome and run
--   of the fire that wrote "event_id", or the same as a row of its own
--   when that fire is no longer on record), ledger, cost,
--   action_state, space_row (the head seq, the undelivered flag and, when
--   "touched", the next wake), next_wake, release (the lease given back;
--   "if_idle": only while nothing is undelivered).
-- Returns the results of the last kinds, as one object: "undelivered",
-- "wake_at_ms" (space_row, next_wake), "released" (release). A space
-- whose next need of a host moved earlier than "before" is announced on
-- the channel spacewake_wake, as the updates it replaces did.
CREATE FUNCTION spacewake_write(p_space TEXT, p_writes JSONB)
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
                                 ELSE next_wake_ms END
       WHERE id = p_space
       RETURNING undelivered, wake_at_ms, id INTO v_undelivered, v_wake, v_id;
      PERFORM spacewake_notice(v_id, v_wake, (a->>'before')::BIGINT);
      out := out || jsonb_build_object('undelivered', v_undelivered, 'wake_at_ms', v_wake);
    WHEN 'next_wake' THEN
      UPDATE spaces SET next_wake_ms = (SELECT MIN(i.wake_ms) FROM schedule_index i
                                         WHERE i.space = p_space)
       WHERE id = p_space
       RETURNING wake_at_ms, id INTO v_wake, v_id;
      PERFORM spacewake_notice(v_id, v_wake, (a->>'before')::BIGINT);
      out := out || jsonb_build_object('wake_at_ms', v_wake);
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

-- A fire's row (see spacewake_write's "fire"), its entry's history pruned
-- to the newest "keep" rows when asked.
CREATE FUNCTION spacewake_record_fire(p_space TEXT, a JSONB)
RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  INSERT INTO schedule_fires AS f (space, piece, entry, fired_ms, event_id, period, due_ms,
      missed_periods, outcome, settled_ms, duration_us, cpu_us, error, logs, commit_seq)
  SELECT p_space, r.piece, r.entry, r.fired_ms, r.event_id, r.period, r.due_ms,
         r.missed_periods, r.outcome, r.settled_ms, r.duration_us, r.cpu_us, r.error,
         r.logs, r.commit_seq
    FROM jsonb_populate_record(NULL::schedule_fires, a) r
  ON CONFLICT (space, piece, entry, fired_ms, event_id, outcome) DO UPDATE SET
    period = excluded.period, due_ms = excluded.due_ms,
    missed_periods = excluded.missed_periods, settled_ms = excluded.settled_ms,
    duration_us = excluded.duration_us, cpu_us = excluded.cpu_us,
    error = excluded.error, logs = excluded.logs, commit_seq = excluded.commit_seq;
  IF a->>'keep' IS NOT NULL THEN
    DELETE FROM schedule_fires
     WHERE space = p_space AND piece = a->>'piece' AND entry = (a->>'entry')::INTEGER
       AND fired_ms < (SELECT MIN(n.fired_ms) FROM (
             SELECT fired_ms FROM schedule_fires
              WHERE space = p_space AND piece = a->>'piece'
                AND entry = (a->>'entry')::INTEGER
              ORDER BY fired_ms DESC LIMIT (a->>'keep')::BIGINT) n);
  END IF;
END
$$;

-- Tells the fleet's listeners that a space needs a host sooner than
-- `before` (its wake_at_ms when the transaction locked it): a hint,
-- delivered when the transaction commits.
CREATE FUNCTION spacewake_notice(p_space TEXT, p_wake BIGINT, p_before BIGINT)
RETURNS VOID
LANGUAGE plpgsql VOLATILE AS $$
BEGIN
  IF p_wake IS NOT NULL AND (p_before IS NULL OR p_wake < p_before) THEN
    PERFORM pg_notify('spacewake_wake', GREATEST(p_wake, 0)::TEXT || ' ' || p_space);
  END IF;
END
$$;

-- A waker's pass over the spaces it holds reads this host's live leases:
-- by holder and expiry together, not every lease the holder ever took.
DROP INDEX execution_lease_by_holder;
CREATE INDEX execution_lease_by_holder ON execution_lease (holder, expires_at);

-- spacewake_lock (migration 16) for a taking also returns the lease's
-- epoch and expiry (ms, the database's clock): a host whose waker's claim
-- took the lease a moment ago works under that epoch instead of taking
-- the lease a second time (spec/fleet.md, "The claim protocol").
DROP FUNCTION spacewake_lock(TEXT, TEXT, BIGINT);
CREATE FUNCTION spacewake_lock(p_space TEXT, p_holder TEXT, p_epoch BIGINT)
RETURNS TABLE (head_seq BIGINT, wake_at_ms BIGINT, lease_live BOOLEAN,
               lease_holder TEXT, lease_released BOOLEAN, lease_epoch BIGINT,
               lease_expires_ms BIGINT)
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
    SELECT l.holder, l.expires_at > clock_timestamp(), l.expires_at = to_timestamp(0),
           l.epoch, (extract(epoch FROM l.expires_at) * 1000)::BIGINT
      INTO lease_holder, lease_live, lease_released, lease_epoch, lease_expires_ms
      FROM execution_lease l WHERE l.space = p_space;
  END IF;
  RETURN NEXT;
END
$$;
