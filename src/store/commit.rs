//! The commit, written once for both backends: inside a transaction the
//! backend has opened (and, on PostgreSQL, locked), in order —
//!
//! 1. a derived commit's lease is checked (refused unless it is the live
//!    one); a commit asked to take the lease takes it (refused while another
//!    holder's is live);
//! 2. the events are split into new ones and duplicates (by event id,
//!    against the log and within the request);
//! 3. unless nothing is left to write, the commit gets the next seq, its
//!    row, its operations (each applied to its document and logged), its new
//!    events and its watermark moves;
//! 4. the index hooks, then the caller's extension, run on the plane in the
//!    same transaction (`plane::run_commit_hooks`): an error from either
//!    writes nothing.
//!
//! What differs between the backends is only SQL, behind [`CommitRows`]
//! (as the plane's rows are behind `PlaneRows`); what follows the middle —
//! the directory's projection, folding the lease's release in, the commit
//! itself — is each backend's, since a space file and a fleet's database
//! keep their directory differently.

use super::error::{StoreError, StoreResult};
use super::log::validate_name;
use super::plane::{run_commit_hooks, CommitView, HookMemo, IndexHook, PlaneRows, PlaneTx};
use super::records::{
    AppliedOp, CommitClass, CommitOutcome, CommitRequest, DocOp, EventRecord, Lease, NewEvent,
};
use crate::metrics::{Counter, SpaceCounters};
use std::sync::Arc;

/// One backend's SQL for the middle of a commit, inside its transaction.
pub(crate) trait CommitRows {
    /// Refuses a derived commit unless `lease` is the space's live lease.
    fn check_derived_lease(&mut self, lease: Option<&Lease>) -> StoreResult<()>;
    /// Takes the lease for a new tenure; `None` while another holder's is
    /// live (nothing written).
    fn take_lease(&mut self) -> StoreResult<Option<Lease>>;
    /// The seq at which `event_id` was appended, if it was.
    fn event_seq(&mut self, event_id: &str) -> StoreResult<Option<u64>>;
    /// The seq the next commit gets.
    fn next_seq(&mut self) -> StoreResult<u64>;
    /// The commit's own row (`events`: how many new events it appends).
    fn insert_commit(
        &mut self,
        seq: u64,
        req: &CommitRequest,
        now_ms: u64,
        events: usize,
    ) -> StoreResult<()>;
    /// Applies one operation to its document and logs it.
    fn apply_op(&mut self, seq: u64, idx: usize, op: DocOp) -> StoreResult<AppliedOp>;
    /// Appends a new event and moves its stream's head.
    fn append_event(&mut self, seq: u64, now_ms: u64, e: NewEvent) -> StoreResult<EventRecord>;
    /// Moves a stream's watermark (checked against its head).
    fn advance_watermark(&mut self, stream: &str, to_seq: u64) -> StoreResult<()>;
    /// The plane's rows, in this transaction.
    fn plane(&mut self) -> &mut dyn PlaneRows;
}

/// What the middle of a commit wrote, for the backend to finish with.
#[derive(Debug)]
pub(crate) struct Written {
    /// `None`: nothing to commit (every event a duplicate, no operation).
    pub seq: Option<u64>,
    pub records: Vec<EventRecord>,
    pub duplicates: Vec<(String, u64)>,
    /// The lease taken in this commit.
    pub taken: Option<Lease>,
    /// A hook or the extension wrote `schedule_index`.
    pub schedule_touched: bool,
    /// A policy was written.
    pub policy_touched: bool,
}

/// What a commit is written in: the space, its time, its counters and the
/// hooks that run in it (with what they remember on the handle).
pub(crate) struct CommitContext<'a> {
    pub space: &'a str,
    pub now_ms: u64,
    pub counters: &'a SpaceCounters,
    pub hooks: &'a [Arc<dyn IndexHook>],
    pub memo: &'a mut HookMemo,
}

/// Steps 1-4 of the module's list, over `rows`. `req`'s events and
/// operations are consumed; the rest of it stays for the backend.
pub(crate) fn write<R: CommitRows>(
    rows: &mut R,
    req: &mut CommitRequest,
    cx: CommitContext<'_>,
    extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
) -> StoreResult<Written> {
    let CommitContext {
        space,
        now_ms,
        counters,
        hooks,
        memo,
    } = cx;
    if req.class == CommitClass::Derived {
        rows.check_derived_lease(req.lease.as_ref())
            .inspect_err(|_| counters.inc(Counter::DerivedRefused))?;
    }
    let taken = if req.take_lease {
        let taken = rows.take_lease()?;
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
    let mut fresh: Vec<NewEvent> = Vec::with_capacity(req.events.len());
    let mut duplicates = Vec::new();
    for e in std::mem::take(&mut req.events) {
        validate_name("stream", &e.stream)?;
        validate_name("eventId", &e.event_id)?;
        match rows.event_seq(&e.event_id)? {
            Some(seq) => duplicates.push((e.event_id, seq)),
            None if fresh.iter().any(|f| f.event_id == e.event_id) => {
                duplicates.push((e.event_id, 0))
            }
            None => fresh.push(e),
        }
    }
    counters.add(Counter::EventsDuplicate, duplicates.len() as i64);

    let nothing = req.ops.is_empty() && fresh.is_empty() && req.watermarks.is_empty();
    let mut view_ops: Vec<AppliedOp> = Vec::with_capacity(req.ops.len());
    let mut records: Vec<EventRecord> = Vec::with_capacity(fresh.len());
    let seq = if nothing {
        None
    } else {
        let seq = rows.next_seq()?;
        rows.insert_commit(seq, req, now_ms, fresh.len())?;
        for (idx, op) in std::mem::take(&mut req.ops).into_iter().enumerate() {
            view_ops.push(rows.apply_op(seq, idx, op)?);
        }
        for e in fresh {
            records.push(rows.append_event(seq, now_ms, e)?);
        }
        for (stream, to_seq) in &req.watermarks {
            rows.advance_watermark(stream, *to_seq)?;
        }
        Some(seq)
    };

    let mut plane = PlaneTx::new(rows.plane(), space, memo);
    let view = CommitView {
        space,
        seq: seq.unwrap_or(0),
        class: req.class,
        at_ms: now_ms,
        ops: &view_ops,
        events: &records,
        counters,
    };
    run_commit_hooks(hooks, &view, &mut plane, counters, extra)?;
    Ok(Written {
        seq,
        schedule_touched: plane.schedule_touched,
        policy_touched: plane.policy_touched,
        records,
        duplicates,
        taken,
    })
}

impl Written {
    /// Counts a commit that committed, and says what it did.
    pub(crate) fn finish(
        self,
        req: &CommitRequest,
        lease_released: bool,
        counters: &SpaceCounters,
    ) -> CommitOutcome {
        if self.seq.is_some() {
            counters.inc(match req.class {
                CommitClass::Authored => Counter::CommitsAuthored,
                CommitClass::Derived => Counter::CommitsDerived,
                CommitClass::System => Counter::CommitsSystem,
            });
        }
        counters.add(Counter::EventsAppended, self.records.len() as i64);
        counters.add(Counter::WatermarksAdvanced, req.watermarks.len() as i64);
        if self.taken.is_some() {
            counters.inc(Counter::LeaseAcquired);
        }
        CommitOutcome {
            seq: self.seq,
            appended: self.records.into_iter().map(|r| r.event_id).collect(),
            duplicates: self.duplicates,
            lease: self.taken,
            lease_released,
        }
    }
}
