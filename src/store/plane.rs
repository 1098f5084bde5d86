//! The direct-engine plane: per-space bookkeeping tables that are never
//! commits (`execution_lease`, `schedule_index`, `compute_ledger`,
//! `space_policy`), and the index-hook mechanism that writes them atomically
//! with a commit.
//!
//! Invariant: plane rows written by a hook live and die with the commit that
//! triggered them: the hook runs inside the commit's own SQLite transaction,
//! and an error from any hook rolls the whole transaction back.

use super::error::StoreResult;
use super::records::{AppliedOp, CommitClass, EventRecord};
use serde::Serialize;
use serde_json::Value;

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
    pub(crate) fn parse(s: &str) -> Self {
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
    pub fired_count: u64,
    pub missed_count: u64,
    pub skipped_count: u64,
    pub last_fired_ms: Option<u64>,
    pub backoff_factor: u32,
    pub unread_fires: u32,
    /// The entry's occurrences not yet delivered for good, one each: a
    /// wake in flight, or a failed one waiting for its retry. Oldest first.
    #[serde(default)]
    pub pending: Vec<PendingWake>,
    /// Documents the last delivered wave of this entry wrote (JSON array).
    pub output_docs: Option<String>,
    /// Whether a session read any of `output_docs` since they were written.
    pub output_read: bool,
    /// When the entry next needs its host (`None`: never, as for a paused
    /// entry). `schedule/` computes it whenever it writes the row; the store
    /// only keeps it, and a space's wake is the least of its rows'.
    #[serde(default, skip_serializing)]
    pub wake_ms: Option<u64>,
    /// The entry's shape when it is not an interval, as `schedule/` wrote
    /// it (opaque here; `schedule::cadence`). `None`: `interval_minutes`.
    #[serde(default, skip_serializing)]
    pub cadence: Option<String>,
}

/// One occurrence of a schedule entry whose delivery is not settled: its
/// wake event is in flight, or it failed and its retry is planned or on its
/// way. Each occurrence keeps its own attempts and retry, so two that fail
/// close together are both retried.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PendingWake {
    /// The occurrence's own wake event id (`schedule::WakeId`).
    pub occurrence: String,
    /// The grid period `k` of the occurrence.
    pub period: u64,
    /// Delivery attempts begun (each marked in flight before its handler ran).
    pub attempts: u32,
    /// The wake event of the attempt under way, recorded before its handler
    /// runs: found still set at the next activation, that attempt died with
    /// its process.
    pub inflight: Option<String>,
    /// When the next retry fires; `None` while an attempt is under way or a
    /// fired retry waits for its wave.
    pub retry_due_ms: Option<u64>,
}

impl ScheduleRow {
    /// The pending occurrences as stored (`NULL` when there are none).
    pub(crate) fn pending_json(&self) -> Option<String> {
        (!self.pending.is_empty())
            .then(|| serde_json::to_string(&self.pending).expect("plain data serializes"))
    }

    /// The pending occurrences from their stored column (none when it is
    /// `NULL` or unreadable).
    pub(crate) fn pending_from(json: Option<&str>) -> Vec<PendingWake> {
        json.and_then(|j| serde_json::from_str(j).ok())
            .unwrap_or_default()
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
            fired_count: 0,
            missed_count: 0,
            skipped_count: 0,
            last_fired_ms: None,
            backoff_factor: 1,
            unread_fires: 0,
            pending: Vec::new(),
            output_docs: None,
            output_read: true,
            wake_ms: None,
            cadence: None,
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
    /// Effect requests sent (reissues included).
    pub effects_requested: u64,
    /// Effect outcomes applied: a response of any status, or a failure.
    pub effects_completed: u64,
    /// Effect requests the egress policy refused.
    pub effects_refused: u64,
    /// Response bytes the effects received.
    pub effect_bytes: u64,
    /// Model calls: tokens of the prompts and of the completions.
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Model calls: wall time from request to answer.
    pub model_wall_us: u64,
}

impl LedgerDelta {
    /// The columns of `compute_ledger` after `(space, bucket,
    /// window_start_ms)`, in the order [`Self::values`] gives them.
    pub const COLUMNS: [&'static str; 13] = [
        "cpu_us",
        "wall_us",
        "waves",
        "actions",
        "commits",
        "budget_skips",
        "effects_requested",
        "effects_completed",
        "effects_refused",
        "effect_bytes",
        "prompt_tokens",
        "completion_tokens",
        "model_wall_us",
    ];

