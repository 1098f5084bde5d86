//! The direct-engine plane: per-space bookkeeping tables that are never
//! commits (`execution_lease`, `schedule_index`, `compute_ledger`,
//! `space_policy`), and the index-hook mechanism that writes them atomically
//! with a commit.
//!
//! Invariant: plane rows written by a hook live and die with the commit that
//! triggered them: the hook runs inside the commit's own SQLite transaction,
//! and an error from any hook rolls the whole transaction back.

use super::error::{SqlContext, StoreResult};
use super::records::{AppliedOp, CommitClass, EventRecord};
use rusqlite::{params, OptionalExtension, Transaction};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// Status of a schedule entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ScheduleStatus {
    Active,
    Paused,
    /// Dead-lettered after exhausting its retries.
    Dead,
}

impl ScheduleStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            ScheduleStatus::Active => "active",
            ScheduleStatus::Paused => "paused",
            ScheduleStatus::Dead => "dead",
        }
    }
    fn parse(s: &str) -> Self {
        match s {
            "paused" => ScheduleStatus::Paused,
            "dead" => ScheduleStatus::Dead,
            _ => ScheduleStatus::Active,
        }
    }
}

/// One row of `schedule_index`: one declared entry of one piece.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScheduleRow {
    pub piece: String,
    pub entry: u32,
    pub interval_minutes: u32,
    pub callback_stream: String,
    pub declared_at_ms: u64,
    pub nominal_period: u64,
    pub next_due_ms: u64,
    pub status: ScheduleStatus,
    pub attempts: u32,
    pub fired_count: u64,
    pub missed_count: u64,
    pub skipped_count: u64,
    pub last_fired_ms: Option<u64>,
    pub backoff_factor: u32,
    pub unread_fires: u32,
    /// When a failed occurrence is retried; `None` when no retry is pending.
    pub retry_due_ms: Option<u64>,
    /// The wake event being delivered (set before its handler runs).
    pub inflight_event: Option<String>,
    /// Documents the last delivered wave of this entry wrote (JSON array).
    pub output_docs: Option<String>,
    /// Whether a session read any of `output_docs` since they were written.
    pub output_read: bool,
}

impl ScheduleRow {
    /// The earliest moment this entry needs its host: its retry or its next due.
    pub fn wake_ms(&self) -> u64 {
        match self.retry_due_ms {
            Some(r) => r.min(self.next_due_ms),
            None => self.next_due_ms,
        }
    }

    /// A freshly declared, active entry with no history.
    pub fn new(
        piece: &str,
        entry: u32,
        interval_minutes: u32,
        callback_stream: &str,
        declared_at_ms: u64,
        next_due_ms: u64,
    ) -> Self {
        Self {
            piece: piece.to_string(),
            entry,
            interval_minutes,
            callback_stream: callback_stream.to_string(),
            declared_at_ms,
            nominal_period: 1,
            next_due_ms,
            status: ScheduleStatus::Active,
            attempts: 0,
            fired_count: 0,
            missed_count: 0,
            skipped_count: 0,
            last_fired_ms: None,
            backoff_factor: 1,
            unread_fires: 0,
            retry_due_ms: None,
            inflight_event: None,
            output_docs: None,
            output_read: true,
        }
    }
}

/// The ledger's two buckets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Bucket {
    /// Waves of scheduled tenures.
    Scheduled,
    /// Everything driven by sessions or client events.
    Session,
}

impl Bucket {
    pub fn as_str(self) -> &'static str {
        match self {
            Bucket::Scheduled => "scheduled",
            Bucket::Session => "session",
        }
    }
}

/// Figures added to one ledger row.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerDelta {
    pub cpu_us: u64,
    pub wall_us: u64,
    pub waves: u64,
    pub actions: u64,
    pub commits: u64,
    pub budget_skips: u64,
}

/// One row of `compute_ledger`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct LedgerRow {
    pub bucket: Bucket,
    pub window_start_ms: u64,
    #[serde(flatten)]
    pub totals: LedgerDelta,
}

/// What a hook sees of the commit being written.
pub struct CommitView<'a> {
    pub space: &'a str,
    pub seq: u64,
    pub class: CommitClass,
    pub at_ms: u64,
    pub ops: &'a [AppliedOp],
    pub events: &'a [EventRecord],
}

/// Code that runs inside every commit's transaction and maintains plane rows.
pub trait IndexHook: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// Returning an error aborts the commit: nothing of it is written.
    fn on_commit(&self, commit: &CommitView<'_>, plane: &mut PlaneTx<'_>) -> Result<(), String>;
}

