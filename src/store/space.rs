//! One space's SQLite file: commits, document reads, stream events and
//! watermarks, the execution lease, and plane-only bookkeeping.
//!
//! # Invariants
//! - A commit is one `BEGIN IMMEDIATE` transaction: its seq, its operations,
//!   its events, its watermark moves and every index hook's plane rows are
//!   written together or not at all. Seqs are `max(seq) + 1` inside that
//!   transaction, so they are gap-free even with two processes on one file.
//! - A derived commit is accepted only from the current, unexpired holder of
//!   the space's lease for the tenure it names.
//! - The host directory's projection of this space is moved earlier before
//!   the SQLite commit and later only after it, under the space's write lock
//!   (see `directory.rs`).

use super::directory::Projection;
use super::error::{is_corruption_code, SqlContext, StoreError, StoreResult};
use super::path::{display_path, get_at, set_at, PathSeg};
use super::plane::{self, CommitView, LedgerRow, PlaneTx, ScheduleRow};
use super::{CommitClass, FaultPoint, FileAccess, StoreShared};
use crate::metrics::{Counter, SpaceCounters};
use rusqlite::{params, Connection, OptionalExtension, Transaction, TransactionBehavior};
use serde::Serialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// Who authored a commit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Author {
    /// A `did:key`, or `"server"` for the host itself.
    pub principal: String,
    pub session: Option<String>,
}

impl Author {
    pub fn server() -> Self {
        Author {
            principal: "server".into(),
            session: None,
        }
    }
    pub fn principal(p: impl Into<String>) -> Self {
        Author {
            principal: p.into(),
            session: None,
        }
    }
}

/// One document operation of a commit.
#[derive(Debug, Clone, PartialEq)]
pub enum DocOp {
    /// Replace the whole document.
    Set { id: String, value: Value },
    /// Write `value` at `path` inside the document (see `path::set_at`).
    Patch {
        id: String,
        path: Vec<PathSeg>,
        value: Value,
    },
    /// Remove the document.
    Delete { id: String },
}

impl DocOp {
    pub fn doc_id(&self) -> &str {
        match self {
            DocOp::Set { id, .. } | DocOp::Patch { id, .. } | DocOp::Delete { id } => id,
        }
    }
    fn kind(&self) -> &'static str {
        match self {
            DocOp::Set { .. } => "set",
            DocOp::Patch { .. } => "patch",
            DocOp::Delete { .. } => "delete",
        }
    }
}

/// An operation as written: the document's value after it (None = deleted).
#[derive(Debug, Clone, PartialEq)]
pub struct AppliedOp {
    pub doc_id: String,
    pub op: &'static str,
    pub path: Option<Vec<PathSeg>>,
    pub doc_after: Option<Value>,
}

/// An event to append.
#[derive(Debug, Clone, PartialEq)]
pub struct NewEvent {
    pub event_id: String,
    pub stream: String,
    pub payload: Value,
    /// The principal that fired it, or `"server"`.
    pub fired_by: String,
}

/// A stored event.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct EventRecord {
    pub event_id: String,
    pub stream: String,
    pub seq: u64,
    pub payload: Value,
    pub fired_by: String,
    pub fired_at_ms: u64,
}

/// A stream's head and watermark.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamState {
    pub stream: String,
    pub head_seq: u64,
    pub watermark_seq: u64,
}

/// Proof of holding the space's lease for one tenure.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Lease {
    pub holder: String,
    pub tenure: u64,
    pub expires_at_ms: u64,
}

/// Everything one commit writes.
#[derive(Debug, Clone)]
pub struct CommitRequest {
    pub class: CommitClass,
    pub author: Author,
    pub ops: Vec<DocOp>,
    pub events: Vec<NewEvent>,
    /// Streams whose watermark this commit advances, to the given seq.
    pub watermarks: Vec<(String, u64)>,
    /// Required for a derived commit.
    pub lease: Option<Lease>,
    /// Take the space's lease for a new tenure in this commit's transaction
    /// (as [`Space::acquire_lease`] would); a live lease of another holder
    /// refuses the whole commit (`NotLeaseHolder`). The firing that begins
    /// a scheduled tenure takes its lease this way (`spec/scheduling.md`).
    pub take_lease: bool,
}

impl CommitRequest {
    pub fn new(class: CommitClass, author: Author) -> Self {
        CommitRequest {
            class,
            author,
            ops: Vec::new(),
            events: Vec::new(),
            watermarks: Vec::new(),
            lease: None,
            take_lease: false,
        }
    }
    pub fn op(mut self, op: DocOp) -> Self {
        self.ops.push(op);
        self
    }
    pub fn event(mut self, e: NewEvent) -> Self {
        self.events.push(e);
        self
    }
}

/// What a commit did.
#[derive(Debug, Clone, PartialEq)]
pub struct CommitOutcome {
    /// The commit's seq; `None` when there was nothing to commit (every
    /// event was a duplicate and there were no operations or watermarks).
    pub seq: Option<u64>,
    pub appended: Vec<String>,
    /// Event ids that were already stored, with the seq that stored them.
    pub duplicates: Vec<(String, u64)>,
    /// The lease taken, for a request with `take_lease`.
    pub lease: Option<Lease>,
}

/// A document head as read.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DocRead {
    pub value: Value,
    /// The seq of the commit that last wrote the document.
    pub seq: u64,
    pub rev: u64,
}

/// A commit as recorded in the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct CommitRecord {
    pub seq: u64,
    pub class: String,
    pub principal: String,
    pub session: Option<String>,
    pub at_ms: u64,
    pub ops: Vec<LoggedOp>,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LoggedOp {
    pub doc_id: String,
    pub op: String,
    pub path: Option<Value>,
    pub value: Option<Value>,
}

/// An open space file. Not `Sync`: a space has one writer thread at a time.
pub struct Space {
    id: String,
    path: PathBuf,
    conn: Connection,
    access: FileAccess,
    /// `PRAGMA wal_autocheckpoint` as set by [`Space::defer_checkpoints`],
    /// re-applied when the connection is reopened.
    autocheckpoint_pages: Option<u32>,
    /// Why the connection is gone (its reopen failed); every call fails.
    lost: Option<String>,
    shared: Arc<StoreShared>,
    counters: SpaceCounters,
    /// What this handle last wrote to (or read from) the directory.
    projection: Projection,
    /// Hold "later" moves of the directory until [`Space::settle_projection`]
    /// (the directory stays early meanwhile, which is always allowed).
    defer_later: bool,
    /// A "later" move is owed to the directory.
    later_pending: bool,
    quarantined: Option<String>,
}

