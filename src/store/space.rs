//! One space's SQLite file: commits, document reads, stream events and
//! watermarks, and plane-only bookkeeping. The execution lease is in
//! `lease.rs`, the record types in `records.rs`.
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

use super::commit::{self, CommitRows};
use super::config::FaultPoint;
use super::directory::Projection;
use super::error::{SqlContext, StoreError, StoreResult};
use super::files::{FileAccess, WalWatch};
use super::lease::{self, check_lease};
use super::log::{
    advance_watermark, append_event, apply_op, commits_since, delivers, event_from_row,
    has_undelivered, read_doc, undelivered_events,
};
use super::path::{get_at, PathSeg};
use super::plane::{self, CommitView, HookMemo, LedgerRow, PlaneRows, PlaneTx, ScheduleRow};
use super::plane_sqlite::{self, SqlitePlane};
use super::records::{
    AppliedOp, Author, CommitClass, CommitOutcome, CommitRecord, CommitRequest, DocRead,
    EventRecord, Lease, NewEvent, StreamState,
};
use super::shared::StoreShared;
use crate::metrics::{Counter, SpaceCounters};
use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// An open space file. Not `Sync`: a space has one writer thread at a time.
pub struct FileSpace {
    id: String,
    path: PathBuf,
    conn: Connection,
    access: FileAccess,
    /// The WAL's frames after the last commit, and the automatic
    /// checkpoint (SQLite's WAL hook, see `files::WalWatch`). Declared after
    /// `conn`, so it outlives the connection whose hook points at it.
    wal: Box<WalWatch>,
    /// Why the connection is gone (its reopen failed); every call fails.
    lost: Option<String>,
    shared: Arc<StoreShared>,
    counters: SpaceCounters,
    /// What this handle last wrote to (or read from) the directory.
    projection: Projection,
    /// Hold "later" moves of the directory until [`FileSpace::settle_projection`]
    /// (the directory stays early meanwhile, which is always allowed).
    defer_later: bool,
    /// A "later" move is owed to the directory.
    later_pending: bool,
    quarantined: Option<String>,
    /// What the index hooks remember on this handle.
    memo: HookMemo,
    /// The file's page size, once read (it does not change).
    page_size: Option<u64>,
}

impl std::fmt::Debug for FileSpace {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FileSpace").field("id", &self.id).finish()
    }
}

impl Drop for FileSpace {
    fn drop(&mut self) {
        // Best effort: an early directory is allowed, only wasteful.
        let _ = self.settle_projection();
        self.checkpoint_if_large();
        self.counters.add(Counter::SpacesOpen, -1);
        // Closed: its counter set may go once it is no longer recent.
        self.shared.counters.retire_space(&self.id);
    }
}

/// A closing space checkpoints its WAL only past this many frames (256 KiB
/// at the default 4 KiB page). Below it the WAL stays beside the file for
/// the next activation, which saves each short tenure (a scheduled wake)
/// the checkpoint's fsyncs.
pub const CLOSE_CHECKPOINT_FRAMES: u32 = 64;

/// A closing space's WAL file longer than this is truncated when it is
/// checkpointed; shorter, it keeps its length for the next writes (see
/// `FileSpace::checkpoint_if_large`). A parked space keeps at most this
/// much WAL on disk, or at most [`CLOSE_CHECKPOINT_FRAMES`] frames.
pub const KEEP_WAL_BYTES: u64 = 1024 * 1024;