/// Plane access inside an open space transaction. The only way code outside
/// the store writes plane rows.
pub struct PlaneTx<'a> {
    pub(crate) tx: &'a Transaction<'a>,
    pub(crate) path: &'a Path,
    pub(crate) space: &'a str,
    /// Set when `schedule_index` changed, so the directory's next wake is
    /// recomputed before the transaction commits.
    pub(crate) schedule_touched: bool,
    /// A policy was written: the directory must know before the commit.
    pub(crate) policy_touched: bool,
}

const SCHEDULE_COLUMNS: &str = "piece, entry, interval_minutes, callback_stream, declared_at_ms, \
     nominal_period, next_due_ms, status, attempts, fired_count, missed_count, skipped_count, \
     last_fired_ms, backoff_factor, unread_fires, retry_due_ms, inflight_event, output_docs, \
     output_read";

fn schedule_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<ScheduleRow> {
    Ok(ScheduleRow {
        piece: r.get(0)?,
        entry: r.get(1)?,
        interval_minutes: r.get(2)?,
        callback_stream: r.get(3)?,
        declared_at_ms: r.get::<_, i64>(4)? as u64,
        nominal_period: r.get::<_, i64>(5)? as u64,
        next_due_ms: r.get::<_, i64>(6)? as u64,
        status: ScheduleStatus::parse(&r.get::<_, String>(7)?),
        attempts: r.get(8)?,
        fired_count: r.get::<_, i64>(9)? as u64,
        missed_count: r.get::<_, i64>(10)? as u64,
        skipped_count: r.get::<_, i64>(11)? as u64,
        last_fired_ms: r.get::<_, Option<i64>>(12)?.map(|v| v as u64),
        backoff_factor: r.get(13)?,
        unread_fires: r.get(14)?,
        retry_due_ms: r.get::<_, Option<i64>>(15)?.map(|v| v as u64),
        inflight_event: r.get(16)?,
        output_docs: r.get(17)?,
        output_read: r.get::<_, i64>(18)? != 0,
    })
}

/// The declared part of a schedule row (see [`PlaneTx::declared`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredRow {
    pub piece: String,
    pub entry: u32,
    pub interval_minutes: u32,
    pub callback_stream: String,
}

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
    query_rows(
        conn,
        path,
        &sql,
        rusqlite::params_from_iter(params),
        schedule_from_row,
    )
}

pub(crate) fn list_ledger(conn: &rusqlite::Connection, path: &Path) -> StoreResult<Vec<LedgerRow>> {
    query_rows(
        conn,
        path,
        "SELECT bucket, window_start_ms, cpu_us, wall_us, waves, actions, commits, budget_skips \
         FROM compute_ledger ORDER BY window_start_ms, bucket",
        [],
        |r| {
            let bucket = match r.get::<_, String>(0)?.as_str() {
                "scheduled" => Bucket::Scheduled,
                _ => Bucket::Session,
            };
            Ok(LedgerRow {
                bucket,
                window_start_ms: r.get::<_, i64>(1)? as u64,
                totals: LedgerDelta {
                    cpu_us: r.get::<_, i64>(2)? as u64,
                    wall_us: r.get::<_, i64>(3)? as u64,
                    waves: r.get::<_, i64>(4)? as u64,
                    actions: r.get::<_, i64>(5)? as u64,
                    commits: r.get::<_, i64>(6)? as u64,
                    budget_skips: r.get::<_, i64>(7)? as u64,
                },
            })
        },
    )
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

/// One action's attributed compute in one window.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ActionCost {
    pub window_start_ms: u64,
    pub piece: String,
    pub action: String,
    pub kind: String,
    pub pattern: String,
    pub cpu_us: u64,
    pub wall_us: u64,
    pub runs: u64,
}

pub(crate) fn list_action_costs(
    conn: &rusqlite::Connection,
    path: &Path,
    limit: usize,
) -> StoreResult<Vec<ActionCost>> {
    query_rows(
        conn,
        path,
        "SELECT window_start_ms, piece, action, kind, pattern, cpu_us, wall_us, runs \
         FROM action_costs ORDER BY cpu_us DESC, piece, action LIMIT ?1",
        [limit as i64],
        |r| {
            Ok(ActionCost {
                window_start_ms: r.get::<_, i64>(0)? as u64,
                piece: r.get(1)?,
                action: r.get(2)?,
                kind: r.get(3)?,
                pattern: r.get(4)?,
                cpu_us: r.get::<_, i64>(5)? as u64,
                wall_us: r.get::<_, i64>(6)? as u64,
                runs: r.get::<_, i64>(7)? as u64,
            })
        },
    )
}