impl std::fmt::Debug for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Space").field("id", &self.id).finish()
    }
}

impl Drop for Space {
    fn drop(&mut self) {
        // Best effort: an early directory is allowed, only wasteful.
        let _ = self.settle_projection();
        self.checkpoint_if_large();
        self.counters.add(Counter::SpacesOpen, -1);
        // Closed: its counter set may go once it is no longer recent.
        self.shared.counters.retire_space(&self.id);
    }
}

/// A closing space checkpoints (and truncates) its WAL only past this size.
/// Below it the WAL stays beside the file for the next activation, which
/// saves each short tenure (a scheduled wake) the checkpoint's three
/// fsyncs; a parked space keeps at most this much WAL on disk.
pub const CLOSE_CHECKPOINT_BYTES: u64 = 256 * 1024;

impl Space {
    /// `directory_view`: the space's projection as the directory has it.
    pub(crate) fn new(
        id: String,
        path: PathBuf,
        conn: Connection,
        access: FileAccess,
        shared: Arc<StoreShared>,
        directory_view: Projection,
    ) -> StoreResult<Space> {
        let counters = shared.counters.space(&id);
        counters.inc(Counter::SpacesOpened);
        counters.inc(Counter::SpacesOpen);
        if access == FileAccess::Exclusive {
            counters.inc(Counter::SpacesOpenedExclusive);
        }
        let mut space = Space {
            id,
            path,
            conn,
            access,
            autocheckpoint_pages: None,
            lost: None,
            shared,
            counters,
            projection: directory_view,
            defer_later: false,
            later_pending: false,
            quarantined: None,
        };
        // Start from the truth in the file; correcting the directory here is
        // safe because no commit of ours is in flight. Usually the directory
        // is right, and a read (no write lock) shows it.
        let read = (|| {
            Ok(Projection {
                next_wake_ms: plane::earliest_due(&space.conn, &space.path)?,
                undelivered: has_undelivered(&space.conn, &space.path)?,
            })
        })();
        // A corrupt file is quarantined here as by any other read.
        let now_ms = space.shared.clock.now_ms();
        let truth = space.guard(read)?.covered_by_due_wake(now_ms);
        if truth != space.projection {
            space.reconcile_projection()?;
        }
        Ok(space)
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn counters(&self) -> &SpaceCounters {
        &self.counters
    }

    fn check_open(&self) -> StoreResult<()> {
        if let Some(reason) = &self.quarantined {
            return Err(StoreError::Quarantined {
                space: self.id.clone(),
                reason: reason.clone(),
                path: self.path.clone(),
            });
        }
        if let Some(reason) = &self.lost {
            return Err(StoreError::Io {
                path: self.path.clone(),
                source: std::io::Error::other(reason.clone()),
            });
        }
        Ok(())
    }

    /// How this handle's connection shares the file.
    pub fn access(&self) -> FileAccess {
        self.access
    }

    /// Reopens an exclusively opened file shared, so others may open it
    /// while this handle stays open (a session attached to a scheduled
    /// tenure, or the tenure is running long). SQLite keeps an exclusive
    /// WAL connection exclusive until it closes, so the connection is
    /// closed and opened anew; everything else this handle holds stays.
    pub fn share(&mut self) -> StoreResult<()> {
        self.check_open()?;
        if self.access == FileAccess::Shared {
            return Ok(());
        }
        let closing = std::mem::replace(
            &mut self.conn,
            Connection::open_in_memory().expect("in-memory SQLite always opens"),
        );
        drop(closing);
        let reopened = self
            .shared
            .connect(&self.path, true, FileAccess::Shared)
            .and_then(|conn| {
                if let Some(pages) = self.autocheckpoint_pages {
                    conn.execute_batch(&format!("PRAGMA wal_autocheckpoint = {pages};"))
                        .at(&self.path)?;
                }
                Ok(conn)
            });
        match reopened {
            Ok(conn) => {
                self.conn = conn;
                self.access = FileAccess::Shared;
                self.counters.inc(Counter::SpacesReopenedShared);
                Ok(())
            }
            Err(e) => {
                self.lost = Some(format!(
                    "the space file was closed to reopen it shared, and reopening failed: {e}"
                ));
                Err(e)
            }
        }
    }

    /// Turns a corruption error into a quarantine of this space: the
    /// connection is closed, the files moved aside, the directory marked.
    fn guard<T>(&mut self, r: StoreResult<T>) -> StoreResult<T> {
        match r {
            Err(e) if e.is_corruption() => {
                let reason = e.to_string();
                let old = std::mem::replace(
                    &mut self.conn,
                    Connection::open_in_memory().expect("in-memory SQLite always opens"),
                );
                drop(old);
                let moved = self.shared.quarantine_files(&self.id, &self.path, &reason);
                self.quarantined = Some(reason.clone());
                Err(StoreError::Corrupt {
                    path: self.path.clone(),
                    reason: format!("{reason}; moved to {}", moved.display()),
                })
            }
            other => other,
        }
    }

    // ----- commits -------------------------------------------------------

    /// Writes one commit. See the module docs for what is atomic.
    pub fn commit(&mut self, req: CommitRequest) -> StoreResult<CommitOutcome> {
        self.commit_with(req, |_, _| Ok(()))
    }

    /// Like [`Space::commit`], with `extra` running inside the same
    /// transaction after the index hooks (e.g. the firing of a schedule
    /// entry: advance the entry and append its event, atomically). An error
    /// from `extra` aborts the commit.
    pub fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        self.check_open()?;
        let r = self.commit_inner(req, extra);
        if r.is_err() {
            self.counters.inc(Counter::CommitsRejected);
        }
        self.guard(r)
    }