    pub fn values(&self) -> [u64; 13] {
        [
            self.cpu_us,
            self.wall_us,
            self.waves,
            self.actions,
            self.commits,
            self.budget_skips,
            self.effects_requested,
            self.effects_completed,
            self.effects_refused,
            self.effect_bytes,
            self.prompt_tokens,
            self.completion_tokens,
            self.model_wall_us,
        ]
    }

    pub fn from_values(v: [u64; 13]) -> Self {
        LedgerDelta {
            cpu_us: v[0],
            wall_us: v[1],
            waves: v[2],
            actions: v[3],
            commits: v[4],
            budget_skips: v[5],
            effects_requested: v[6],
            effects_completed: v[7],
            effects_refused: v[8],
            effect_bytes: v[9],
            prompt_tokens: v[10],
            completion_tokens: v[11],
            model_wall_us: v[12],
        }
    }

    /// The statement adding a delta to a ledger row (inserted if absent):
    /// `$n` placeholders for PostgreSQL (`pg`), `?n` for SQLite.
    pub(crate) fn upsert_sql(pg: bool) -> String {
        let p = |i: usize| if pg { format!("${i}") } else { format!("?{i}") };
        let cols = Self::COLUMNS.join(", ");
        let values: Vec<String> = (1..=Self::COLUMNS.len() + 3).map(p).collect();
        let (table, conflict, old) = if pg {
            (
                "compute_ledger AS l",
                "space, bucket, window_start_ms",
                "l.",
            )
        } else {
            ("compute_ledger", "bucket, window_start_ms", "")
        };
        let sets: Vec<String> = Self::COLUMNS
            .iter()
            .map(|c| format!("{c} = {old}{c} + excluded.{c}"))
            .collect();
        format!(
            "INSERT INTO {table} (space, bucket, window_start_ms, {cols}) VALUES ({}) \
             ON CONFLICT ({conflict}) DO UPDATE SET {}",
            values.join(", "),
            sets.join(", ")
        )
    }

    /// Column by column sum.
    pub fn add(&mut self, other: &LedgerDelta) {
        let (a, b) = (self.values(), other.values());
        *self = Self::from_values(std::array::from_fn(|i| a[i] + b[i]));
    }
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
    /// The space's counters, for what a hook decides (it may count).
    pub counters: &'a crate::metrics::SpaceCounters,
}

/// What index hooks remember between the transactions of one open space
/// handle (one tenure): a cache a hook keeps so the common commit needs no
/// query to learn what it watches. Opaque to the store, which keeps one per
/// handle and forgets all of it when a transaction of the handle fails, so
/// a hook never remembers rows that did not commit.
#[derive(Default)]
pub struct HookMemo {
    slots: Vec<(&'static str, Box<dyn std::any::Any + Send>)>,
}

impl HookMemo {
    /// What hook `name` remembered, if it remembered a `T`.
    pub fn get_mut<T: std::any::Any + Send>(&mut self, name: &'static str) -> Option<&mut T> {
        self.slots
            .iter_mut()
            .find(|(n, _)| *n == name)
            .and_then(|(_, v)| v.downcast_mut::<T>())
    }

    /// Remembers `value` for hook `name`, replacing what it had.
    pub fn put<T: std::any::Any + Send>(&mut self, name: &'static str, value: T) {
        self.slots.retain(|(n, _)| *n != name);
        self.slots.push((name, Box::new(value)));
    }