/// One recorded fire of a schedule entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FireRecord {
    pub piece: String,
    pub entry: u32,
    pub fired_ms: u64,
    pub event_id: String,
    pub period: u64,
    pub due_ms: u64,
    pub missed_periods: u64,
    pub outcome: String,
}

/// See [`PlaneTx::record_fire`].
pub const PRUNE_EVERY_PERIODS: u64 = 8;

/// An entry's newest `keep` fires, oldest first.
pub(crate) fn list_fires(
    conn: &rusqlite::Connection,
    path: &Path,
    piece: &str,
    entry: u32,
    keep: usize,
) -> StoreResult<Vec<FireRecord>> {
    let mut rows = query_rows(
        conn,
        path,
        "SELECT piece, entry, fired_ms, event_id, period, due_ms, missed_periods, outcome \
         FROM schedule_fires WHERE piece = ?1 AND entry = ?2 ORDER BY fired_ms, event_id",
        params![piece, entry],
        |r| {
            Ok(FireRecord {
                piece: r.get(0)?,
                entry: r.get(1)?,
                fired_ms: r.get::<_, i64>(2)? as u64,
                event_id: r.get(3)?,
                period: r.get::<_, i64>(4)? as u64,
                due_ms: r.get::<_, i64>(5)? as u64,
                missed_periods: r.get::<_, i64>(6)? as u64,
                outcome: r.get(7)?,
            })
        },
    )?;
    rows.drain(..rows.len().saturating_sub(keep));
    Ok(rows)
}

/// Earliest due time among active entries, for the host directory.
pub(crate) fn earliest_due(conn: &rusqlite::Connection, path: &Path) -> StoreResult<Option<u64>> {
    conn.prepare_cached(
        "SELECT MIN(t) FROM ( \
           SELECT MIN(next_due_ms) AS t FROM schedule_index WHERE status = 'active' \
           UNION ALL SELECT MIN(retry_due_ms) FROM schedule_index \
             WHERE retry_due_ms IS NOT NULL AND status = 'active')",
    )
    .at(path)?
    .query_row([], |r| r.get::<_, Option<i64>>(0))
    .map(|v| v.map(|v| v as u64))
    .at(path)
}

impl<'a> PlaneTx<'a> {
    pub fn space(&self) -> &str {
        self.space
    }

    /// Current head of a document, as this transaction sees it.
    pub fn doc(&self, id: &str) -> StoreResult<Option<Value>> {
        let v: Option<Option<String>> = self
            .tx
            .prepare_cached("SELECT value FROM docs WHERE id = ?1")
            .at(self.path)?
            .query_row([id], |r| r.get(0))
            .optional()
            .at(self.path)?;
        Ok(v.flatten().and_then(|s| serde_json::from_str(&s).ok()))
    }

    pub fn schedule(&self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        list_schedule(self.tx, self.path, piece)
    }