    fn commit_inner(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        let now_ms = self.shared.clock.now_ms();
        let path = self.path.clone();
        let space_id = self.id.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .at(&path)?;

        if req.class == CommitClass::Derived {
            check_lease(&tx, &path, req.lease.as_ref(), now_ms).inspect_err(|_| {
                self.counters.inc(Counter::DerivedRefused);
            })?;
        }
        let taken = if req.take_lease {
            let taken =
                Self::take_lease_with(&tx, &path, &space_id, &self.shared, &self.counters, now_ms)?;
            if taken.is_none() {
                return Err(StoreError::NotLeaseHolder(
                    "another holder's lease is live".into(),
                ));
            }
            taken
        } else {
            None
        };

        // Split events into new ones and duplicates before assigning a seq.
        let mut fresh = Vec::with_capacity(req.events.len());
        let mut duplicates = Vec::new();
        for e in req.events {
            validate_name("stream", &e.stream)?;
            validate_name("eventId", &e.event_id)?;
            let prior: Option<i64> = tx
                .prepare_cached("SELECT seq FROM events WHERE event_id = ?1")
                .at(&path)?
                .query_row([&e.event_id], |r| r.get(0))
                .optional()
                .at(&path)?;
            match prior {
                Some(seq) => duplicates.push((e.event_id, seq as u64)),
                None if fresh.iter().any(|f: &NewEvent| f.event_id == e.event_id) => {
                    duplicates.push((e.event_id, 0))
                }
                None => fresh.push(e),
            }
        }
        self.counters
            .add(Counter::EventsDuplicate, duplicates.len() as i64);

        let nothing_to_commit = req.ops.is_empty() && fresh.is_empty() && req.watermarks.is_empty();
        let mut view_ops: Vec<AppliedOp> = Vec::with_capacity(req.ops.len());
        let mut records: Vec<EventRecord> = Vec::with_capacity(fresh.len());
        let seq = if nothing_to_commit {
            None
        } else {
            let seq: u64 = tx
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM commits")
                .at(&path)?
                .query_row([], |r| r.get::<_, i64>(0))
                .at(&path)? as u64;
            tx.prepare_cached(
                "INSERT INTO commits (seq, class, principal, session, at_ms, op_count, event_count) \
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .at(&path)?
            .execute(params![
                seq as i64,
                req.class.as_str(),
                req.author.principal,
                req.author.session,
                now_ms as i64,
                req.ops.len() as i64,
                fresh.len() as i64
            ])
            .at(&path)?;

            for (idx, op) in req.ops.into_iter().enumerate() {
                view_ops.push(apply_op(&tx, &path, seq, idx, op)?);
            }
            for e in fresh {
                records.push(append_event(&tx, &path, seq, now_ms, e)?);
            }
            for (stream, to_seq) in &req.watermarks {
                advance_watermark(&tx, &path, stream, *to_seq)?;
            }
            Some(seq)
        };

        let mut plane = PlaneTx {
            tx: &tx,
            path: &path,
            space: &space_id,
            schedule_touched: false,
            policy_touched: false,
        };
        let view = CommitView {
            space: &space_id,
            seq: seq.unwrap_or(0),
            class: req.class,
            at_ms: now_ms,
            ops: &view_ops,
            events: &records,
        };
        if seq.is_some() {
            let hooks = self
                .shared
                .hooks
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .clone();
            for hook in hooks.iter() {
                if let Err(reason) = hook.on_commit(&view, &mut plane) {
                    self.counters.inc(Counter::HookFailures);
                    return Err(StoreError::Hook {
                        hook: hook.name().to_string(),
                        reason,
                    });
                }
            }
        }
        extra(&view, &mut plane).map_err(|reason| StoreError::Hook {
            hook: "commit extension".into(),
            reason,
        })?;
        if let Some(poison) = &self.shared.cfg.refuse_delivering {
            if !req.watermarks.is_empty() && delivers(&tx, &path, poison)? {
                return Err(StoreError::InvalidCommit(format!(
                    "injected: the commit consuming event {poison:?} is refused"
                )));
            }
        }
        if plane.policy_touched {
            self.shared.directory.mark_budget_policy(&space_id)?;
        }
        // Always recompute the next wake: another process (an operator's CLI,
        // a second host) may have changed entries since this handle cached it,
        // and a stale value written back could make the directory late.
        let schedule_touched = true;
        // Appending events to a space already known to have undelivered
        // events cannot change that; only watermark moves can clear it.
        let streams_touched =
            !req.watermarks.is_empty() || (!records.is_empty() && !self.projection.undelivered);

        let after = Self::projection_in(
            &tx,
            &path,
            self.projection,
            schedule_touched,
            streams_touched,
        )?;
        let early = self
            .projection
            .earliest_of(after)
            .covered_by_due_wake(now_ms);
        let before = self.projection;
        if early != self.projection {
            self.shared.directory.set_projection(&space_id, early)?;
            self.counters.inc(Counter::DirectoryMovedEarlier);
        }
        self.projection = early;
        self.shared.fault(FaultPoint::BeforeSpaceCommit)?;
        tx.commit().at(&path)?;
        self.shared
            .wake_moved_earlier(&space_id, before.next_wake_ms, early.next_wake_ms);
        self.shared.fault(FaultPoint::AfterSpaceCommit)?;
        self.owe_later(after != early)?;

        if let Some(_seq) = seq {
            self.counters.inc(match req.class {
                CommitClass::Authored => Counter::CommitsAuthored,
                CommitClass::Derived => Counter::CommitsDerived,
                CommitClass::System => Counter::CommitsSystem,
            });
        }
        self.counters
            .add(Counter::EventsAppended, records.len() as i64);
        self.counters
            .add(Counter::WatermarksAdvanced, req.watermarks.len() as i64);
        if taken.is_some() {
            self.counters.inc(Counter::LeaseAcquired);
        }
        Ok(CommitOutcome {
            seq,
            appended: records.into_iter().map(|r| r.event_id).collect(),
            duplicates,
            lease: taken,
        })
    }

    /// The true projection as seen inside `tx`, recomputing only what the
    /// transaction could have changed.
    fn projection_in(
        conn: &Connection,
        path: &Path,
        current: Projection,
        schedule_touched: bool,
        streams_touched: bool,
    ) -> StoreResult<Projection> {
        Ok(Projection {
            next_wake_ms: if schedule_touched {
                plane::earliest_due(conn, path)?
            } else {
                current.next_wake_ms
            },
            undelivered: if streams_touched {
                has_undelivered(conn, path)?
            } else {
                current.undelivered
            },
        })
    }

    /// Moves the directory later, to the truth, under the space's write lock
    /// so no other writer's "earlier" move can be overwritten by ours.
    fn move_projection_later(&mut self) -> StoreResult<()> {
        self.later_pending = true;
        self.write_settling(|_, _| Ok(()))
    }

    /// Runs `f` in a write-locked transaction, then, if a "later" move is
    /// owed, moves the directory to the truth inside the same transaction.
    fn write_settling<T>(
        &mut self,
        f: impl FnOnce(&Connection, &Path) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let path = self.path.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .at(&path)?;
        let out = f(&tx, &path)?;
        let mut truth = self.projection;
        if std::mem::take(&mut self.later_pending) {
            truth = Projection {
                next_wake_ms: plane::earliest_due(&tx, &path)?,
                undelivered: has_undelivered(&tx, &path)?,
            }
            .covered_by_due_wake(self.shared.clock.now_ms());
            if truth != self.projection {
                self.shared.directory.set_projection(&self.id, truth)?;
                self.counters.inc(Counter::DirectoryMovedLater);
            }
        }
        tx.commit().at(&path)?;
        self.projection = truth;
        Ok(out)
    }

    /// A "later" move is due after a commit: made now, or owed until
    /// [`Space::settle_projection`] while later moves are deferred.
    fn owe_later(&mut self, owed: bool) -> StoreResult<()> {
        if !owed {
            return Ok(());
        }
        if self.defer_later {
            self.later_pending = true;
            return Ok(());
        }
        self.move_projection_later()
    }

    /// Defers the directory's "later" moves: a space server running
    /// several transactions in a row (a firing, the wave that delivers it)
    /// moves the directory later once, at [`Space::settle_projection`],
    /// instead of in a transaction of its own after each.
    pub fn defer_later_moves(&mut self) {
        self.defer_later = true;
    }

    /// Makes any "later" move owed since the last settle.
    pub fn settle_projection(&mut self) -> StoreResult<()> {
        if !std::mem::take(&mut self.later_pending)
            || self.quarantined.is_some()
            || self.lost.is_some()
        {
            return Ok(());
        }
        let r = self.move_projection_later();
        self.guard(r)
    }

    /// Recomputes the projection from the file and writes it to the
    /// directory if it differs. Used at open and by discovery when a space
    /// turned out to have nothing to do.
    pub fn reconcile_projection(&mut self) -> StoreResult<Projection> {
        self.check_open()?;
        let r = self.move_projection_later();
        self.guard(r)?;
        Ok(self.projection)
    }

    /// Runs `f` in a plane-only transaction (no commit, no seq): schedule
    /// state changes, ledger bookkeeping, policy. Keeps the directory
    /// projection by the same early/late rule as commits.
    pub fn plane<T>(
        &mut self,
        f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.check_open()?;
        let r = self.plane_inner(f);
        self.guard(r)
    }

    fn plane_inner<T>(
        &mut self,
        f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let path = self.path.clone();
        let space_id = self.id.clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .at(&path)?;
        let mut plane = PlaneTx {
            tx: &tx,
            path: &path,
            space: &space_id,
            schedule_touched: false,
            policy_touched: false,
        };
        let out = f(&mut plane)?;
        let touched = plane.schedule_touched;
        if plane.policy_touched {
            self.shared.directory.mark_budget_policy(&space_id)?;
        }
        let after = Self::projection_in(&tx, &path, self.projection, touched, false)?;
        let early = self.projection.earliest_of(after);
        let before = self.projection;
        if early != self.projection {
            self.shared.directory.set_projection(&space_id, early)?;
            self.counters.inc(Counter::DirectoryMovedEarlier);
        }
        self.projection = early;
        tx.commit().at(&path)?;
        self.shared
            .wake_moved_earlier(&space_id, before.next_wake_ms, early.next_wake_ms);
        self.owe_later(after != early)?;
        Ok(out)
    }

    // ----- WAL checkpoints -------------------------------------------------

    /// Moves checkpointing off the commit path: SQLite then checkpoints only
    /// when the WAL passes `safety_pages` (a bound on its size), and the
    /// owner calls [`Space::checkpoint`] when idle. A checkpoint syncs the
    /// database file, which would otherwise stall whichever commit crossed
    /// the default threshold.
    pub fn defer_checkpoints(&mut self, safety_pages: u32) -> StoreResult<()> {
        self.check_open()?;
        self.autocheckpoint_pages = Some(safety_pages);
        let r = self
            .conn
            .execute_batch(&format!("PRAGMA wal_autocheckpoint = {safety_pages};"))
            .at(&self.path);
        self.guard(r)
    }

    /// At close: checkpoint and truncate the WAL if it has grown past
    /// [`CLOSE_CHECKPOINT_BYTES`] (connections never checkpoint on close by
    /// themselves; see `Store::connect`). Best effort: a busy or failed
    /// checkpoint leaves the WAL for the next one, which is always safe.
    fn checkpoint_if_large(&mut self) {
        if self.quarantined.is_some() || self.lost.is_some() {
            return;
        }
        let wal = PathBuf::from(format!("{}-wal", self.path.display()));
        let len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        if len > CLOSE_CHECKPOINT_BYTES {
            // A TRUNCATE checkpoint waits for readers through the busy
            // handler; a closing space must not wait on another process's
            // reader, so it gives up at once and leaves it for next time.
            let _ = self.conn.busy_timeout(std::time::Duration::ZERO);
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
        }
    }

    /// A full checkpoint that truncates the WAL, waiting up to a second for
    /// readers: what a space gets when the host shuts down, so the file
    /// stands alone on disk. A reader still busy after that leaves the WAL
    /// for the next open, which is always safe.
    pub fn checkpoint_all(&mut self) -> StoreResult<()> {
        self.check_open()?;
        let r = self
            .conn
            .busy_timeout(std::time::Duration::from_secs(1))
            .and_then(|()| {
                self.conn
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            })
            .at(&self.path);
        self.guard(r)
    }

    /// A passive checkpoint: copies what it can without waiting on readers.
    pub fn checkpoint(&mut self) -> StoreResult<()> {
        self.check_open()?;
        let r = self
            .conn
            .query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()))
            .at(&self.path);
        self.guard(r)
    }

    // ----- reads ---------------------------------------------------------

    pub fn read(&mut self, id: &str) -> StoreResult<Option<DocRead>> {
        self.check_open()?;
        let r = read_doc(&self.conn, &self.path, id);
        self.guard(r)
    }

    /// Reads the value at `path` inside document `id`.
    pub fn read_path(&mut self, id: &str, path: &[PathSeg]) -> StoreResult<Option<Value>> {
        Ok(self.read(id)?.and_then(|d| get_at(&d.value, path).cloned()))
    }

    pub fn head_seq(&mut self) -> StoreResult<u64> {
        self.scalar("SELECT COALESCE(MAX(seq), 0) FROM commits")
    }

    /// A query returning one non-negative integer.
    fn scalar(&mut self, sql: &str) -> StoreResult<u64> {
        self.check_open()?;
        let r = self
            .conn
            .prepare_cached(sql)
            .and_then(|mut s| s.query_row([], |r| r.get::<_, i64>(0)))
            .map(|v| v as u64)
            .at(&self.path);
        self.guard(r)
    }

    /// Commits after `after_seq`, oldest first, at most `limit`.
    pub fn commits_since(
        &mut self,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<CommitRecord>> {
        self.check_open()?;
        let r = commits_since(&self.conn, &self.path, after_seq, limit);
        self.guard(r)
    }

    pub fn streams(&mut self) -> StoreResult<Vec<StreamState>> {
        self.check_open()?;
        let r = (|| {
            let mut st = self
                .conn
                .prepare_cached(
                    "SELECT stream, head_seq, watermark_seq FROM streams ORDER BY stream",
                )
                .at(&self.path)?;
            let rows = st
                .query_map([], |r| {
                    Ok(StreamState {
                        stream: r.get(0)?,
                        head_seq: r.get::<_, i64>(1)? as u64,
                        watermark_seq: r.get::<_, i64>(2)? as u64,
                    })
                })
                .at(&self.path)?
                .collect::<Result<Vec<_>, _>>()
                .at(&self.path)?;
            Ok(rows)
        })();
        self.guard(r)
    }

    pub fn has_undelivered(&mut self) -> StoreResult<bool> {
        self.check_open()?;
        let r = has_undelivered(&self.conn, &self.path);
        self.guard(r)
    }

    /// Events past their stream's watermark, in seq order, at most `limit`.
    pub fn undelivered_events(&mut self, limit: usize) -> StoreResult<Vec<EventRecord>> {
        self.check_open()?;
        let r = undelivered_events(&self.conn, &self.path, limit);
        self.guard(r)
    }

    pub fn event(&mut self, event_id: &str) -> StoreResult<Option<EventRecord>> {
        self.check_open()?;
        let r = self
            .conn
            .prepare_cached(
                "SELECT event_id, stream, seq, payload, fired_by, fired_at_ms FROM events \
                 WHERE event_id = ?1",
            )
            .and_then(|mut s| s.query_row([event_id], event_from_row).optional())
            .at(&self.path);
        self.guard(r)
    }

    /// Appends one event as an authored commit. Idempotent by `eventId`.
    pub fn append_event(&mut self, author: Author, event: NewEvent) -> StoreResult<CommitOutcome> {
        self.commit(CommitRequest::new(CommitClass::Authored, author).event(event))
    }

    pub fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        self.check_open()?;
        let r = plane::list_schedule(&self.conn, &self.path, piece);
        self.guard(r)
    }

    /// How many schedule entries the space has indexed.
    pub fn schedule_count(&mut self) -> StoreResult<u64> {
        self.scalar("SELECT COUNT(*) FROM schedule_index")
    }

    /// The newest `keep` recorded fires of one schedule entry, oldest first.
    pub fn fires(
        &mut self,
        piece: &str,
        entry: u32,
        keep: usize,
    ) -> StoreResult<Vec<plane::FireRecord>> {
        self.check_open()?;
        let r = plane::list_fires(&self.conn, &self.path, piece, entry, keep);
        self.guard(r)
    }

    /// The most expensive actions by attributed CPU, across windows.
    pub fn action_costs(&mut self, limit: usize) -> StoreResult<Vec<plane::ActionCost>> {
        self.check_open()?;
        let r = plane::list_action_costs(&self.conn, &self.path, limit);
        self.guard(r)
    }

    /// Every derivation node's recorded inputs hash.
    pub fn action_states(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.check_open()?;
        let r = plane::action_states(&self.conn, &self.path);
        self.guard(r)
    }

    /// Applies the retention rule (`StoreConfig::history_commits`): the
    /// operations of commits older than the newest `history_commits` are
    /// deleted (their commit rows stay: who, when, how much), and so are
    /// the payloads of events older than them that were delivered (the
    /// event rows stay: ids must still be recognised as duplicates).
    /// Nothing a resume, an undelivered event or a watermark needs is
    /// touched. Does nothing until half the kept history is new since the
    /// last compaction. Returns the operations and payloads removed.
    pub fn compact_history(&mut self) -> StoreResult<(u64, u64)> {
        let keep = self.shared.cfg.history_commits;
        if keep == 0 {
            return Ok((0, 0));
        }
        let head = self.head_seq()?;
        let done = self.scalar("SELECT compacted_to FROM history")?;
        let cut = head.saturating_sub(keep);
        if cut <= done || cut - done < keep / 2 {
            return Ok((0, 0));
        }
        self.check_open()?;
        let path = self.path.clone();
        let r = (|| {
            let tx = self
                .conn
                .transaction_with_behavior(TransactionBehavior::Immediate)
                .at(&path)?;
            let ops = tx
                .prepare_cached("DELETE FROM commit_ops WHERE seq > ?1 AND seq <= ?2")
                .at(&path)?
                .execute(params![done as i64, cut as i64])
                .at(&path)? as u64;
            // Per stream, through the (stream, seq) index, up to what its
            // watermark says was delivered.
            let streams: Vec<(String, i64)> = tx
                .prepare_cached("SELECT stream, watermark_seq FROM streams")
                .at(&path)?
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .at(&path)?
                .collect::<Result<_, _>>()
                .at(&path)?;
            let mut payloads = 0u64;
            for (stream, watermark) in streams {
                let upto = (cut as i64).min(watermark);
                if upto <= done as i64 {
                    continue;
                }
                payloads += tx
                    .prepare_cached(
                        "UPDATE events SET payload = 'null' WHERE stream = ?1 AND seq > ?2 \
                         AND seq <= ?3 AND payload != 'null'",
                    )
                    .at(&path)?
                    .execute(params![stream, done as i64, upto])
                    .at(&path)? as u64;
            }
            tx.prepare_cached("UPDATE history SET compacted_to = ?1")
                .at(&path)?
                .execute([cut as i64])
                .at(&path)?;
            tx.commit().at(&path)?;
            Ok((ops, payloads))
        })();
        let r = self.guard(r);
        if let Ok((ops, payloads)) = r {
            self.counters.add(Counter::HistoryOpsCompacted, ops as i64);
            self.counters
                .add(Counter::HistoryPayloadsCompacted, payloads as i64);
        }
        r
    }

    /// Undelivered events whose waves failed their tenure.
    pub fn event_failures(&mut self) -> StoreResult<Vec<super::EventFailure>> {
        self.check_open()?;
        let r = super::dead_letters::event_failures(&self.conn, &self.path);
        self.guard(r)
    }

    /// Events consumed without delivery after their retries, oldest first.
    pub fn dead_letters(&mut self) -> StoreResult<Vec<super::DeadLetter>> {
        self.check_open()?;
        let r = super::dead_letters::dead_letters(&self.conn, &self.path);
        self.guard(r)
    }

    pub fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>> {
        self.check_open()?;
        let r = plane::list_ledger(&self.conn, &self.path);
        self.guard(r)
    }

    // ----- the execution lease ------------------------------------------

    /// Takes the space's lease for a new tenure if it is free, expired, or
    /// already ours; `None` when another holder's lease is live.
    pub fn acquire_lease(&mut self) -> StoreResult<Option<Lease>> {
        self.check_open()?;
        let r = self.acquire_inner();
        self.guard(r)
    }

    fn acquire_inner(&mut self) -> StoreResult<Option<Lease>> {
        let now = self.shared.clock.now_ms();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .at(&self.path)?;
        let lease =
            Self::take_lease_with(&tx, &self.path, &self.id, &self.shared, &self.counters, now)?;
        if lease.is_some() {
            tx.commit().at(&self.path)?;
            self.counters.inc(Counter::LeaseAcquired);
        }
        Ok(lease)
    }

    /// The lease for a new tenure, written inside `tx`; `None` when another
    /// holder's lease is live (nothing written).
    fn take_lease_with(
        tx: &Transaction<'_>,
        path: &Path,
        id: &str,
        shared: &StoreShared,
        counters: &SpaceCounters,
        now: u64,
    ) -> StoreResult<Option<Lease>> {
        let holder = shared.holder.clone();
        let ttl = shared.cfg.lease_ttl_ms;
        let current = lease_row(tx, path)?;
        let tenure = match &current {
            Some(l) if l.holder != holder && l.expires_at_ms > now => {
                // A live lease of an earlier instance of this host: that
                // process is dead if we hold the directory's lock.
                if !(shared.cfg.owns_directory && same_host(&l.holder, &holder)) {
                    counters.inc(Counter::LeaseRefused);
                    return Ok(None);
                }
                counters.inc(Counter::LeaseTakenOverFromOwnDeadInstance);
                l.tenure + 1
            }
            Some(l) => {
                // A released lease (expiry 0) is free, not taken over.
                if l.holder != holder && l.expires_at_ms != 0 {
                    counters.inc(Counter::LeaseTakenOver);
                }
                l.tenure + 1
            }
            None => max_tenure_hint(tx, path)? + 1,
        };
        let lease = Lease {
            holder,
            tenure,
            expires_at_ms: now + ttl,
        };
        tx.prepare_cached(
            "INSERT OR REPLACE INTO execution_lease (space, holder, tenure, expires_at_ms) \
             VALUES (?1, ?2, ?3, ?4)",
        )
        .at(path)?
        .execute(params![
            id,
            lease.holder,
            lease.tenure as i64,
            lease.expires_at_ms as i64
        ])
        .at(path)?;
        Ok(Some(lease))
    }

    /// Extends a live lease; `None` when it expired or was taken (the tenure
    /// is over and nothing more from it may commit).
    pub fn renew_lease(&mut self, lease: &Lease) -> StoreResult<Option<Lease>> {
        self.check_open()?;
        let now = self.shared.clock.now_ms();
        let expires = now + self.shared.cfg.lease_ttl_ms;
        // A lease that expired but that nobody took is still this tenure's
        // row: renewing it is as safe as acquiring it afresh (anyone who
        // took it over changed the holder and tenure, and the update below
        // then matches nothing). So a wave that outlived the TTL — a long
        // handler, a stalled machine — still commits when no other host
        // wanted the space meanwhile.
        let was = lease_row(&self.conn, &self.path);
        let was = self.guard(was)?;
        let r = self
            .conn
            .prepare_cached(
                "UPDATE execution_lease SET expires_at_ms = ?1 WHERE holder = ?2 AND tenure = ?3",
            )
            .and_then(|mut s| s.execute(params![expires as i64, lease.holder, lease.tenure as i64]))
            .at(&self.path);
        let n = self.guard(r)?;
        if n == 1 {
            if was.is_some_and(|l| l.expires_at_ms <= now) {
                self.counters.inc(Counter::LeaseRenewedAfterExpiry);
            }
            self.counters.inc(Counter::LeaseRenewed);
            Ok(Some(Lease {
                expires_at_ms: expires,
                ..lease.clone()
            }))
        } else {
            self.counters.inc(Counter::LeaseLost);
            Ok(None)
        }
    }

    /// Gives the lease up. Releasing a lease we no longer hold is a no-op.
    /// The row is kept with an expiry of 0 so tenures keep increasing. Any
    /// "later" move of the directory still owed is made in the same
    /// transaction, so a parking space server writes its file once at the
    /// end.
    pub fn release_lease(&mut self, lease: &Lease) -> StoreResult<()> {
        self.check_open()?;
        let r = self.release_lease_inner(lease);
        if self.guard(r)? == 1 {
            self.counters.inc(Counter::LeaseReleased);
        }
        Ok(())
    }

    fn release_lease_inner(&mut self, lease: &Lease) -> StoreResult<usize> {
        self.write_settling(|tx, path| {
            tx.prepare_cached(
                "UPDATE execution_lease SET expires_at_ms = 0 WHERE holder = ?1 AND tenure = ?2",
            )
            .and_then(|mut s| s.execute(params![lease.holder, lease.tenure as i64]))
            .at(path)
        })
    }

    pub fn current_lease(&mut self) -> StoreResult<Option<Lease>> {
        self.check_open()?;
        let r = lease_row(&self.conn, &self.path);
        self.guard(r)
    }
}

