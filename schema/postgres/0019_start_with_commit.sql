-- Fleet database, migration 19: what a tenure starts with, read by the
-- transaction before it.
--
-- spacewake_start reads what a tenure's start needs, as one JSON array:
--   [action states, event failures, documents (at most p_docs), bytes used,
--    undelivered events (at most p_events), schedule rows]
-- each part an array of row arrays (NULL when there are no rows), in the
-- column order the host reads them (the schedule's is the same as the
-- open's read of it; tests/fleet.rs compares the two).
--
-- spacewake_tx (migration 18) takes what to read after its writes
-- (p_start: {"docs": n, "events": n}) and returns it as "start": a firing
-- that opens a tenure hands the tenure's start its reads, seeing the
-- firing's own event, without a round trip of their own.
--
-- PL/pgSQL, not SQL: a SQL function's body is planned again at every call
-- (PostgreSQL 15), which cost more than the round trip it saves; PL/pgSQL
-- keeps the plan for the session.
CREATE FUNCTION spacewake_start(p_space TEXT, p_docs BIGINT, p_events BIGINT)
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
      + (SELECT COALESCE(SUM(octet_length(payload)), 0) FROM events WHERE space = p_space)
      + (SELECT COALESCE(SUM(octet_length(value)), 0) FROM commit_ops WHERE space = p_space)
    )::bigint,
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

DROP FUNCTION spacewake_tx(TEXT, JSONB, JSONB);
CREATE FUNCTION spacewake_tx(p_space TEXT, p_check JSONB, p_writes JSONB,
                             p_start JSONB DEFAULT NULL)
RETURNS JSONB
LANGUAGE plpgsql VOLATILE AS $$
DECLARE
  c JSONB;
  out JSONB;
BEGIN
  c := spacewake_check(p_space, p_check);
  out := c || spacewake_write(p_space, p_writes, (c->>'before')::BIGINT);
  IF p_start IS NOT NULL THEN
    out := out || jsonb_build_object('start', spacewake_start(p_space,
      (p_start->>'docs')::BIGINT, (p_start->>'events')::BIGINT));
  END IF;
  RETURN out;
END
$$;