    /// Only what the index hook compares to decide whether a declaration
    /// changed: (piece, entry, interval, callback stream), by primary key
    /// when `piece` is given. Cheaper than [`PlaneTx::schedule`]'s full rows
    /// on the path every re-commit of a result takes.
    pub fn declared(&self, piece: Option<&str>) -> StoreResult<Vec<DeclaredRow>> {
        let sql = match piece {
            Some(_) => {
                "SELECT piece, entry, interval_minutes, callback_stream \
                 FROM schedule_index WHERE piece = ?1"
            }
            None => "SELECT piece, entry, interval_minutes, callback_stream FROM schedule_index",
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
                })
            },
        )
    }

    pub fn upsert_schedule(&mut self, row: &ScheduleRow) -> StoreResult<()> {
        self.schedule_touched = true;
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
                row.attempts,
                row.fired_count as i64,
                row.missed_count as i64,
                row.skipped_count as i64,
                row.last_fired_ms.map(|v| v as i64),
                row.backoff_factor,
                row.unread_fires,
                row.retry_due_ms.map(|v| v as i64),
                row.inflight_event,
                row.output_docs,
                row.output_read as i64,
            ])
            .at(self.path)?;
        Ok(())
    }

    /// Removes one entry, or every entry of `piece` when `entry` is `None`.
    pub fn delete_schedule(&mut self, piece: &str, entry: Option<u32>) -> StoreResult<usize> {
        self.schedule_touched = true;
        self.tx
            .prepare_cached(
                "DELETE FROM schedule_index WHERE piece = ?1 AND (?2 IS NULL OR entry = ?2)",
            )
            .at(self.path)?
            .execute(params![piece, entry])
            .at(self.path)
    }

    /// Adds `delta` to the ledger row of (`bucket`, `window_start_ms`).
    pub fn add_ledger(
        &mut self,
        bucket: Bucket,
        window_start_ms: u64,
        delta: &LedgerDelta,
    ) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT INTO compute_ledger (space, bucket, window_start_ms, cpu_us, wall_us, \
                 waves, actions, commits, budget_skips) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9) \
                 ON CONFLICT (bucket, window_start_ms) DO UPDATE SET \
                 cpu_us = cpu_us + excluded.cpu_us, wall_us = wall_us + excluded.wall_us, \
                 waves = waves + excluded.waves, actions = actions + excluded.actions, \
                 commits = commits + excluded.commits, \
                 budget_skips = budget_skips + excluded.budget_skips",
            )
            .at(self.path)?
            .execute(params![
                self.space,
                bucket.as_str(),
                window_start_ms as i64,
                delta.cpu_us as i64,
                delta.wall_us as i64,
                delta.waves as i64,
                delta.actions as i64,
                delta.commits as i64,
                delta.budget_skips as i64,
            ])
            .at(self.path)?;
        Ok(())
    }

    /// Appends to an entry's fire history, keeping its newest `keep` rows.
    /// Plain fires prune every [`PRUNE_EVERY_PERIODS`]th period only (the
    /// pruning statement was a tenth of a wake's statement compiling), so
    /// up to that many extra rows wait on disk; readers show the newest
    /// `keep`.
    #[allow(clippy::too_many_arguments)]
    pub fn record_fire(
        &mut self,
        piece: &str,
        entry: u32,
        fired_ms: u64,
        event_id: &str,
        period: u64,
        due_ms: u64,
        missed_periods: u64,
        outcome: &str,
        keep: usize,
    ) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO schedule_fires \
                 (piece, entry, fired_ms, event_id, period, due_ms, missed_periods, outcome) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .at(self.path)?
            .execute(params![
                piece,
                entry,
                fired_ms as i64,
                event_id,
                period as i64,
                due_ms as i64,
                missed_periods as i64,
                outcome
            ])
            .at(self.path)?;
        if outcome == "fired" && !period.is_multiple_of(PRUNE_EVERY_PERIODS) {
            return Ok(());
        }
        self.tx
            .prepare_cached(
                "DELETE FROM schedule_fires WHERE piece = ?1 AND entry = ?2 AND fired_ms < \
                 (SELECT MIN(fired_ms) FROM (SELECT fired_ms FROM schedule_fires \
                   WHERE piece = ?1 AND entry = ?2 ORDER BY fired_ms DESC LIMIT ?3))",
            )
            .at(self.path)?
            .execute(params![piece, entry, keep as i64])
            .at(self.path)?;
        Ok(())
    }

    /// Adds one action's metered cost to its per-window attribution row.
    #[allow(clippy::too_many_arguments)]
    pub fn add_action_cost(
        &mut self,
        window_start_ms: u64,
        piece: &str,
        action: &str,
        kind: &str,
        pattern: &str,
        cpu_us: u64,
        wall_us: u64,
        runs: u64,
    ) -> StoreResult<()> {
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
                window_start_ms as i64,
                piece,
                action,
                kind,
                pattern,
                cpu_us as i64,
                wall_us as i64,
                runs as i64
            ])
            .at(self.path)?;
        Ok(())
    }

    /// Records the inputs hash a derivation node last ran on.
    pub fn set_action_state(&mut self, node: &str, inputs_hash: &str, seq: u64) -> StoreResult<()> {
        self.tx
            .prepare_cached(
                "INSERT OR REPLACE INTO action_state (node, inputs_hash, seq) VALUES (?1, ?2, ?3)",
            )
            .at(self.path)?
            .execute(params![node, inputs_hash, seq as i64])
            .at(self.path)?;
        Ok(())
    }

    pub fn policy(&self, key: &str) -> StoreResult<Option<String>> {
        self.tx
            .prepare_cached("SELECT value FROM space_policy WHERE key = ?1")
            .at(self.path)?
            .query_row([key], |r| r.get(0))
            .optional()
            .at(self.path)
    }

    /// Whether the space has any policy row of its own.
    pub fn has_policies(&self) -> StoreResult<bool> {
        self.tx
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM space_policy)")
            .at(self.path)?
            .query_row([], |r| r.get(0))
            .at(self.path)
    }

    pub fn set_policy(&mut self, key: &str, value: Option<&str>) -> StoreResult<()> {
        self.policy_touched |= value.is_some();
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
}