    /// Forgets everything (a transaction of the handle failed).
    pub(crate) fn clear(&mut self) {
        self.slots.clear();
    }
}

/// Code that runs inside every commit's transaction and maintains plane rows.
pub trait IndexHook: Send + Sync + 'static {
    fn name(&self) -> &'static str;
    /// Returning an error aborts the commit: nothing of it is written.
    fn on_commit(&self, commit: &CommitView<'_>, plane: &mut PlaneTx<'_>) -> Result<(), String>;
}

/// Runs the index hooks (for a commit that has a seq) and then the
/// caller's extension inside a commit's transaction, in that order: the
/// one rule both backends keep. An error from either refuses the commit.
pub(crate) fn run_commit_hooks(
    hooks: &[std::sync::Arc<dyn IndexHook>],
    view: &CommitView<'_>,
    plane: &mut PlaneTx<'_>,
    counters: &crate::metrics::SpaceCounters,
    extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
) -> StoreResult<()> {
    if view.seq != 0 {
        for hook in hooks {
            if let Err(reason) = hook.on_commit(view, plane) {
                counters.inc(crate::metrics::Counter::HookFailures);
                return Err(super::error::StoreError::Hook {
                    hook: hook.name().to_string(),
                    reason,
                });
            }
        }
    }
    extra(view, plane).map_err(|reason| super::error::StoreError::Hook {
        hook: "commit extension".into(),
        reason,
    })
}

/// The declared part of a schedule row (see [`PlaneTx::declared`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeclaredRow {
    pub piece: String,
    pub entry: u32,
    pub interval_minutes: u32,
    pub callback_stream: String,
    /// The row's `cadence` (see [`ScheduleRow::cadence`]).
    pub cadence: Option<String>,
}

/// What an entry declares, out of its whole row.
impl From<ScheduleRow> for DeclaredRow {
    fn from(r: ScheduleRow) -> Self {
        DeclaredRow {
            piece: r.piece,
            entry: r.entry,
            interval_minutes: r.interval_minutes,
            callback_stream: r.callback_stream,
            cadence: r.cadence,
        }
    }
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
    /// `fired`/`retried` while its wake is in flight, then what became of
    /// it: `delivered`, `failed`, `deadLettered`; or `suppressed`,
    /// `skippedBudget` when no wake was written.
    pub outcome: String,
    /// How the callback's run went, once the outcome is settled.
    #[serde(flatten)]
    pub run: FireRun,
}

/// What one delivery attempt of a wake did: kept with its fire.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FireRun {
    /// When the attempt's outcome was settled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settled_ms: Option<u64>,
    /// Wall time of the callback's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub duration_us: Option<u64>,
    /// CPU time of the callback's run.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_us: Option<u64>,
    /// Why the attempt failed (bounded like every stored error).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// What the callback logged (`console.*`), at most [`FIRE_LOG_LINES`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub logs: Vec<FireLog>,
    /// The commit the delivered run made.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit_seq: Option<u64>,
}

/// One line a wake's callback logged.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, serde::Deserialize)]
pub struct FireLog {
    pub level: String,
    pub text: String,
}

/// Lines of a callback's log kept per fire, and characters per line.
pub const FIRE_LOG_LINES: usize = 20;
pub const FIRE_LOG_CHARS: usize = 500;

impl FireRun {
    /// The logs as stored (a JSON array; NULL when there are none).
    pub(crate) fn logs_json(&self) -> Option<String> {
        (!self.logs.is_empty())
            .then(|| serde_json::to_string(&self.logs).expect("log lines serialise"))
    }

    /// The logs from their stored form (unreadable text reads as none).
    pub(crate) fn logs_from(stored: Option<String>) -> Vec<FireLog> {
        stored
            .and_then(|s| serde_json::from_str(&s).ok())
            .unwrap_or_default()
    }
}

/// See [`PlaneTx::record_fire`].
pub const PRUNE_EVERY_PERIODS: u64 = 8;

