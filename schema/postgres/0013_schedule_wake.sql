-- PostgreSQL store, migration 13: as the space files' migration 11. The
-- store keeps plain rows; `wake_ms` is when an entry next needs its host,
-- computed by `schedule/` whenever it writes the row (NULL: never), and a
-- space's wake is MIN(wake_ms) over its rows. Rows from before migration 7
-- have their one undelivered occurrence converted into `pending` here,
-- once; `attempts`, `retry_due_ms` and `inflight_event` are not read or
-- written again.
ALTER TABLE schedule_index ADD COLUMN wake_ms BIGINT;
UPDATE schedule_index SET pending = json_build_array(json_build_object(
        'occurrence', CASE
            WHEN inflight_event IS NOT NULL AND strpos(inflight_event, '/retry') > 0
                THEN substr(inflight_event, 1, strpos(inflight_event, '/retry') - 1)
            WHEN inflight_event IS NOT NULL THEN inflight_event
            ELSE 'wake/' || piece || '/' || entry || '/' || declared_at_ms || '/'
                 || greatest(nominal_period - 1, 0)
        END,
        'period', greatest(nominal_period - 1, 0),
        'attempts', greatest(attempts, 1),
        'inflight', inflight_event,
        'retryDueMs', retry_due_ms))::text
    WHERE pending IS NULL AND (retry_due_ms IS NOT NULL OR inflight_event IS NOT NULL);
UPDATE schedule_index SET wake_ms = CASE WHEN status = 'active'
        THEN least(next_due_ms, coalesce(retry_due_ms, next_due_ms)) END;
UPDATE schedule_index SET attempts = 0, retry_due_ms = NULL, inflight_event = NULL;
