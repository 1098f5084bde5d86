-- Fleet database, migration 22: a space's history measured as it grows.
--
-- The storage quota's measure of a space on a fleet is the size of its
-- documents, its events' payloads and its history's operation values.
-- Summing the last two scanned every event and operation the space kept
-- (up to the history's 10,000 commits), at every tenure start: about 2 ms
-- of the database's time a wake for a space with a year of hourly wakes,
-- more than the rest of its wake.
--
-- spaces.history_bytes keeps that part as a running total: spacewake_write
-- adds each operation's value and each event's payload in the update of
-- the space's row that every commit makes (or, for writes without one, in
-- an update of its own), and the host's history compaction takes back what
-- it deletes or empties in the same statement. All of them hold the space
-- row's lock. The documents, one row per document whatever the history,
-- are still summed.

ALTER TABLE spaces ADD COLUMN history_bytes BIGINT NOT NULL DEFAULT 0;
UPDATE spaces s SET history_bytes =
    COALESCE((SELECT SUM(octet_length(e.payload)) FROM events e WHERE e.space = s.id), 0)
  + COALESCE((SELECT SUM(octet_length(o.value)) FROM commit_ops o WHERE o.space = s.id), 0);

-- spacewake_write (migration 18), adding to history_bytes.
CREATE OR REPLACE FUNCTION spacewake_write(p_space TEXT, p_writes JSONB, p_before BIGINT DEFAULT NULL)
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
  -- Bytes this call adds to the space's history (operations' values,
  -- events' payloads), added to spaces.history_bytes with its row.
  v_hist BIGINT := 0;
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
      v_hist := v_hist + coalesce(octet_length(a->>'value'), 0);
      INSERT INTO docs AS d (space, id, value, seq, rev)
      VALUES (p_space, a->>'doc_id', a->>'value', (a->>'seq')::BIGINT, 1)
      ON CONFLICT (space, id) DO UPDATE
        SET value = excluded.value, seq = excluded.seq, rev = d.rev + 1;
    WHEN 'event' THEN
      INSERT INTO events (space, event_id, stream, seq, payload, fired_by, fired_at_ms)
      SELECT p_space, r.event_id, r.stream, r.seq, r.payload, r.fired_by, r.fired_at_ms
        FROM jsonb_populate_record(NULL::events, a) r;
      v_hist := v_hist + coalesce(octet_length(a->>'payload'), 0);
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
                                                THEN 1 ELSE 0 END,
             history_bytes = history_bytes + v_hist
       WHERE id = p_space
       RETURNING undelivered, wake_at_ms, id, schedule_rev
            INTO v_undelivered, v_wake, v_id, v_rev;
      PERFORM spacewake_notice(v_id, v_wake, coalesce((a->>'before')::BIGINT, p_before));
      out := out || jsonb_build_object('undelivered', v_undelivered, 'wake_at_ms', v_wake,
                                       'schedule_rev', v_rev);
      v_hist := 0;
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
  IF v_hist <> 0 THEN
    UPDATE spaces SET history_bytes = history_bytes + v_hist WHERE id = p_space;
  END IF;
  RETURN out;
END
$$;

-- spacewake_start (migration 19), reading history_bytes instead of summing.
CREATE OR REPLACE FUNCTION spacewake_start(p_space TEXT, p_docs BIGINT, p_events BIGINT)
RETURNS JSON
LANGUAGE plpgsql STABLE AS $$
BEGIN
  RETURN json_build_array(
    (SELECT json_agg(json_build_array(node, inputs_hash))
       FROM action_state WHERE space = p_space),
    (SELECT json_agg(json_build_array(event_id, attempts, last_error))
       FROM event_failures WHERE space = p_space),
    (SELECT json_agg(json_build_array(id, value, seq, rev) ORDER BY id) FROM
       (SELECT id, value, seq, rev FROM docs WHERE space = p_space
         ORDER BY id LIMIT p_docs) d),
    ((SELECT COALESCE(SUM(octet_length(value)), 0) FROM docs WHERE space = p_space)
      + (SELECT history_bytes FROM spaces WHERE id = p_space))::bigint,
    (SELECT json_agg(json_build_array(event_id, stream, seq, payload, fired_by, fired_at_ms)
                     ORDER BY seq, event_id) FROM
       (SELECT e.event_id, e.stream, e.seq, e.payload, e.fired_by, e.fired_at_ms
          FROM events e JOIN streams s ON s.space = e.space AND s.stream = e.stream
         WHERE e.space = p_space AND e.seq > s.watermark_seq
         ORDER BY e.seq, e.event_id LIMIT p_events) u),
    (SELECT json_agg(json_build_array(piece, entry, interval_minutes, callback_stream,
                       declared_at_ms, nominal_period, next_due_ms, status, wake_ms,
                       fired_count, missed_count, skipped_count, last_fired_ms,
                       backoff_factor, unread_fires, output_docs, output_read, pending,
                       cadence) ORDER BY piece, entry)
       FROM schedule_index WHERE space = p_space));
END
$$;
