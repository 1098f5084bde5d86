//! The plane's rows in a space's SQLite file: the [`PlaneRows`] of a space
//! transaction, and the plain reads of the same tables for a handle.

use super::dead_letters::{DeadLetter, EventFailure};
use super::error::{SqlContext, StoreResult};
use super::plane::{
    ActionCost, Bucket, DeclaredRow, FireRecord, LedgerDelta, LedgerRow, PlaneRows, ScheduleRow,
};
use super::records::EventRecord;
use super::rows::{self, SCHEDULE_COLUMNS};
use rusqlite::{params, OptionalExtension, Transaction};
use serde_json::Value;
use std::path::Path;

/// Runs a (cached) query and maps every row; errors name the file.
fn query_rows<T>(
    conn: &rusqlite::Connection,
    path: &Path,
    sql: &str,
    params: impl rusqlite::Params,
    map: impl FnMut(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
) -> StoreResult<Vec<T>> {
    conn.prepare_cached(sql)
        .at(path)?
        .query_map(params, map)
        .at(path)?
        .collect::<Result<Vec<_>, _>>()
        .at(path)
}

pub(crate) fn list_schedule(
    conn: &rusqlite::Connection,
    path: &Path,
    piece: Option<&str>,
) -> StoreResult<Vec<ScheduleRow>> {
    // Two statements, so the one-piece lookup uses the primary key.
    let sql = match piece {
        Some(_) => {
            format!("SELECT {SCHEDULE_COLUMNS} FROM schedule_index WHERE piece = ?1 ORDER BY entry")
        }
        None => format!("SELECT {SCHEDULE_COLUMNS} FROM schedule_index ORDER BY piece, entry"),
    };
    let params: Vec<&str> = piece.into_iter().collect();
    query_rows(conn, path, &sql, rusqlite::params_from_iter(params), |r| {
        rows::schedule_row(r)
    })
}

pub(crate) fn list_ledger(conn: &rusqlite::Connection, path: &Path) -> StoreResult<Vec<LedgerRow>> {
    let sql = format!(
        "SELECT bucket, window_start_ms, {} FROM compute_ledger ORDER BY window_start_ms, bucket",
        LedgerDelta::COLUMNS.join(", ")
    );
    query_rows(conn, path, &sql, [], |r| rows::ledger_row(r))
}

pub(crate) fn action_states(
    conn: &rusqlite::Connection,
    path: &Path,
) -> StoreResult<Vec<(String, String)>> {
    query_rows(
        conn,
        path,
        "SELECT node, inputs_hash FROM action_state",
        [],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
}

pub(crate) fn list_action_costs(
    conn: &rusqlite::Connection,
    path: &Path,
    limit: usize,
) -> StoreResult<Vec<ActionCost>> {
    query_rows(
        conn,
        path,
        &format!(
            "SELECT {} FROM action_costs ORDER BY cpu_us DESC, piece, action LIMIT ?1",
            rows::ACTION_COST_COLUMNS
        ),
        [limit as i64],
        |r| rows::action_cost(r),
    )
}

/// An entry's newest `keep` fires, oldest first.
pub(crate) fn list_fires(
    conn: &rusqlite::Connection,
    path: &Path,
    piece: &str,
    entry: u32,
    keep: usize,
) -> StoreResult<Vec<FireRecord>> {
    let mut fires = query_rows(
        conn,
        path,
        &format!(
            "SELECT {} FROM schedule_fires WHERE piece = ?1 AND entry = ?2 \
             ORDER BY fired_ms, event_id",
            rows::FIRE_COLUMNS
        ),
        params![piece, entry],
        |r| rows::fire_record(r),
    )?;
    fires.drain(..fires.len().saturating_sub(keep));
    Ok(fires)
}

/// When the space's schedule next needs a host: the least of its rows'
/// wakes (each row's `wake_ms` as `schedule/` wrote it), for the directory.
pub(crate) fn earliest_due(conn: &rusqlite::Connection, path: &Path) -> StoreResult<Option<u64>> {
    conn.prepare_cached("SELECT MIN(wake_ms) FROM schedule_index")
        .at(path)?
        .query_row([], |r| r.get::<_, Option<i64>>(0))
        .map(|v| v.map(|v| v as u64))
        .at(path)
}

pub(crate) fn event_failures(
    conn: &rusqlite::Connection,
    path: &Path,
) -> StoreResult<Vec<EventFailure>> {
    query_rows(
        conn,
        path,
        "SELECT event_id, attempts, last_error FROM event_failures",
        [],
        |r| rows::event_failure(r),
    )
}

pub(crate) fn dead_letters(
    conn: &rusqlite::Connection,
    path: &Path,
) -> StoreResult<Vec<DeadLetter>> {
    query_rows(
        conn,
        path,
        &format!(
            "SELECT {} FROM dead_letters ORDER BY seq",
            rows::DEAD_LETTER_COLUMNS
        ),
        [],
        |r| rows::dead_letter(r),
    )
}

/// The plane rows of one space file, inside its open transaction.
pub(crate) struct SqlitePlane<'a> {
    pub(crate) tx: &'a Transaction<'a>,
    pub(crate) path: &'a Path,
    pub(crate) space: &'a str,
}

impl PlaneRows for SqlitePlane<'_> {
    fn doc(&mut self, id: &str) -> StoreResult<Option<Value>> {
        let v: Option<Option<String>> = self
            .tx
            .prepare_cached("SELECT value FROM docs WHERE id = ?1")
            .at(self.path)?
            .query_row([id], |r| r.get(0))
            .optional()
            .at(self.path)?;
        Ok(v.flatten().and_then(|s| serde_json::from_str(&s).ok()))
    }

    fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        list_schedule(self.tx, self.path, piece)
    }

    fn declared(&mut self, piece: Option<&str>) -> StoreResult<Vec<DeclaredRow>> {
        let sql = match piece {
            Some(_) => {
                "SELECT piece, entry, interval_minutes, callback_stream, cadence \
                 FROM schedule_index WHERE piece = ?1"
            }
            None => {
                "SELECT piece, entry, interval_minutes, callback_stream, cadence \
                 FROM schedule_index"
            }
        };
        let params: Vec<&str> = piece.into_iter().collect();
        query_rows(
            self.tx,
            self.path,
            sql,
            rusqlite::params_from_iter(params),
            |r| {
                Ok(DeclaredRow {
                    piece: r.get(0)?,
                    entry: r.get(1)?,
                    interval_minutes: r.get(2)?,
                    callback_stream: r.get(3)?,
                    cadence: r.get(4)?,
                })
            },
        )
    }

    fn upsert_schedule(&mut self, row: &ScheduleRow) -> StoreResult<()> {
        let sql = format!(
            "INSERT OR REPLACE INTO schedule_index (space, {SCHEDULE_COLUMNS}) \
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)"
        );
        self.tx
            .prepare_cached(&sql)
            .at(self.path)?
            .execute(params![
                self.space,
                row.piece,
                row.entry,
                row.interval_minutes,
                row.callback_stream,
                row.declared_at_ms as i64,
                row.nominal_period as i64,
                row.next_due_ms as i64,
                row.status.as_str(),
                row.wake_ms.map(|v| v as i64),
                row.fired_count as i64,
                row.missed_count as i64,
                row.skipped_count as i64,
                row.last_fired_ms.map(|v| v as i64),
                row.backoff_factor,
                row.unread_fires,
                row.output_docs,
                row.output_read as i64,
                row.pending_json(),
                row.cadence,
            ])
            .at(self.path)?;
        Ok(())
    }

    fn delete_schedule(&mut self, piece: &str, entry: Option<u32>) -> StoreResult<usize> {
        self.tx
            .prepare_cached(
                "DELETE FROM schedule_index WHERE piece = ?1 AND (?2 IS NULL OR entry = ?2)",
            )
            .at(self.path)?
            .execute(params![piece, entry])
            .at(self.path)
    }

    fn add_ledger(
        &mut self,
        bucket: Bucket,
        window_start_ms: u64,
        delta: &LedgerDelta,
    ) -> StoreResult<()> {
        let mut values: Vec<rusqlite::types::Value> = vec![
            self.space.to_string().into(),
            bucket.as_str().to_string().into(),
            (window_start_ms as i64).into(),
        ];
        values.extend(delta.values().iter().map(|v| (*v as i64).into()));
        self.tx
            .prepare_cached(&LedgerDelta::upsert_sql(false))
            .at(self.path)?
            .execute(rusqlite::params_from_iter(values))
            .at(self.path)?;
        Ok(())
    }

    fn record_fire(&mut self, f: &FireRecord, prune_to: Option<usize>) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO schedule_fires \
                 (piece, entry, fired_ms, event_id, period, due_ms, missed_periods, outcome, \
                  settled_ms, duration_us, cpu_us, error, logs, commit_seq) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
            )
            .at(self.path)?
            .execute(params![
                f.piece,
                f.entry,
                f.fired_ms as i64,
                f.event_id,
                f.period as i64,
                f.due_ms as i64,
                f.missed_periods as i64,
                f.outcome,
                f.run.settled_ms.map(|v| v as i64),
                f.run.duration_us.map(|v| v as i64),
                f.run.cpu_us.map(|v| v as i64),
                f.run.error,
                f.run.logs_json(),
                f.run.commit_seq.map(|v| v as i64),
            ])
            .at(self.path)?;
        let Some(keep) = prune_to else {
            return Ok(());
        };
        self.tx
            .prepare_cached(
                "DELETE FROM schedule_fires WHERE piece = ?1 AND entry = ?2 AND fired_ms < \
                 (SELECT MIN(fired_ms) FROM (SELECT fired_ms FROM schedule_fires \
                   WHERE piece = ?1 AND entry = ?2 ORDER BY fired_ms DESC LIMIT ?3))",
            )
            .at(self.path)?
            .execute(params![f.piece, f.entry, keep as i64])
            .at(self.path)?;
        Ok(())
    }

    fn settle_fire(&mut self, settled: &FireRecord, keep: usize) -> StoreResult<()> {
        let (piece, entry, event_id) = (&settled.piece, settled.entry, &settled.event_id);
        let (outcome, run) = (&settled.outcome, &settled.run);
        let n = self
            .tx
            .prepare_cached(
                "UPDATE schedule_fires SET outcome = ?4, settled_ms = ?5, duration_us = ?6, \
                 cpu_us = ?7, error = ?8, logs = ?9, commit_seq = ?10 \
                 WHERE piece = ?1 AND entry = ?2 AND event_id = ?3 \
                 AND outcome IN ('fired', 'retried')",
            )
            .at(self.path)?
            .execute(params![
                piece,
                entry,
                event_id,
                outcome,
                run.settled_ms.map(|v| v as i64),
                run.duration_us.map(|v| v as i64),
                run.cpu_us.map(|v| v as i64),
                run.error,
                run.logs_json(),
                run.commit_seq.map(|v| v as i64),
            ])
            .at(self.path)?;
        if n == 0 {
            self.record_fire(settled, Some(keep))?;
        }
        Ok(())
    }

    fn add_action_cost(&mut self, c: &ActionCost) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO action_costs (window_start_ms, piece, action, kind, pattern, cpu_us, \
                 wall_us, runs) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) \
                 ON CONFLICT (window_start_ms, piece, action) DO UPDATE SET \
                 cpu_us = cpu_us + excluded.cpu_us, wall_us = wall_us + excluded.wall_us, \
                 runs = runs + excluded.runs",
            )
            .at(self.path)?
            .execute(params![
                c.window_start_ms as i64,
                c.piece,
                c.action,
                c.kind,
                c.pattern,
                c.cpu_us as i64,
                c.wall_us as i64,
                c.runs as i64
            ])
            .at(self.path)?;
        Ok(())
    }

    fn set_action_state(&mut self, node: &str, inputs_hash: &str, seq: u64) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO action_state (node, inputs_hash, seq) VALUES (?1, ?2, ?3)",
            )
            .at(self.path)?
            .execute(params![node, inputs_hash, seq as i64])
            .at(self.path)?;
        Ok(())
    }

    fn policy(&mut self, key: &str) -> StoreResult<Option<String>> {
        self.tx
            .prepare_cached("SELECT value FROM space_policy WHERE key = ?1")
            .at(self.path)?
            .query_row([key], |r| r.get(0))
            .optional()
            .at(self.path)
    }

    fn has_policies(&mut self) -> StoreResult<bool> {
        self.tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM space_policy)")
            .at(self.path)?
            .query_row([], |r| r.get(0))
            .at(self.path)
    }

    fn set_policy(&mut self, key: &str, value: Option<&str>) -> StoreResult<()> {
        match value {
            Some(v) => self
                .tx
                .prepare_cached("INSERT OR REPLACE INTO space_policy (key, value) VALUES (?1, ?2)")
                .at(self.path)?
                .execute([key, v]),
            None => self
                .tx
                .prepare_cached("DELETE FROM space_policy WHERE key = ?1")
                .at(self.path)?
                .execute([key]),
        }
        .at(self.path)?;
        Ok(())
    }

    fn note_event_failure(
        &mut self,
        event_id: &str,
        stream: &str,
        seq: u64,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<u32> {
        self.tx
            .prepare_cached(
                "INSERT INTO event_failures (event_id, stream, seq, attempts, last_error, last_ms) \
                 VALUES (?1, ?2, ?3, 1, ?4, ?5) ON CONFLICT (event_id) DO UPDATE SET \
                 attempts = attempts + 1, last_error = excluded.last_error, \
                 last_ms = excluded.last_ms RETURNING attempts",
            )
            .at(self.path)?
            .query_row(
                params![event_id, stream, seq as i64, error, now_ms as i64],
                |r| r.get(0),
            )
            .at(self.path)
    }

    fn clear_event_failure(&mut self, event_id: &str) -> StoreResult<()> {
        self.tx
            .prepare_cached("DELETE FROM event_failures WHERE event_id = ?1")
            .at(self.path)?
            .execute([event_id])
            .at(self.path)?;
        Ok(())
    }

    fn dead_letter(
        &mut self,
        ev: &EventRecord,
        attempts: u32,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO dead_letters (event_id, stream, seq, payload, fired_by, \
                 attempts, error, dead_lettered_ms) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .at(self.path)?
            .execute(params![
                ev.event_id,
                ev.stream,
                ev.seq as i64,
                ev.payload.to_string(),
                ev.fired_by,
                attempts,
                error,
                now_ms as i64
            ])
            .at(self.path)?;
        Ok(())
    }
}