impl FileSpace {
    /// `directory_view`: the space's projection as the directory has it.
    pub(crate) fn new(
        id: String,
        path: PathBuf,
        conn: Connection,
        access: FileAccess,
        shared: Arc<StoreShared>,
        directory_view: Projection,
    ) -> StoreResult<FileSpace> {
        let counters = shared.counters.space(&id);
        counters.inc(Counter::SpacesOpened);
        counters.inc(Counter::SpacesOpen);
        if access == FileAccess::Exclusive {
            counters.inc(Counter::SpacesOpenedExclusive);
        }
        let mut space = FileSpace {
            id,
            path,
            conn,
            access,
            wal: Box::default(),
            lost: None,
            shared,
            counters,
            projection: directory_view,
            defer_later: false,
            later_pending: false,
            quarantined: None,
            memo: HookMemo::default(),
            page_size: None,
        };
        space.wal.watch(&space.conn);
        // Start from the truth in the file; correcting the directory here is
        // safe because no commit of ours is in flight. Usually the directory
        // is right, and a read (no write lock) shows it.
        let read = (|| {
            Ok(Projection {
                next_wake_ms: plane_sqlite::earliest_due(&space.conn, &space.path)?,
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

    /// The page size the file's header gave at open (see `files::FileHeader`).
    pub(crate) fn with_page_size(mut self, page_size: u64) -> Self {
        self.page_size = Some(page_size);
        self
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
        let reopened = self.shared.connect(&self.path, true, FileAccess::Shared);
        match reopened {
            Ok(conn) => {
                self.wal.watch(&conn);
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
        if r.is_err() {
            // A failed transaction may have left hooks remembering rows it
            // did not commit.
            self.memo.clear();
        }
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

    /// Like [`FileSpace::commit`], with `extra` running inside the same
    /// transaction after the index hooks (e.g. the firing of a schedule
    /// entry: advance the entry and append its event, atomically). An error
    /// from `extra` aborts the commit.
    pub fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        self.check_open()?;
        // What would not load again is never written.
        let r = req
            .check_depth()
            .map_err(StoreError::InvalidCommit)
            .and_then(|()| self.commit_inner(req, extra));
        if r.is_err() {
            self.counters.inc(Counter::CommitsRejected);
        }
        self.guard(r)
    }

    fn commit_inner(
        &mut self,
        mut req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        let now_ms = self.shared.clock.now_ms();
        let path = self.path.clone();
        let space_id = self.id.clone();
        let hooks = self
            .shared
            .hooks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let tx = self
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .at(&path)?;
        let mut rows = SqliteCommit {
            plane: SqlitePlane {
                tx: &tx,
                path: &path,
                space: &space_id,
            },
            shared: &self.shared,
            counters: &self.counters,
            now_ms,
        };
        let written = commit::write(
            &mut rows,
            &mut req,
            commit::CommitContext {
                space: &space_id,
                now_ms,
                counters: &self.counters,
                hooks: &hooks,
                memo: &mut self.memo,
            },
            extra,
        )?;
        if let Some(poison) = &self.shared.cfg.refuse_delivering {
            if !req.watermarks.is_empty() && delivers(&tx, &path, poison)? {
                return Err(StoreError::InvalidCommit(format!(
                    "injected: the commit consuming event {poison:?} is refused"
                )));
            }
        }
        if written.policy_touched {
            self.shared.directory.mark_budget_policy(&space_id)?;
        }
        // Always recompute the next wake: another process (an operator's CLI,
        // a second host) may have changed entries since this handle cached it,
        // and a stale value written back could make the directory late.
        let schedule_touched = true;
        // Appending events to a space already known to have undelivered
        // events cannot change that; only watermark moves can clear it.
        let streams_touched = !req.watermarks.is_empty()
            || (!written.records.is_empty() && !self.projection.undelivered);

        let after = Self::projection_in(
            &tx,
            &path,
            self.projection,
            schedule_touched,
            streams_touched,
        )?;
        // The release folded into this commit (see `release_lease_if_idle`).
        let release = match &req.lease {
            Some(held)
                if req.release_lease_if_idle
                    && self.access == FileAccess::Exclusive
                    && !after.undelivered =>
            {
                lease::release(&tx, &path, held)? == 1
            }
            _ => false,
        };
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
        if release {
            // Nobody else writes a file held exclusively, so the directory
            // can move to the committed truth now, without the write-locked
            // transaction a shared file needs (`move_projection_later`).
            self.later_pending = false;
            let truth = after.covered_by_due_wake(now_ms);
            if truth != self.projection {
                self.shared.directory.set_projection(&space_id, truth)?;
                self.counters.inc(Counter::DirectoryMovedLater);
            }
            self.projection = truth;
            self.counters.inc(Counter::LeaseReleased);
            self.counters.inc(Counter::LeaseReleasedWithWave);
        } else {
            self.owe_later(after != early)?;
        }

        Ok(written.finish(&req, release, &self.counters))
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
                plane_sqlite::earliest_due(conn, path)?
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
                next_wake_ms: plane_sqlite::earliest_due(&tx, &path)?,
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
    /// [`FileSpace::settle_projection`] while later moves are deferred.
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
    /// moves the directory later once, at [`FileSpace::settle_projection`],
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
        let mut rows = SqlitePlane {
            tx: &tx,
            path: &path,
            space: &space_id,
        };
        let mut plane = PlaneTx::new(&mut rows, &space_id, &mut self.memo);
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

    // ----- the execution lease (SQL in `lease.rs`) ---------------------------

    /// Takes the space's lease for a new tenure if it is free, expired, or
    /// already ours; `None` when another holder's lease is live.
    pub fn acquire_lease(&mut self) -> StoreResult<Option<Lease>> {
        self.check_open()?;
        let r = lease::acquire(
            &mut self.conn,
            &self.path,
            &self.id,
            &self.shared,
            &self.counters,
        );
        self.guard(r)
    }

    /// Extends a live lease; `None` when it expired or was taken (the tenure
    /// is over and nothing more from it may commit).
    pub fn renew_lease(&mut self, held: &Lease) -> StoreResult<Option<Lease>> {
        self.check_open()?;
        let r = lease::renew(&self.conn, &self.path, &self.shared, &self.counters, held);
        self.guard(r)
    }

    /// Gives the lease up. Releasing a lease we no longer hold is a no-op.
    /// Any "later" move of the directory still owed is made in the same
    /// transaction, so a parking space server writes its file once at the
    /// end.
    pub fn release_lease(&mut self, held: &Lease) -> StoreResult<()> {
        self.check_open()?;
        let r = self.write_settling(|tx, path| lease::release(tx, path, held));
        if self.guard(r)? == 1 {
            self.counters.inc(Counter::LeaseReleased);
        }
        Ok(())
    }

    pub fn current_lease(&mut self) -> StoreResult<Option<Lease>> {
        self.check_open()?;
        let r = lease::lease_row(&self.conn, &self.path);
        self.guard(r)
    }

    // ----- WAL checkpoints -------------------------------------------------

    /// Moves checkpointing off the commit path: SQLite then checkpoints only
    /// when the WAL passes `safety_pages` (a bound on its size), and the
    /// owner calls [`FileSpace::checkpoint`] when idle. A checkpoint syncs the
    /// database file, which would otherwise stall whichever commit crossed
    /// the default threshold.
    pub fn defer_checkpoints(&mut self, safety_pages: u32) -> StoreResult<()> {
        self.check_open()?;
        self.wal.set_autocheckpoint(safety_pages);
        Ok(())
    }

    /// At close: checkpoint the WAL if it holds more than
    /// [`CLOSE_CHECKPOINT_FRAMES`] (connections never checkpoint on close by
    /// themselves; see `FileStore::connect`), and start it over in place.
    /// Best effort: a busy or failed checkpoint leaves the WAL for the next
    /// one, which is always safe.
    ///
    /// The WAL file keeps its length: a RESTART checkpoint, then one small
    /// write (the file's schema version, unchanged), which SQLite writes at the
    /// WAL's start under a new salt, so the next open's recovery reads one
    /// frame and stops at the first stale one. Truncating it instead (what
    /// this did until session 38) cost a herd round that checkpointed
    /// 0.5 ms a wake more and the round after it 0.15 ms more (the truncate
    /// dropping the WAL's cached pages and blocks, the next writes
    /// allocating them again). A WAL file past [`KEEP_WAL_BYTES`] (a busy
    /// tenure's) is still truncated.
    fn checkpoint_if_large(&mut self) {
        if self.quarantined.is_some() || self.lost.is_some() {
            return;
        }
        if self.wal.frames() <= CLOSE_CHECKPOINT_FRAMES {
            return;
        }
        // A checkpoint that waits for readers waits through the busy
        // handler; a closing space must not wait on another process's
        // reader, so it gives up at once and leaves it for next time.
        let _ = self.conn.busy_timeout(std::time::Duration::ZERO);
        let len = std::fs::metadata(super::files::wal_path(&self.path))
            .map(|m| m.len())
            .unwrap_or(0);
        if len > KEEP_WAL_BYTES {
            let _ = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
            return;
        }
        let done = self
            .conn
            .query_row("PRAGMA wal_checkpoint(RESTART)", [], |r| {
                Ok((
                    r.get::<_, i64>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, i64>(2)?,
                ))
            });
        if let Ok((0, frames, copied)) = done {
            if frames > 0 && frames == copied {
                // The version the file has (a file migrated to an earlier
                // target keeps its own).
                let version = self
                    .conn
                    .query_row("PRAGMA user_version", [], |r| r.get::<_, i64>(0));
                if let Ok(v) = version {
                    let _ = self
                        .conn
                        .execute_batch(&format!("PRAGMA user_version = {v};"));
                }
            }
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
                    .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
                        r.get::<_, i64>(0)
                    })
            })
            .at(&self.path);
        if let Ok(0) = r {
            // Nothing left for the close to checkpoint.
            self.wal.forget_frames();
        }
        self.guard(r.map(|_| ()))
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

    /// Bytes the file's pages in use hold: everything stored (documents,
    /// events and their payloads, the log, the plane, indexes), not the
    /// free pages retention left for reuse. Two header reads, O(1): the
    /// storage quota's measure (`spec/storage.md`, *Storage quota*).
    pub fn bytes_used(&mut self) -> StoreResult<u64> {
        // Plain pragmas, the page size taken from the header at open (or
        // read once): every statement a wake runs is compiled afresh on its
        // new connection, and one query over the three pragma functions
        // compiled four.
        let page_size = match self.page_size {
            Some(s) => s,
            None => {
                let s = self.scalar("PRAGMA page_size")?;
                self.page_size = Some(s);
                s
            }
        };
        let pages = self.scalar("PRAGMA page_count")?;
        let free = self.scalar("PRAGMA freelist_count")?;
        Ok(pages.saturating_sub(free) * page_size)
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
        let r = plane_sqlite::list_schedule(&self.conn, &self.path, piece);
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
        let r = plane_sqlite::list_fires(&self.conn, &self.path, piece, entry, keep);
        self.guard(r)
    }

    /// The most expensive actions by attributed CPU, across windows.
    pub fn action_costs(&mut self, limit: usize) -> StoreResult<Vec<plane::ActionCost>> {
        self.check_open()?;
        let r = plane_sqlite::list_action_costs(&self.conn, &self.path, limit);
        self.guard(r)
    }

    /// Every derivation node's recorded inputs hash.
    pub fn action_states(&mut self) -> StoreResult<Vec<(String, String)>> {
        self.check_open()?;
        let r = plane_sqlite::action_states(&self.conn, &self.path);
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
    pub fn event_failures(&mut self) -> StoreResult<Vec<super::dead_letters::EventFailure>> {
        self.check_open()?;
        let r = plane_sqlite::event_failures(&self.conn, &self.path);
        self.guard(r)
    }

    /// Events consumed without delivery after their retries, oldest first.
    pub fn dead_letters(&mut self) -> StoreResult<Vec<super::dead_letters::DeadLetter>> {
        self.check_open()?;
        let r = plane_sqlite::dead_letters(&self.conn, &self.path);
        self.guard(r)
    }

    pub fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>> {
        self.check_open()?;
        let r = plane_sqlite::list_ledger(&self.conn, &self.path);
        self.guard(r)
    }
}

/// A space file's SQL for the middle of a commit (`commit.rs`), inside its
/// transaction.
struct SqliteCommit<'a> {
    plane: SqlitePlane<'a>,
    shared: &'a StoreShared,
    counters: &'a SpaceCounters,
    now_ms: u64,
}

impl CommitRows for SqliteCommit<'_> {
    fn check_derived_lease(&mut self, lease: Option<&crate::store::Lease>) -> StoreResult<()> {
        check_lease(self.plane.tx, self.plane.path, lease, self.now_ms)
    }

    fn take_lease(&mut self) -> StoreResult<Option<crate::store::Lease>> {
        lease::take(
            self.plane.tx,
            self.plane.path,
            self.plane.space,
            self.shared,
            self.counters,
            self.now_ms,
        )
    }

    fn event_seq(&mut self, event_id: &str) -> StoreResult<Option<u64>> {
        let prior: Option<i64> = self
            .plane
            .tx
            .prepare_cached("SELECT seq FROM events WHERE event_id = ?1")
            .at(self.plane.path)?
            .query_row([event_id], |r| r.get(0))
            .optional()
            .at(self.plane.path)?;
        Ok(prior.map(|s| s as u64))
    }

    fn next_seq(&mut self) -> StoreResult<u64> {
        Ok(self
            .plane
            .tx
            .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM commits")
            .at(self.plane.path)?
            .query_row([], |r| r.get::<_, i64>(0))
            .at(self.plane.path)? as u64)
    }

    fn insert_commit(
        &mut self,
        seq: u64,
        req: &CommitRequest,
        now_ms: u64,
        events: usize,
    ) -> StoreResult<()> {
        self.plane
            .tx
            .prepare_cached(
                "INSERT INTO commits (seq, class, principal, session, at_ms, op_count, \
                 event_count) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            )
            .at(self.plane.path)?
            .execute(params![
                seq as i64,
                req.class.as_str(),
                req.author.principal,
                req.author.session,
                now_ms as i64,
                req.ops.len() as i64,
                events as i64
            ])
            .at(self.plane.path)?;
        Ok(())
    }

    fn apply_op(
        &mut self,
        seq: u64,
        idx: usize,
        op: crate::store::DocOp,
    ) -> StoreResult<AppliedOp> {
        apply_op(self.plane.tx, self.plane.path, seq, idx, op)
    }

    fn append_event(&mut self, seq: u64, now_ms: u64, e: NewEvent) -> StoreResult<EventRecord> {
        append_event(self.plane.tx, self.plane.path, seq, now_ms, e)
    }

    fn advance_watermark(&mut self, stream: &str, to_seq: u64) -> StoreResult<()> {
        advance_watermark(self.plane.tx, self.plane.path, stream, to_seq)
    }

    fn plane(&mut self) -> &mut dyn PlaneRows {
        &mut self.plane
    }
}
