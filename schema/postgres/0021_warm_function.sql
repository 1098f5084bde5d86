-- Fleet database, migration 21: a new connection made ready before its
-- first wake.
--
-- A backend compiles each PL/pgSQL function, loads the catalog entries of
-- each table and plans each statement the first time it runs them. For
-- the transaction functions that is several times a wake's own cost, paid
-- by whichever wake first lands on the connection: a host starting into a
-- herd opens its connections then, and its first wakes fell about 130 ms
-- behind (spec/performance.md, *Session 35*).
--
-- spacewake_warm runs a whole wake's writes of every kind, its start read
-- and the lock's two forms on a throwaway space, p_rounds times (from the
-- sixth run on, a statement may keep a generic plan instead of planning
-- again), inside a block that is rolled back: nothing stays, no notice is
-- sent. Returns how many rounds ran.
CREATE FUNCTION spacewake_warm(p_holder TEXT, p_rounds INTEGER)
RETURNS INTEGER
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  s TEXT := '~warm/' || pg_backend_pid() || '/' || md5(random()::TEXT);
  n INTEGER := 0;
  w JSONB;
  r RECORD;
BEGIN
  BEGIN
    INSERT INTO spaces (id, owner, created_at_ms) VALUES (s, p_holder, 0);
    INSERT INTO execution_lease (space, holder, epoch, expires_at, renewed_at)
    VALUES (s, p_holder, 1, clock_timestamp() + interval '1 minute', clock_timestamp());
    FOR i IN 1 .. p_rounds LOOP
      SELECT * INTO r FROM spacewake_lock(s, p_holder, NULL);
      SELECT * INTO r FROM spacewake_lock(s, p_holder, 1);
      w := jsonb_build_array(
        jsonb_build_object('k', 'commit', 'a', jsonb_build_object(
          'seq', i, 'class', 'derived', 'principal', p_holder, 'session', NULL,
          'at_ms', i, 'op_count', 1, 'event_count', 1, 'epoch', 1)),
        jsonb_build_object('k', 'op', 'a', jsonb_build_object(
          'seq', i, 'idx', 0, 'doc_id', 'd', 'op', 'set', 'path', NULL, 'value', '1')),
        jsonb_build_object('k', 'event', 'a', jsonb_build_object(
          'event_id', 'e' || i, 'stream', 't', 'seq', i, 'payload', '{}',
          'fired_by', 'schedule', 'fired_at_ms', i)),
        jsonb_build_object('k', 'watermark', 'a', jsonb_build_object('stream', 't', 'to', i)),
        jsonb_build_object('k', 'schedule', 'a', jsonb_build_object(
          'piece', 'p', 'entry', 0, 'interval_minutes', 1, 'callback_stream', 't',
          'declared_at_ms', 0, 'nominal_period', i, 'next_due_ms', 60000 * i,
          'status', 'active', 'wake_ms', 60000 * i, 'fired_count', i, 'missed_count', 0,
          'skipped_count', 0, 'last_fired_ms', i, 'backoff_factor', 1,
          'unread_fires', 0, 'output_docs', NULL, 'output_read', true,
          'pending', NULL, 'cadence', NULL)),
        jsonb_build_object('k', 'fire', 'a', jsonb_build_object(
          'piece', 'p', 'entry', 0, 'fired_ms', i, 'event_id', 'e' || i, 'period', i,
          'due_ms', i, 'missed_periods', 0, 'outcome', 'fired', 'keep', 1)),
        jsonb_build_object('k', 'settle', 'a', jsonb_build_object(
          'piece', 'p', 'entry', 0, 'fired_ms', i, 'event_id', 'e' || i, 'period', i,
          'due_ms', i, 'missed_periods', 0, 'outcome', 'delivered', 'settled_ms', i,
          'duration_us', 1, 'cpu_us', 1, 'error', NULL, 'logs', NULL, 'commit_seq', i)),
        jsonb_build_object('k', 'ledger', 'a', jsonb_build_object(
          'bucket', 'scheduled', 'window_start_ms', 0, 'cpu_us', 1, 'wall_us', 1,
          'waves', 1, 'actions', 1, 'commits', 1, 'budget_skips', 0,
          'effects_requested', 0, 'effects_completed', 0, 'effects_refused', 0,
          'effect_bytes', 0, 'prompt_tokens', 0, 'completion_tokens', 0,
          'model_wall_us', 0)),
        jsonb_build_object('k', 'cost', 'a', jsonb_build_object(
          'window_start_ms', 0, 'piece', 'p', 'action', 'a', 'kind', 'handler',
          'pattern', 'p', 'cpu_us', 1, 'wall_us', 1, 'runs', 1)),
        jsonb_build_object('k', 'action_state', 'a', jsonb_build_object(
          'node', 'n', 'inputs_hash', 'h', 'seq', i)),
        jsonb_build_object('k', 'space_row', 'a', jsonb_build_object(
          'head', i, 'touched', true)),
        jsonb_build_object('k', 'next_wake', 'a', '{}'::JSONB),
        jsonb_build_object('k', 'release', 'a', jsonb_build_object(
          'holder', p_holder, 'epoch', 0, 'if_idle', false)));
      PERFORM spacewake_tx(s, jsonb_build_object('live', jsonb_build_array(p_holder, 1),
                                                 'head', i - 1),
                           w, '{"docs": 100, "events": 100}'::JSONB);
      PERFORM spacewake_start(s, 100, 100);
      n := n + 1;
    END LOOP;
    RAISE EXCEPTION 'warmed' USING ERRCODE = 'SW009';
  EXCEPTION WHEN SQLSTATE 'SW009' THEN
    RETURN n;
  END;
END
$$;
