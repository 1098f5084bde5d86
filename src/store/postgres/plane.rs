//! The plane's rows of one space in the shared database: the
//! [`PlaneRows`] of a space transaction, and the plain reads of the same
//! tables for a handle. Every row is keyed by its space, like the core's.

use super::pool::Db;
use crate::store::dead_letters::{DeadLetter, EventFailure};
use crate::store::error::{PgContext, StoreResult};
use crate::store::plane::{
    ActionCost, Bucket, DeclaredRow, FireRecord, FireRun, LedgerDelta, LedgerRow, PlaneRows,
    ScheduleRow,
};
use crate::store::records::EventRecord;
use crate::store::rows::{self, SCHEDULE_COLUMNS};
use postgres::GenericClient;
use serde_json::Value;

/// When a space next needs a host for its schedule: the least of its
/// rows' wakes, as `schedule/` wrote them (the SQL the commit's write of
/// the `spaces` row embeds).
pub(super) const EARLIEST_DUE: &str = "(SELECT MIN(wake_ms) FROM schedule_index WHERE space = $1)";

pub(super) fn list_schedule<C: GenericClient>(
    db: &mut Db<'_, C>,
    space: &str,
    piece: Option<&str>,
) -> StoreResult<Vec<ScheduleRow>> {
    // Two statements, so the one-piece lookup uses the primary key.
    let rows = match piece {
        Some(p) => db.query(
            &format!(
                "SELECT {SCHEDULE_COLUMNS} FROM schedule_index WHERE space = $1 AND piece = $2 \
                 ORDER BY entry"
            ),
            &[&space, &p],
        ),
        None => db.query(
            &format!(
                "SELECT {SCHEDULE_COLUMNS} FROM schedule_index WHERE space = $1 \
                 ORDER BY piece, entry"
            ),
            &[&space],
        ),
    }
    .doing("reading the schedule")?;
    rows.iter()
        .map(rows::schedule_row)
        .collect::<Result<_, _>>()
        .doing("reading the schedule")
}

pub(super) fn list_ledger<C: GenericClient>(
    db: &mut Db<'_, C>,
    space: &str,
) -> StoreResult<Vec<LedgerRow>> {
    let sql = format!(
        "SELECT bucket, window_start_ms, {} FROM compute_ledger WHERE space = $1 \
         ORDER BY window_start_ms, bucket",
        LedgerDelta::COLUMNS.join(", ")
    );
    let rows = db.query(&sql, &[&space]).doing("reading the ledger")?;
    rows.iter()
        .map(rows::ledger_row)
        .collect::<Result<_, _>>()
        .doing("reading the ledger")
}

pub(super) fn action_states<C: GenericClient>(
    db: &mut Db<'_, C>,
    space: &str,
) -> StoreResult<Vec<(String, String)>> {
    let rows = db
        .query(
            "SELECT node, inputs_hash FROM action_state WHERE space = $1",
            &[&space],
        )
        .doing("reading action state")?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

pub(super) fn list_action_costs<C: GenericClient>(
    db: &mut Db<'_, C>,
    space: &str,
    limit: usize,
) -> StoreResult<Vec<ActionCost>> {
    let rows = db
        .query(
            &format!(
                "SELECT {} FROM action_costs WHERE space = $1 \
                 ORDER BY cpu_us DESC, piece, action LIMIT $2",
                rows::ACTION_COST_COLUMNS
            ),
            &[&space, &(limit as i64)],
        )
        .doing("reading action costs")?;
    rows.iter()
        .map(rows::action_cost)
        .collect::<Result<_, _>>()
        .doing("reading action costs")
}

/// An entry's newest `keep` fires, oldest first.
pub(super) fn list_fires<C: GenericClient>(
    db: &mut Db<'_, C>,
    space: &str,
    piece: &str,
    entry: u32,
    keep: usize,
) -> StoreResult<Vec<FireRecord>> {
    let rows = db
        .query(
            &format!(
                "SELECT {} \
             FROM (SELECT * FROM schedule_fires WHERE space = $1 AND piece = $2 AND entry = $3 \
             ORDER BY fired_ms DESC, event_id DESC LIMIT $4) newest ORDER BY fired_ms, event_id",
                rows::FIRE_COLUMNS
            ),
            &[
                &space,
                &piece,
                &(entry as i32),
                &(keep.min(i64::MAX as usize) as i64),
            ],
        )
        .doing("reading fires")?;
    rows.iter()
        .map(rows::fire_record)
        .collect::<Result<_, _>>()
        .doing("reading fires")
}

pub(super) fn event_failures<C: GenericClient>(
    db: &mut Db<'_, C>,
    space: &str,
) -> StoreResult<Vec<EventFailure>> {
    let rows = db
        .query(
            "SELECT event_id, attempts, last_error FROM event_failures WHERE space = $1",
            &[&space],
        )
        .doing("reading event failures")?;
    rows.iter()
        .map(rows::event_failure)
        .collect::<Result<_, _>>()
        .doing("reading event failures")
}

pub(super) fn dead_letters<C: GenericClient>(
    db: &mut Db<'_, C>,
    space: &str,
) -> StoreResult<Vec<DeadLetter>> {
    let rows = db
        .query(
            &format!(
                "SELECT {} FROM dead_letters WHERE space = $1 ORDER BY seq",
                rows::DEAD_LETTER_COLUMNS
            ),
            &[&space],
        )
        .doing("reading dead letters")?;
    rows.iter()
        .map(rows::dead_letter)
        .collect::<Result<_, _>>()
        .doing("reading dead letters")
}

/// The plane rows of one space, inside a transaction that holds the
/// space's row lock.
pub(super) struct PgPlane<'a, 'd, 't> {
    pub(super) db: &'a mut Db<'d, postgres::Transaction<'t>>,
    pub(super) space: &'a str,
}

