//! The plane's rows of one space in the shared database: the
//! [`PlaneRows`] of a space transaction, and the plain reads of the same
//! tables for a handle. Every row is keyed by its space, like the core's.

use super::pool::Db;
use crate::store::dead_letters::{DeadLetter, EventFailure};
use crate::store::error::{PgContext, StoreResult};
use crate::store::plane::{
    ActionCost, Bucket, DeclaredRow, FireRecord, LedgerDelta, LedgerRow, PlaneRows, ScheduleRow,
};
use crate::store::records::EventRecord;
use crate::store::rows::{self, SCHEDULE_COLUMNS};
use postgres::GenericClient;
use serde_json::{json, Value};

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
/// space's row lock (or checks, as it ends, that nothing it relied on
/// moved: see [`Db::defer_begin`]).
pub(super) struct PgPlane<'a, 'd> {
    pub(super) db: &'a mut Db<'d, postgres::Client>,
    pub(super) space: &'a str,
    /// The schedule as the handle knows it (its revision is among the
    /// transaction's checks): answers the transaction's schedule reads,
    /// with its own writes over it.
    pub(super) known: Option<&'a [ScheduleRow]>,
    /// The entries this transaction wrote, in order.
    pub(super) upserts: Vec<ScheduleRow>,
    /// This transaction removed entries or added new ones: what the handle
    /// knew of the schedule no longer answers.
    pub(super) reshaped: bool,
}

impl<'a, 'd> PgPlane<'a, 'd> {
    pub(super) fn new(db: &'a mut Db<'d, postgres::Client>, space: &'a str) -> Self {
        PgPlane {
            db,
            space,
            known: None,
            upserts: Vec::new(),
            reshaped: false,
        }
    }

    /// The schedule as known with this transaction's writes over it, when
    /// that answers (see [`PgPlane::known`]).
    fn known_schedule(&self, piece: Option<&str>) -> Option<Vec<ScheduleRow>> {
        let known = self.known.filter(|_| !self.reshaped)?;
        Some(super::known::known_with(known, &self.upserts, piece))
    }
}

impl PlaneRows for PgPlane<'_, '_> {
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
        if let Some(rows) = self.known_schedule(piece) {
            return Ok(rows);
        }
        list_schedule(self.db, self.space, piece)
    }

    fn declared(&mut self, piece: Option<&str>) -> StoreResult<Vec<DeclaredRow>> {
        if let Some(rows) = self.known_schedule(piece) {
            return Ok(rows.into_iter().map(DeclaredRow::from).collect());
        }
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
        let known = self.known.unwrap_or_default();
        if !known
            .iter()
            .any(|r| r.piece == row.piece && r.entry == row.entry)
        {
            self.reshaped = true;
        }
        self.upserts.push(row.clone());
        self.db.defer(
            self.space,
            "schedule",
            &["schedule_index"],
            json!({
                "piece": row.piece,
                "entry": row.entry,
                "interval_minutes": row.interval_minutes,
                "callback_stream": row.callback_stream,
                "declared_at_ms": row.declared_at_ms,
                "nominal_period": row.nominal_period,
                "next_due_ms": row.next_due_ms,
                "status": row.status.as_str(),
                "wake_ms": row.wake_ms,
                "fired_count": row.fired_count,
                "missed_count": row.missed_count,
                "skipped_count": row.skipped_count,
                "last_fired_ms": row.last_fired_ms,
                "backoff_factor": row.backoff_factor,
                "unread_fires": row.unread_fires,
                "output_docs": row.output_docs,
                "output_read": row.output_read,
                "pending": row.pending_json(),
                "cadence": row.cadence,
            }),
        );
        Ok(())
    }

    fn delete_schedule(&mut self, piece: &str, entry: Option<u32>) -> StoreResult<usize> {
        self.reshaped = true;
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
        let mut row: serde_json::Map<String, Value> = LedgerDelta::COLUMNS
            .iter()
            .zip(d.values())
            .map(|(c, v)| (c.to_string(), json!(v)))
            .collect();
        row.insert("bucket".into(), json!(bucket.as_str()));
        row.insert("window_start_ms".into(), json!(window_start_ms));
        self.db.defer(
            self.space,
            "ledger",
            &["compute_ledger"],
            Value::Object(row),
        );
        Ok(())
    }

    fn record_fire(&mut self, f: &FireRecord, prune_to: Option<usize>) -> StoreResult<()> {
        self.db.defer(
            self.space,
            "fire",
            &["schedule_fires"],
            fire_row(f, prune_to),
        );
        Ok(())
    }

    fn settle_fire(&mut self, settled: &FireRecord, keep: usize) -> StoreResult<()> {
        // The fire's row settled, or `settled` written in its place,
        // decided in the database with the transaction's other writes.
        self.db.defer(
            self.space,
            "settle",
            &["schedule_fires"],
            fire_row(settled, Some(keep)),
        );
        Ok(())
    }

    fn add_action_cost(&mut self, c: &ActionCost) -> StoreResult<()> {
        self.db.defer(
            self.space,
            "cost",
            &["action_costs"],
            json!({
                "window_start_ms": c.window_start_ms,
                "piece": c.piece,
                "action": c.action,
                "kind": c.kind,
                "pattern": c.pattern,
                "cpu_us": c.cpu_us,
                "wall_us": c.wall_us,
                "runs": c.runs,
            }),
        );
        Ok(())
    }

    fn set_action_state(&mut self, node: &str, inputs_hash: &str, seq: u64) -> StoreResult<()> {
        self.db.defer(
            self.space,
            "action_state",
            &["action_state"],
            json!({ "node": node, "inputs_hash": inputs_hash, "seq": seq }),
        );
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

/// A fire's row as `spacewake_write` takes it, pruned to `keep` when given.
fn fire_row(f: &FireRecord, keep: Option<usize>) -> Value {
    json!({
        "piece": f.piece,
        "entry": f.entry,
        "fired_ms": f.fired_ms,
        "event_id": f.event_id,
        "period": f.period,
        "due_ms": f.due_ms,
        "missed_periods": f.missed_periods,
        "outcome": f.outcome,
        "settled_ms": f.run.settled_ms,
        "duration_us": f.run.duration_us,
        "cpu_us": f.run.cpu_us,
        "error": f.run.error,
        "logs": f.run.logs_json(),
        "commit_seq": f.run.commit_seq,
        "keep": keep,
    })
}