/// What a backend gives [`PlaneTx`]: the plane rows of one space, read and
/// written inside a transaction the backend has open. The SQLite files
/// implement it in `plane_sqlite.rs`, the shared PostgreSQL database in
/// `postgres/plane.rs`; the rules (when to prune, what marks the
/// directory) stay in [`PlaneTx`], written once.
pub(crate) trait PlaneRows {
    fn doc(&mut self, id: &str) -> StoreResult<Option<Value>>;
    fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>>;
    fn declared(&mut self, piece: Option<&str>) -> StoreResult<Vec<DeclaredRow>>;
    fn upsert_schedule(&mut self, row: &ScheduleRow) -> StoreResult<()>;
    fn delete_schedule(&mut self, piece: &str, entry: Option<u32>) -> StoreResult<usize>;
    fn add_ledger(
        &mut self,
        bucket: Bucket,
        window_start_ms: u64,
        delta: &LedgerDelta,
    ) -> StoreResult<()>;
    /// Inserts `fire`; with `prune_to`, then drops the entry's fires older
    /// than its newest `prune_to`.
    fn record_fire(&mut self, fire: &FireRecord, prune_to: Option<usize>) -> StoreResult<()>;
    /// Sets the outcome and run of the fire that wrote `event_id` while it
    /// is still in flight (`fired`/`retried`); false when there is none.
    /// Settles the fire that wrote `settled.event_id` (its outcome and
    /// run, as `settled` has them); when that fire is no longer on record,
    /// writes `settled` as a row of its own, keeping the entry's newest
    /// `keep` rows.
    fn settle_fire(&mut self, settled: &FireRecord, keep: usize) -> StoreResult<()>;
    fn add_action_cost(&mut self, cost: &ActionCost) -> StoreResult<()>;
    fn set_action_state(&mut self, node: &str, inputs_hash: &str, seq: u64) -> StoreResult<()>;
    fn policy(&mut self, key: &str) -> StoreResult<Option<String>>;
    fn has_policies(&mut self) -> StoreResult<bool>;
    fn set_policy(&mut self, key: &str, value: Option<&str>) -> StoreResult<()>;
    fn note_event_failure(
        &mut self,
        event_id: &str,
        stream: &str,
        seq: u64,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<u32>;
    fn clear_event_failure(&mut self, event_id: &str) -> StoreResult<()>;
    /// Writes the dead letter (its failures are cleared by the caller).
    fn dead_letter(
        &mut self,
        ev: &EventRecord,
        attempts: u32,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<()>;
}

/// Plane access inside an open space transaction. The only way code outside
/// the store writes plane rows.
pub struct PlaneTx<'a> {
    rows: &'a mut (dyn PlaneRows + 'a),
    space: &'a str,
    memo: &'a mut HookMemo,
    /// Set when `schedule_index` changed, so the directory's next wake is
    /// recomputed before the transaction commits.
    pub(crate) schedule_touched: bool,
    /// A policy was written: the directory must know before the commit.
    pub(crate) policy_touched: bool,
}