// ----- SQL helpers, all over a plain connection or transaction -------------

fn validate_name(what: &str, s: &str) -> StoreResult<()> {
    if s.is_empty() || s.chars().count() > 512 {
        return Err(StoreError::InvalidCommit(format!(
            "{what} must be 1 to 512 characters (got {})",
            s.chars().count()
        )));
    }
    Ok(())
}

fn check_lease(
    tx: &Transaction<'_>,
    path: &Path,
    lease: Option<&Lease>,
    now_ms: u64,
) -> StoreResult<()> {
    let Some(claim) = lease else {
        return Err(StoreError::NotLeaseHolder(
            "a derived commit must carry the writer's lease".into(),
        ));
    };
    match lease_row(tx, path)? {
        Some(l)
            if l.holder == claim.holder && l.tenure == claim.tenure && l.expires_at_ms > now_ms =>
        {
            Ok(())
        }
        Some(l) if l.holder == claim.holder && l.tenure == claim.tenure => {
            Err(StoreError::NotLeaseHolder(format!(
                "the lease of tenure {} expired at {} (now {now_ms})",
                l.tenure, l.expires_at_ms
            )))
        }
        Some(l) => Err(StoreError::NotLeaseHolder(format!(
            "{} (tenure {}) does not hold the lease; {} holds tenure {}",
            claim.holder, claim.tenure, l.holder, l.tenure
        ))),
        None => Err(StoreError::NotLeaseHolder(format!(
            "{} does not hold the lease; nobody does",
            claim.holder
        ))),
    }
}