impl PlaneRows for PgPlane<'_, '_, '_> {
    fn doc(&mut self, id: &str) -> StoreResult<Option<Value>> {
        let row = self
            .db
            .query_opt(
                "SELECT value FROM docs WHERE space = $1 AND id = $2",
                &[&self.space, &id],
            )
            .doing("reading a document")?;
        Ok(row
            .and_then(|r| r.get::<_, Option<String>>(0))
            .and_then(|s| serde_json::from_str(&s).ok()))
    }

    fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        list_schedule(self.db, self.space, piece)
    }

    fn declared(&mut self, piece: Option<&str>) -> StoreResult<Vec<DeclaredRow>> {
        const COLS: &str = "SELECT piece, entry, interval_minutes, callback_stream, cadence \
                            FROM schedule_index WHERE space = $1";
        let rows = match piece {
            Some(p) => self
                .db
                .query(&format!("{COLS} AND piece = $2"), &[&self.space, &p]),
            None => self.db.query(COLS, &[&self.space]),
        }
        .doing("reading the schedule")?;
        Ok(rows
            .iter()
            .map(|r| DeclaredRow {
                piece: r.get(0),
                entry: r.get::<_, i32>(1) as u32,
                interval_minutes: r.get::<_, i32>(2) as u32,
                callback_stream: r.get(3),
                cadence: r.get(4),
            })
            .collect())
    }

    fn upsert_schedule(&mut self, row: &ScheduleRow) -> StoreResult<()> {
        let updates = SCHEDULE_COLUMNS
            .split(", ")
            .filter(|c| !matches!(*c, "piece" | "entry"))
            .map(|c| format!("{c} = excluded.{c}"))
            .collect::<Vec<_>>()
            .join(", ");
        let sql = format!(
            "INSERT INTO schedule_index (space, {SCHEDULE_COLUMNS}) VALUES ($1, $2, $3, $4, $5, \
             $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18, $19, $20) \
             ON CONFLICT (space, piece, entry) DO UPDATE SET {updates}"
        );
        self.db
            .execute(
                &sql,
                &[
                    &self.space,
                    &row.piece,
                    &(row.entry as i32),
                    &(row.interval_minutes as i32),
                    &row.callback_stream,
                    &(row.declared_at_ms as i64),
                    &(row.nominal_period as i64),
                    &(row.next_due_ms as i64),
                    &row.status.as_str(),
                    &row.wake_ms.map(|v| v as i64),
                    &(row.fired_count as i64),
                    &(row.missed_count as i64),
                    &(row.skipped_count as i64),
                    &row.last_fired_ms.map(|v| v as i64),
                    &(row.backoff_factor as i32),
                    &(row.unread_fires as i32),
                    &row.output_docs,
                    &row.output_read,
                    &row.pending_json(),
                    &row.cadence,
                ],
            )
            .doing("writing a schedule entry")?;
        Ok(())
    }

    fn delete_schedule(&mut self, piece: &str, entry: Option<u32>) -> StoreResult<usize> {
        let entry = entry.map(|e| e as i32);
        let n = self
            .db
            .execute(
                "DELETE FROM schedule_index WHERE space = $1 AND piece = $2 \
                 AND ($3::integer IS NULL OR entry = $3)",
                &[&self.space, &piece, &entry],
            )
            .doing("removing schedule entries")?;
        Ok(n as usize)
    }

    fn add_ledger(
        &mut self,
        bucket: Bucket,
        window_start_ms: u64,
        d: &LedgerDelta,
    ) -> StoreResult<()> {
        let numbers: Vec<i64> = d.values().iter().map(|v| *v as i64).collect();
        let window = window_start_ms as i64;
        let bucket_text = bucket.as_str();
        let mut params: Vec<&(dyn postgres::types::ToSql + Sync)> =
            vec![&self.space, &bucket_text, &window];
        params.extend(
            numbers
                .iter()
                .map(|n| n as &(dyn postgres::types::ToSql + Sync)),
        );
        self.db
            .execute(&LedgerDelta::upsert_sql(true), &params)
            .doing("adding to the ledger")?;
        Ok(())
    }

    fn record_fire(&mut self, f: &FireRecord, prune_to: Option<usize>) -> StoreResult<()> {
        self.db
            .execute(
                "INSERT INTO schedule_fires (space, piece, entry, fired_ms, event_id, period, \
                 due_ms, missed_periods, outcome, settled_ms, duration_us, cpu_us, error, logs, \
                 commit_seq) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15) \
                 ON CONFLICT (space, piece, entry, fired_ms, event_id, outcome) DO UPDATE SET \
                 period = excluded.period, due_ms = excluded.due_ms, \
                 missed_periods = excluded.missed_periods, settled_ms = excluded.settled_ms, \
                 duration_us = excluded.duration_us, cpu_us = excluded.cpu_us, \
                 error = excluded.error, logs = excluded.logs, commit_seq = excluded.commit_seq",
                &[
                    &self.space,
                    &f.piece,
                    &(f.entry as i32),
                    &(f.fired_ms as i64),
                    &f.event_id,
                    &(f.period as i64),
                    &(f.due_ms as i64),
                    &(f.missed_periods as i64),
                    &f.outcome,
                    &f.run.settled_ms.map(|v| v as i64),
                    &f.run.duration_us.map(|v| v as i64),
                    &f.run.cpu_us.map(|v| v as i64),
                    &f.run.error,
                    &f.run.logs_json(),
                    &f.run.commit_seq.map(|v| v as i64),
                ],
            )
            .doing("recording a fire")?;
        let Some(keep) = prune_to else {
            return Ok(());
        };
        self.db
            .execute(
                "DELETE FROM schedule_fires WHERE space = $1 AND piece = $2 AND entry = $3 \
                 AND fired_ms < (SELECT MIN(fired_ms) FROM (SELECT fired_ms FROM schedule_fires \
                 WHERE space = $1 AND piece = $2 AND entry = $3 \
                 ORDER BY fired_ms DESC LIMIT $4) newest)",
                &[&self.space, &f.piece, &(f.entry as i32), &(keep as i64)],
            )
            .doing("pruning fires")?;
        Ok(())
    }

    fn settle_fire(
        &mut self,
        piece: &str,
        entry: u32,
        event_id: &str,
        outcome: &str,
        run: &FireRun,
    ) -> StoreResult<bool> {
        let n = self
            .db
            .execute(
                "UPDATE schedule_fires SET outcome = $5, settled_ms = $6, duration_us = $7, \
                 cpu_us = $8, error = $9, logs = $10, commit_seq = $11 \
                 WHERE space = $1 AND piece = $2 AND entry = $3 AND event_id = $4 \
                 AND outcome IN ('fired', 'retried')",
                &[
                    &self.space,
                    &piece,
                    &(entry as i32),
                    &event_id,
                    &outcome,
                    &run.settled_ms.map(|v| v as i64),
                    &run.duration_us.map(|v| v as i64),
                    &run.cpu_us.map(|v| v as i64),
                    &run.error,
                    &run.logs_json(),
                    &run.commit_seq.map(|v| v as i64),
                ],
            )
            .doing("settling a fire")?;
        Ok(n > 0)
    }

    fn add_action_cost(&mut self, c: &ActionCost) -> StoreResult<()> {
        self.db
            .execute(
                "INSERT INTO action_costs AS a (space, window_start_ms, piece, action, kind, \
                 pattern, cpu_us, wall_us, runs) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT (space, window_start_ms, piece, action) DO UPDATE SET \
                 cpu_us = a.cpu_us + excluded.cpu_us, wall_us = a.wall_us + excluded.wall_us, \
                 runs = a.runs + excluded.runs",
                &[
                    &self.space,
                    &(c.window_start_ms as i64),
                    &c.piece,
                    &c.action,
                    &c.kind,
                    &c.pattern,
                    &(c.cpu_us as i64),
                    &(c.wall_us as i64),
                    &(c.runs as i64),
                ],
            )
            .doing("adding an action's cost")?;
        Ok(())
    }

    fn set_action_state(&mut self, node: &str, inputs_hash: &str, seq: u64) -> StoreResult<()> {
        self.db
            .execute(
                "INSERT INTO action_state (space, node, inputs_hash, seq) \
                 VALUES ($1, $2, $3, $4) ON CONFLICT (space, node) DO UPDATE SET \
                 inputs_hash = excluded.inputs_hash, seq = excluded.seq",
                &[&self.space, &node, &inputs_hash, &(seq as i64)],
            )
            .doing("recording action state")?;
        Ok(())
    }

    fn policy(&mut self, key: &str) -> StoreResult<Option<String>> {
        Ok(self
            .db
            .query_opt(
                "SELECT value FROM space_policy WHERE space = $1 AND key = $2",
                &[&self.space, &key],
            )
            .doing("reading a policy")?
            .map(|r| r.get(0)))
    }

    fn has_policies(&mut self) -> StoreResult<bool> {
        Ok(self
            .db
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM space_policy WHERE space = $1)",
                &[&self.space],
            )
            .doing("reading policies")?
            .get(0))
    }

    fn set_policy(&mut self, key: &str, value: Option<&str>) -> StoreResult<()> {
        match value {
            Some(v) => self.db.execute(
                "INSERT INTO space_policy (space, key, value) VALUES ($1, $2, $3) \
                 ON CONFLICT (space, key) DO UPDATE SET value = excluded.value",
                &[&self.space, &key, &v],
            ),
            None => self.db.execute(
                "DELETE FROM space_policy WHERE space = $1 AND key = $2",
                &[&self.space, &key],
            ),
        }
        .doing("writing a policy")?;
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
        let row = self
            .db
            .query_one(
                "INSERT INTO event_failures AS f (space, event_id, stream, seq, attempts, \
                 last_error, last_ms) VALUES ($1, $2, $3, $4, 1, $5, $6) \
                 ON CONFLICT (space, event_id) DO UPDATE SET attempts = f.attempts + 1, \
                 last_error = excluded.last_error, last_ms = excluded.last_ms \
                 RETURNING attempts",
                &[
                    &self.space,
                    &event_id,
                    &stream,
                    &(seq as i64),
                    &error,
                    &(now_ms as i64),
                ],
            )
            .doing("noting an event's failure")?;
        Ok(row.get::<_, i32>(0) as u32)
    }

    fn clear_event_failure(&mut self, event_id: &str) -> StoreResult<()> {
        self.db
            .execute(
                "DELETE FROM event_failures WHERE space = $1 AND event_id = $2",
                &[&self.space, &event_id],
            )
            .doing("clearing an event's failures")?;
        Ok(())
    }

    fn dead_letter(
        &mut self,
        ev: &EventRecord,
        attempts: u32,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<()> {
        self.db
            .execute(
                "INSERT INTO dead_letters (space, event_id, stream, seq, payload, fired_by, \
                 attempts, error, dead_lettered_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) \
                 ON CONFLICT (space, event_id) DO UPDATE SET attempts = excluded.attempts, \
                 error = excluded.error, dead_lettered_ms = excluded.dead_lettered_ms",
                &[
                    &self.space,
                    &ev.event_id,
                    &ev.stream,
                    &(ev.seq as i64),
                    &ev.payload.to_string(),
                    &ev.fired_by,
                    &(attempts as i32),
                    &error,
                    &(now_ms as i64),
                ],
            )
            .doing("writing a dead letter")?;
        Ok(())
    }
}