impl<'a> PlaneTx<'a> {
    pub(crate) fn new(
        rows: &'a mut (dyn PlaneRows + 'a),
        space: &'a str,
        memo: &'a mut HookMemo,
    ) -> Self {
        PlaneTx {
            rows,
            space,
            memo,
            schedule_touched: false,
            policy_touched: false,
        }
    }

    pub fn space(&self) -> &str {
        self.space
    }

    /// What hooks remember on this space handle ([`HookMemo`]).
    pub fn memo(&mut self) -> &mut HookMemo {
        self.memo
    }

    /// Current head of a document, as this transaction sees it.
    pub fn doc(&mut self, id: &str) -> StoreResult<Option<Value>> {
        self.rows.doc(id)
    }

    pub fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        self.rows.schedule(piece)
    }

    /// Only what the index hook compares to decide whether a declaration
    /// changed: (piece, entry, interval, callback stream), by primary key
    /// when `piece` is given. Cheaper than [`PlaneTx::schedule`]'s full rows
    /// on the path every re-commit of a result takes.
    pub fn declared(&mut self, piece: Option<&str>) -> StoreResult<Vec<DeclaredRow>> {
        self.rows.declared(piece)
    }

    pub fn upsert_schedule(&mut self, row: &ScheduleRow) -> StoreResult<()> {
        self.schedule_touched = true;
        self.rows.upsert_schedule(row)
    }

    /// Removes one entry, or every entry of `piece` when `entry` is `None`.
    pub fn delete_schedule(&mut self, piece: &str, entry: Option<u32>) -> StoreResult<usize> {
        self.schedule_touched = true;
        self.rows.delete_schedule(piece, entry)
    }

    /// Adds `delta` to the ledger row of (`bucket`, `window_start_ms`).
    pub fn add_ledger(
        &mut self,
        bucket: Bucket,
        window_start_ms: u64,
        delta: &LedgerDelta,
    ) -> StoreResult<()> {
        self.rows.add_ledger(bucket, window_start_ms, delta)
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
        let prune = outcome != "fired" || period.is_multiple_of(PRUNE_EVERY_PERIODS);
        let fire = FireRecord {
            piece: piece.to_string(),
            entry,
            fired_ms,
            event_id: event_id.to_string(),
            period,
            due_ms,
            missed_periods,
            outcome: outcome.to_string(),
            run: FireRun::default(),
        };
        self.rows.record_fire(&fire, prune.then_some(keep))
    }

    /// Settles the fire that wrote `event_id`: its outcome and what the
    /// callback's run did. A fire no longer on record (pruned, or written
    /// before fires kept their runs) gets a row of its own at `settled_ms`.
    #[allow(clippy::too_many_arguments)]
    pub fn settle_fire(
        &mut self,
        piece: &str,
        entry: u32,
        event_id: &str,
        period: u64,
        outcome: &str,
        run: &FireRun,
        keep: usize,
    ) -> StoreResult<()> {
        let at = run.settled_ms.unwrap_or_default();
        let settled = FireRecord {
            piece: piece.to_string(),
            entry,
            fired_ms: at,
            event_id: event_id.to_string(),
            period,
            due_ms: at,
            missed_periods: 0,
            outcome: outcome.to_string(),
            run: run.clone(),
        };
        self.rows.settle_fire(&settled, keep)
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
        self.rows.add_action_cost(&ActionCost {
            window_start_ms,
            piece: piece.to_string(),
            action: action.to_string(),
            kind: kind.to_string(),
            pattern: pattern.to_string(),
            cpu_us,
            wall_us,
            runs,
        })
    }

    /// Records the inputs hash a derivation node last ran on.
    pub fn set_action_state(&mut self, node: &str, inputs_hash: &str, seq: u64) -> StoreResult<()> {
        self.rows.set_action_state(node, inputs_hash, seq)
    }

    pub fn policy(&mut self, key: &str) -> StoreResult<Option<String>> {
        self.rows.policy(key)
    }

    /// Whether the space has any policy row of its own.
    pub fn has_policies(&mut self) -> StoreResult<bool> {
        self.rows.has_policies()
    }

    pub fn set_policy(&mut self, key: &str, value: Option<&str>) -> StoreResult<()> {
        self.policy_touched |= value.is_some();
        self.rows.set_policy(key, value)
    }

    /// One more failed wave for event `event_id` (of `stream`, appended by
    /// commit `seq`), with its error. Returns its attempts so far.
    pub fn note_event_failure(
        &mut self,
        event_id: &str,
        stream: &str,
        seq: u64,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<u32> {
        self.rows
            .note_event_failure(event_id, stream, seq, error, now_ms)
    }

    /// Forgets the failures of an event that was delivered after all.
    pub fn clear_event_failure(&mut self, event_id: &str) -> StoreResult<()> {
        self.rows.clear_event_failure(event_id)
    }

    /// Records `ev` as dead-lettered (in the transaction that moves its
    /// watermark past it) and forgets its failures.
    pub fn dead_letter(
        &mut self,
        ev: &EventRecord,
        attempts: u32,
        error: &str,
        now_ms: u64,
    ) -> StoreResult<()> {
        self.rows.dead_letter(ev, attempts, error, now_ms)?;
        self.rows.clear_event_failure(&ev.event_id)
    }
}
