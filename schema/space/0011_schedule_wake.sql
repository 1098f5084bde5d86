-- Space file, migration 11: the store keeps plain rows and no schedule
-- meaning (ARCHITECTURE.md). `wake_ms` is when the entry next needs its
-- host, computed by `schedule/` whenever it writes the row (NULL: never,
-- as for a paused or dead entry); the wake directory reads MIN(wake_ms).
-- A space holds a handful of entries, so neither it nor anything else
-- about the table is indexed (the two indexes on due and retry times go).
--
-- Rows written before migration 8 kept their one undelivered occurrence in
-- `attempts`, `retry_due_ms` and `inflight_event`; they are converted here,
-- once, into the `pending` list, and those three columns are not read or
-- written again. The occurrence of such a row is the period before its
-- next one (`wake/{piece}/{entry}/{anchor}/{period}`, spec/scheduling.md).
ALTER TABLE schedule_index ADD COLUMN wake_ms INTEGER;
DROP INDEX IF EXISTS schedule_index_due;
DROP INDEX IF EXISTS schedule_index_retry;
UPDATE schedule_index SET pending = json_array(json_object(
        'occurrence', CASE
            WHEN inflight_event IS NOT NULL AND instr(inflight_event, '/retry') > 0
                THEN substr(inflight_event, 1, instr(inflight_event, '/retry') - 1)
            WHEN inflight_event IS NOT NULL THEN inflight_event
            ELSE 'wake/' || piece || '/' || entry || '/' || declared_at_ms || '/'
                 || max(nominal_period - 1, 0)
        END,
        'period', max(nominal_period - 1, 0),
        'attempts', max(attempts, 1),
        'inflight', inflight_event,
        'retryDueMs', retry_due_ms))
    WHERE pending IS NULL AND (retry_due_ms IS NOT NULL OR inflight_event IS NOT NULL);
UPDATE schedule_index SET wake_ms = CASE WHEN status = 'active'
        THEN min(next_due_ms, coalesce(retry_due_ms, next_due_ms)) END;
UPDATE schedule_index SET attempts = 0, retry_due_ms = NULL, inflight_event = NULL;