/// Whether two lease holders (`host-id/instance-id`) are instances of the
/// same host.
fn same_host(a: &str, b: &str) -> bool {
    match (a.split_once('/'), b.split_once('/')) {
        (Some((ha, _)), Some((hb, _))) => ha == hb,
        _ => false,
    }
}

fn lease_row(conn: &Connection, path: &Path) -> StoreResult<Option<Lease>> {
    conn.prepare_cached("SELECT holder, tenure, expires_at_ms FROM execution_lease LIMIT 1")
        .at(path)?
        .query_row([], |r| {
            Ok(Lease {
                holder: r.get(0)?,
                tenure: r.get::<_, i64>(1)? as u64,
                expires_at_ms: r.get::<_, i64>(2)? as u64,
            })
        })
        .optional()
        .at(path)
}

/// Without a lease row, tenures restart above anything seen; the row is
/// never deleted by us, so this is 0 on a fresh space.
fn max_tenure_hint(conn: &Connection, path: &Path) -> StoreResult<u64> {
    conn.query_row(
        "SELECT COALESCE(MAX(tenure), 0) FROM execution_lease",
        [],
        |r| r.get::<_, i64>(0),
    )
    .map(|v| v as u64)
    .at(path)
}

fn apply_op(
    tx: &Transaction<'_>,
    path: &Path,
    seq: u64,
    idx: usize,
    op: DocOp,
) -> StoreResult<AppliedOp> {
    let kind = op.kind();
    let (doc_id, op_path, new_value) = match op {
        DocOp::Set { id, value } => (id, None, Some(value)),
        DocOp::Delete { id } => (id, None, None),
        DocOp::Patch { id, path: p, value } => {
            let current = read_doc(tx, path, &id)?.map(|d| d.value);
            let patched =
                set_at(current.as_ref(), &p, value).map_err(|reason| StoreError::BadPath {
                    index: idx,
                    doc: id.clone(),
                    reason: format!("path {}: {reason}", display_path(&p)),
                })?;
            (id, Some(p), Some(patched))
        }
    };
    if doc_id.is_empty() {
        return Err(StoreError::InvalidCommit(format!(
            "operation {idx}: document id is empty"
        )));
    }
    let text = new_value.as_ref().map(|v| v.to_string());
    let path_text = op_path
        .as_ref()
        .map(|p| serde_json::to_string(p).unwrap_or_default());
    // The log records what was written: the patch's own value is implied by
    // the document after it, so the log keeps the full new value.
    tx.prepare_cached(
        "INSERT INTO commit_ops (seq, idx, doc_id, op, path, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .at(path)?
    .execute(params![seq as i64, idx as i64, doc_id, kind, path_text, text])
    .at(path)?;
    tx.prepare_cached(
        "INSERT INTO docs (id, value, seq, rev) VALUES (?1, ?2, ?3, 1) \
         ON CONFLICT (id) DO UPDATE SET value = excluded.value, seq = excluded.seq, rev = rev + 1",
    )
    .at(path)?
    .execute(params![doc_id, text, seq as i64])
    .at(path)?;
    Ok(AppliedOp {
        doc_id,
        op: kind,
        path: op_path,
        doc_after: new_value,
    })
}

fn append_event(
    tx: &Transaction<'_>,
    path: &Path,
    seq: u64,
    now_ms: u64,
    e: NewEvent,
) -> StoreResult<EventRecord> {
    tx.prepare_cached(
        "INSERT INTO events (event_id, stream, seq, payload, fired_by, fired_at_ms) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )
    .at(path)?
    .execute(params![
        e.event_id,
        e.stream,
        seq as i64,
        e.payload.to_string(),
        e.fired_by,
        now_ms as i64
    ])
    .at(path)?;
    tx.prepare_cached(
        "INSERT INTO streams (stream, head_seq, watermark_seq) VALUES (?1, ?2, 0) \
         ON CONFLICT (stream) DO UPDATE SET head_seq = excluded.head_seq",
    )
    .at(path)?
    .execute(params![e.stream, seq as i64])
    .at(path)?;
    Ok(EventRecord {
        event_id: e.event_id,
        stream: e.stream,
        seq,
        payload: e.payload,
        fired_by: e.fired_by,
        fired_at_ms: now_ms,
    })
}

/// Test injection (`StoreConfig::refuse_delivering`): whether this
/// transaction, with its watermarks already moved, consumes `event_id`
/// without dead-lettering it.
fn delivers(tx: &Transaction<'_>, path: &Path, event_id: &str) -> StoreResult<bool> {
    tx.prepare_cached(
        "SELECT EXISTS (SELECT 1 FROM events e JOIN streams s ON s.stream = e.stream \
         WHERE e.event_id = ?1 AND s.watermark_seq >= e.seq \
         AND NOT EXISTS (SELECT 1 FROM dead_letters d WHERE d.event_id = e.event_id))",
    )
    .at(path)?
    .query_row([event_id], |r| r.get(0))
    .at(path)
}

fn advance_watermark(
    tx: &Transaction<'_>,
    path: &Path,
    stream: &str,
    to_seq: u64,
) -> StoreResult<()> {
    let row: Option<(i64, i64)> = tx
        .prepare_cached("SELECT head_seq, watermark_seq FROM streams WHERE stream = ?1")
        .at(path)?
        .query_row([stream], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()
        .at(path)?;
    let Some((head, wm)) = row else {
        return Err(StoreError::InvalidCommit(format!(
            "watermark of stream {stream:?}: the stream has no events"
        )));
    };
    let (head, wm) = (head as u64, wm as u64);
    if to_seq > head {
        return Err(StoreError::InvalidCommit(format!(
            "watermark of stream {stream:?} cannot pass its head ({to_seq} > {head})"
        )));
    }
    if to_seq < wm {
        return Err(StoreError::InvalidCommit(format!(
            "watermark of stream {stream:?} cannot move backwards ({to_seq} < {wm})"
        )));
    }
    tx.prepare_cached("UPDATE streams SET watermark_seq = ?2 WHERE stream = ?1")
        .at(path)?
        .execute(params![stream, to_seq as i64])
        .at(path)?;
    Ok(())
}

/// The oldest `limit` undelivered events, in (seq, eventId) order: per
/// stream past its watermark, merged. Two single-table queries instead of
/// a join: a space file is opened for every wake, so every statement is
/// compiled afresh, and the join's planning cost more than running both.
fn undelivered_events(
    conn: &Connection,
    path: &Path,
    limit: usize,
) -> StoreResult<Vec<EventRecord>> {
    let behind: Vec<(String, i64)> = conn
        .prepare_cached("SELECT stream, watermark_seq FROM streams WHERE head_seq > watermark_seq")
        .at(path)?
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .at(path)?
        .collect::<Result<_, _>>()
        .at(path)?;
    let mut out = Vec::new();
    for (stream, watermark) in behind {
        let mut st = conn
            .prepare_cached(
                "SELECT event_id, stream, seq, payload, fired_by, fired_at_ms FROM events \
                 WHERE stream = ?1 AND seq > ?2 ORDER BY seq, event_id LIMIT ?3",
            )
            .at(path)?;
        let rows = st
            .query_map(params![stream, watermark, limit as i64], event_from_row)
            .at(path)?;
        for row in rows {
            out.push(row.at(path)?);
        }
    }
    out.sort_by(|a, b| (a.seq, &a.event_id).cmp(&(b.seq, &b.event_id)));
    out.truncate(limit);
    Ok(out)
}

fn has_undelivered(conn: &Connection, path: &Path) -> StoreResult<bool> {
    conn.prepare_cached("SELECT EXISTS (SELECT 1 FROM streams WHERE head_seq > watermark_seq)")
        .at(path)?
        .query_row([], |r| r.get::<_, bool>(0))
        .at(path)
}

fn read_doc(conn: &Connection, path: &Path, id: &str) -> StoreResult<Option<DocRead>> {
    let row: Option<(Option<String>, i64, i64)> = conn
        .prepare_cached("SELECT value, seq, rev FROM docs WHERE id = ?1")
        .at(path)?
        .query_row([id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .optional()
        .at(path)?;
    match row {
        Some((Some(text), seq, rev)) => {
            let value = serde_json::from_str(&text).map_err(|e| StoreError::Corrupt {
                path: path.to_path_buf(),
                reason: format!("document {id:?} holds invalid JSON: {e}"),
            })?;
            Ok(Some(DocRead {
                value,
                seq: seq as u64,
                rev: rev as u64,
            }))
        }
        _ => Ok(None),
    }
}

fn event_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<EventRecord> {
    let payload: String = r.get(3)?;
    Ok(EventRecord {
        event_id: r.get(0)?,
        stream: r.get(1)?,
        seq: r.get::<_, i64>(2)? as u64,
        payload: serde_json::from_str(&payload).unwrap_or(Value::Null),
        fired_by: r.get(4)?,
        fired_at_ms: r.get::<_, i64>(5)? as u64,
    })
}

fn commits_since(
    conn: &Connection,
    path: &Path,
    after_seq: u64,
    limit: usize,
) -> StoreResult<Vec<CommitRecord>> {
    let mut st = conn
        .prepare_cached(
            "SELECT seq, class, principal, session, at_ms FROM commits WHERE seq > ?1 \
             ORDER BY seq LIMIT ?2",
        )
        .at(path)?;
    let mut commits = st
        .query_map(params![after_seq as i64, limit as i64], |r| {
            Ok(CommitRecord {
                seq: r.get::<_, i64>(0)? as u64,
                class: r.get(1)?,
                principal: r.get(2)?,
                session: r.get(3)?,
                at_ms: r.get::<_, i64>(4)? as u64,
                ops: Vec::new(),
            })
        })
        .at(path)?
        .collect::<Result<Vec<_>, _>>()
        .at(path)?;
    let mut ops = conn
        .prepare_cached(
            "SELECT doc_id, op, path, value FROM commit_ops WHERE seq = ?1 ORDER BY idx",
        )
        .at(path)?;
    for c in &mut commits {
        c.ops = ops
            .query_map([c.seq as i64], |r| {
                let p: Option<String> = r.get(2)?;
                let v: Option<String> = r.get(3)?;
                Ok(LoggedOp {
                    doc_id: r.get(0)?,
                    op: r.get(1)?,
                    path: p.and_then(|s| serde_json::from_str(&s).ok()),
                    value: v.and_then(|s| serde_json::from_str(&s).ok()),
                })
            })
            .at(path)?
            .collect::<Result<Vec<_>, _>>()
            .at(path)?;
    }
    Ok(commits)
}

/// Classifies an error from opening a file: corruption vs anything else.
pub(crate) fn open_error(path: &Path, e: rusqlite::Error) -> StoreError {
    if is_corruption_code(&e) {
        StoreError::Corrupt {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }
    } else {
        StoreError::Sqlite {
            path: path.to_path_buf(),
            source: e,
        }
    }
}
