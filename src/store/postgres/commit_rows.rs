//! The middle of a commit on a fleet's database: the rows `store::commit`
//! asks for, inside the commit's transaction (see `space.rs`, which runs
//! it, and `spec/fleet.md`).

use super::lease;
use super::plane::PgPlane;
use super::pool::Db;
use super::space::read_doc;
use crate::metrics::SpaceCounters;
use crate::store::commit::CommitRows;
use crate::store::error::{PgContext, StoreError, StoreResult};
use crate::store::log::resolve_op;
use crate::store::plane::PlaneRows;
use crate::store::records::{AppliedOp, CommitRequest, DocOp, EventRecord, Lease, NewEvent};

/// A fleet database's SQL for the middle of a commit (`store::commit`),
/// inside its transaction, which holds the space row's lock.
pub(super) struct PgCommit<'a, 'd> {
    pub(super) plane: PgPlane<'a, 'd>,
    pub(super) holder: &'a str,
    pub(super) ttl: f64,
    pub(super) counters: &'a SpaceCounters,
    /// The space's head seq, read under the lock or known (see
    /// [`Known`](super::known::Known)).
    pub(super) head: u64,
    /// What the lock's statement read of the lease (see `commit_inner`).
    pub(super) seen: lease::LeaseSeen,
    /// The leases this process holds, when the one it holds of this space
    /// is fresh enough to work under (a claim's, a moment ago).
    pub(super) adopt: Option<&'a lease::Holds>,
    /// That lease, worked under without reading it: its liveness is among
    /// the transaction's checks (see [`Known`](super::known::Known)).
    pub(super) adopted: Option<Lease>,
    /// The commit's event ids are taken to be new without a read (see
    /// `commit_inner`).
    pub(super) events_new: bool,
}

impl CommitRows for PgCommit<'_, '_> {
    fn check_derived_lease(&mut self, lease: Option<&Lease>) -> StoreResult<()> {
        // commit_inner asked about exactly this lease with the lock.
        let ok = lease.is_some() && matches!(self.seen, lease::LeaseSeen::Live(true));
        if ok {
            return Ok(());
        }
        Err(StoreError::NotLeaseHolder(match lease {
            None => "a derived commit needs a lease".into(),
            Some(l) => format!(
                "the lease of {} at epoch {} is no longer held",
                l.holder, l.tenure
            ),
        }))
    }

    fn take_lease(&mut self) -> StoreResult<Option<Lease>> {
        if let Some(l) = self.adopted.take() {
            return Ok(Some(l));
        }
        let current = match std::mem::replace(&mut self.seen, lease::LeaseSeen::NotRead) {
            lease::LeaseSeen::Row(row) => row,
            // A derived commit that also takes the lease (none does today).
            _ => lease::lock(
                self.plane.db,
                self.plane.space,
                self.holder,
                lease::LeaseAsk::ForTaking,
            )?
            .and_then(|(_, _, seen)| match seen {
                lease::LeaseSeen::Row(row) => row,
                _ => None,
            }),
        };
        lease::take(
            self.plane.db,
            self.plane.space,
            self.holder,
            self.ttl,
            current,
            self.adopt,
            self.counters,
        )
    }

    fn event_seq(&mut self, event_id: &str) -> StoreResult<Option<u64>> {
        if self.events_new {
            return Ok(None);
        }
        Ok(self
            .plane
            .db
            .query_opt(
                "SELECT seq FROM events WHERE space = $1 AND event_id = $2",
                &[&self.plane.space, &event_id],
            )
            .doing("looking up an event")?
            .map(|r| r.get::<_, i64>(0) as u64))
    }

    fn next_seq(&mut self) -> StoreResult<u64> {
        Ok(self.head + 1)
    }

    fn insert_commit(
        &mut self,
        seq: u64,
        req: &CommitRequest,
        now_ms: u64,
        events: usize,
    ) -> StoreResult<()> {
        self.plane.db.defer(
            self.plane.space,
            "commit",
            &["commits"],
            serde_json::json!({
                "seq": seq,
                "class": req.class.as_str(),
                "principal": req.author.principal,
                "session": req.author.session,
                "at_ms": now_ms,
                "op_count": req.ops.len(),
                "event_count": events,
                "epoch": req.lease.as_ref().map(|l| l.tenure),
            }),
        );
        Ok(())
    }

    fn apply_op(&mut self, seq: u64, idx: usize, op: DocOp) -> StoreResult<AppliedOp> {
        apply_op(self.plane.db, self.plane.space, seq, idx, op)
    }

    fn append_event(&mut self, seq: u64, now_ms: u64, e: NewEvent) -> StoreResult<EventRecord> {
        // The event and its stream's head, with the commit's other writes.
        self.plane.db.defer(
            self.plane.space,
            "event",
            &["events", "streams"],
            serde_json::json!({
                "event_id": e.event_id,
                "stream": e.stream,
                "seq": seq,
                "payload": e.payload.to_string(),
                "fired_by": e.fired_by,
                "fired_at_ms": now_ms,
            }),
        );
        Ok(e.appended(seq, now_ms))
    }

    fn advance_watermark(&mut self, stream: &str, to_seq: u64) -> StoreResult<()> {
        // Moved only where allowed (forward, never past the head), with the
        // commit's other writes; a refusal aborts the commit with the
        // check's own error (`StoreError` from SQLSTATE SW001).
        self.plane.db.defer(
            self.plane.space,
            "watermark",
            &["streams"],
            serde_json::json!({ "stream": stream, "to": to_seq }),
        );
        Ok(())
    }

    fn plane(&mut self) -> &mut dyn PlaneRows {
        &mut self.plane
    }
}

fn apply_op(
    tx: &mut Db<'_, postgres::Client>,
    id: &str,
    seq: u64,
    idx: usize,
    op: DocOp,
) -> StoreResult<AppliedOp> {
    let (applied, text, path_text) =
        resolve_op(idx, op, |doc| Ok(read_doc(tx, id, doc)?.map(|d| d.value)))?;
    // Logged and written to its document with the commit's other writes
    // (a later operation's read of the document sends them first).
    tx.defer(
        id,
        "op",
        &["commit_ops", "docs"],
        serde_json::json!({
            "seq": seq,
            "idx": idx,
            "doc_id": applied.doc_id,
            "op": applied.op,
            "path": path_text,
            "value": text,
        }),
    );
    Ok(applied)
}
