//! One space on the PostgreSQL store: commits, reads, events and its
//! lease, with self-fencing, reconnection and bad rows set aside.

use super::commit_rows::PgCommit;
use super::known::Known;
use super::lease;
use super::plane::{self as rows, PgPlane};
use super::pool::{Db, Pooled};
use super::prefetch::{self, Prefetch, TenureReads};
use crate::metrics::{Counter, SpaceCounters};
use crate::store::commit;
use crate::store::contract::SpaceStore;
use crate::store::dead_letters::{DeadLetter, EventFailure};
use crate::store::error::{PgContext, StoreError, StoreResult};
use crate::store::plane::{
    ActionCost, CommitView, FireRecord, HookMemo, LedgerRow, PlaneTx, ScheduleRow,
};
use crate::store::records::{
    CommitClass, CommitOutcome, CommitRecord, CommitRequest, DocRead, EventRecord, Lease, LoggedOp,
    StreamState,
};
use postgres::{GenericClient, Row};

/// How long what [`PgSpace::prefetch_tenure`] read answers reads.
const START_READS_KEPT_MS: u64 = 1_000;

/// One space of the shared database, holding a pooled connection.
pub struct PgSpace {
    id: String,
    /// Where the space lives, for messages.
    path: Box<std::path::Path>,
    counters: SpaceCounters,
    conn: Pooled,
    /// Set when this space's rows failed validation: it is set aside.
    quarantined: Option<Box<str>>,
    /// The lease epoch this handle works under, pinned the first time it
    /// sees one (or takes one): its plane writes are fenced against that
    /// epoch even after the process-wide table moves on (a claim taken and
    /// given back meanwhile), so a stale tenure never writes unfenced.
    tenure: Option<u64>,
    /// What the index hooks remember on this handle.
    memo: HookMemo,
    /// Reads answered without a round trip. (Boxed: the handle's size is
    /// counted.)
    ahead: Box<Ahead>,
    /// What the handle knows of its space, for transactions to rely on.
    known: Option<Box<Known>>,
    /// The lease was given back inside a commit and the tenure goes on
    /// (it parks next, unless work arrives): the head its runtime's state
    /// was built on, followed through this handle's own commits since;
    /// [`MOVED`] once a commit found another writer's. Taking the lease
    /// again is refused unless the space is still at that head: another
    /// host may have held it meanwhile, and a runtime built on what that
    /// host replaced must not commit over it (`spec/fleet.md`).
    released_at: Option<u64>,
}

/// [`PgSpace::released_at`] once another writer moved the space.
const MOVED: u64 = u64::MAX;

/// What a handle read ahead or learned from its own writes (see
/// `prefetch.rs`), so that reads a tenure makes in a row cost no round
/// trip each.
#[derive(Default)]
struct Ahead {
    /// The space's documents as read at once by the first read since this
    /// handle's last commit, while they are few (see [`Prefetch`]); `None`
    /// until that read.
    docs: Option<Prefetch>,
    /// What a tenure's start reads, taken ahead by
    /// [`PgSpace::prefetch_tenure`], and when (monotonic ms); each part
    /// answers one read within [`START_READS_KEPT_MS`], and any write
    /// through the handle forgets them.
    start: Option<(TenureReads, u64)>,
    /// Whether events were left undelivered, as this handle's last commit
    /// read in its own update of the space's row, and when (monotonic ms):
    /// answers the next [`PgSpace::has_undelivered`] within
    /// [`START_READS_KEPT_MS`] (the question a turn asks right after its
    /// wave).
    undelivered: Option<(bool, u64)>,
    /// The next commit reads, if it goes as one call, what a tenure starts
    /// with (at most this many undelivered events): see
    /// [`PgSpace::start_with_next_commit`].
    start_with_commit: Option<usize>,
}

impl PgSpace {
    pub(super) fn new(id: &str, counters: SpaceCounters, conn: Pooled) -> PgSpace {
        PgSpace {
            id: id.to_string(),
            path: std::path::PathBuf::from(format!("postgres: space {id}")).into(),
            counters,
            conn,
            quarantined: None,
            tenure: None,
            memo: HookMemo::default(),
            ahead: Box::default(),
            known: None,
            released_at: None,
        }
    }

    /// What the opening read found (see [`Known`]).
    pub(super) fn know(&mut self, known: Known) {
        self.known = Some(Box::new(known));
    }

    /// A document, from the handle's prefetch when it has one (see
    /// [`Prefetch`]).
    fn read_prefetched(&mut self, doc: &str) -> StoreResult<Option<DocRead>> {
        if self.ahead.docs.is_none() {
            self.ahead.docs = Some(Prefetch::read(&mut self.conn.db(), &self.id)?);
        }
        let Some(Prefetch::Few(docs)) = &self.ahead.docs else {
            return read_doc(&mut self.conn.db(), &self.id, doc);
        };
        match docs.get(doc) {
            Some((Some(text), seq, rev)) => doc_read(&self.id, doc, text, *seq, *rev).map(Some),
            _ => Ok(None),
        }
    }

    /// Reads at once what a tenure's start reads one by one (the documents
    /// and [`TenureReads`], see `prefetch.rs`): one statement instead of
    /// six. `events`: the most undelivered events its first wave reads.
    pub fn prefetch_tenure(&mut self, events: usize) -> StoreResult<()> {
        // Read already by the commit before (`start_with_next_commit`).
        if self.taken(|t| Some(t.action_states.is_some())) == Some(true) {
            return Ok(());
        }
        self.live()?;
        let r = prefetch::read_tenure(&mut self.conn.db(), &self.id, events);
        let (docs, start) = self.guard(r)?;
        self.ahead.docs = Some(docs);
        self.ahead.start = Some((start, self.monotonic_ms()));
        Ok(())
    }

    /// Asks the next commit to read, after its writes and in its own
    /// statement, what [`PgSpace::prefetch_tenure`] would read next (a
    /// tenure's first firing: the tenure starts right after it). Only a
    /// commit that goes as one call reads it; otherwise the tenure's start
    /// reads as usual.
    pub fn start_with_next_commit(&mut self, events: usize) {
        self.ahead.start_with_commit = Some(events);
    }

    /// The schedule as the handle's opening read it, answering the first
    /// read of it within the same second (see `prefetch.rs`).
    pub(super) fn schedule_ahead(&mut self, rows: Vec<ScheduleRow>) {
        let reads = TenureReads {
            schedule: Some(rows),
            schedule_once: true,
            ..TenureReads::default()
        };
        self.ahead.start = Some((reads, self.monotonic_ms()));
    }

    /// A part of what [`PgSpace::prefetch_tenure`] read, once, while it is
    /// fresh (a tenure's start reads it within milliseconds; a read much
    /// later, say an operator's, goes to the database).
    fn taken<T>(&mut self, part: impl FnOnce(&mut TenureReads) -> Option<T>) -> Option<T> {
        let now = self.monotonic_ms();
        match self.ahead.start.as_mut() {
            Some((reads, at)) if now.saturating_sub(*at) <= START_READS_KEPT_MS => part(reads),
            Some(_) => {
                self.ahead.start = None;
                None
            }
            None => None,
        }
    }

    pub fn id(&self) -> &str {
        &self.id
    }

    /// Names the space in messages (it has no file).
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    pub fn counters(&self) -> &SpaceCounters {
        &self.counters
    }

    /// What the directory holds for this space: on PostgreSQL it moves
    /// inside every transaction, so it is the truth already.
    pub fn reconcile_projection(&mut self) -> StoreResult<crate::store::Projection> {
        self.read_rows(|db, id| {
            let r = db
                .query_opt(
                    "SELECT next_wake_ms, undelivered FROM spaces WHERE id = $1",
                    &[&id],
                )
                .doing("reading the space's row")?
                .ok_or_else(|| StoreError::UnknownSpace(id.to_string()))?;
            Ok(crate::store::Projection {
                next_wake_ms: r.get::<_, Option<i64>>(0).map(|v| v.max(0) as u64),
                undelivered: r.get(1),
            })
        })
    }

    pub fn has_undelivered(&mut self) -> StoreResult<bool> {
        let now = self.monotonic_ms();
        if let Some((undelivered, at)) = self.ahead.undelivered.take() {
            if now.saturating_sub(at) <= START_READS_KEPT_MS {
                return Ok(undelivered);
            }
        }
        Ok(self.reconcile_projection()?.undelivered)
    }

    /// The retention rule, as the SQLite backend applies it
    /// ([`crate::store::FileSpace::compact_history`]): operations of commits
    /// older than the newest `history_commits`, and payloads of delivered
    /// events older than them, are removed (their rows stay); nothing until
    /// half the kept history is new. Returns the operations and payloads
    /// removed.
    pub fn compact_history(&mut self) -> StoreResult<(u64, u64)> {
        let keep = self.conn.pool.cfg.history_commits;
        if keep == 0 {
            return Ok((0, 0));
        }
        let counters = self.counters.clone();
        let r = self.read_rows(|db, id| {
            let r = db
                .query_one(
                    "SELECT head_seq, compacted_to FROM spaces WHERE id = $1",
                    &[&id],
                )
                .doing("reading how far history is compacted")?;
            let (head, done) = (r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64);
            let cut = head.saturating_sub(keep);
            if cut <= done || cut - done < keep / 2 {
                return Ok((0, 0));
            }
            let (done, cut) = (done as i64, cut as i64);
            // One statement: the changes commit together. The space's
            // history size (migration 22) loses exactly what was deleted or
            // emptied: the payloads are locked as they are measured, so a
            // second host compacting at once measures none of them again.
            let r = db
                .query_one(
                    "WITH ops AS (DELETE FROM commit_ops WHERE space = $1 AND seq > $2 \
                       AND seq <= $3 RETURNING octet_length(value) AS n), \
                     was AS (SELECT e.event_id, octet_length(e.payload) - 4 AS n \
                       FROM events e JOIN streams s ON s.space = e.space AND s.stream = e.stream \
                       WHERE e.space = $1 AND e.seq > $2 AND e.seq <= LEAST($3, s.watermark_seq) \
                       AND e.payload <> 'null' FOR UPDATE OF e), \
                     payloads AS (UPDATE events e SET payload = 'null' FROM was \
                       WHERE e.space = $1 AND e.event_id = was.event_id RETURNING was.n), \
                     mark AS (UPDATE spaces SET compacted_to = GREATEST(compacted_to, $3), \
                       history_bytes = history_bytes \
                         - (SELECT COALESCE(SUM(n), 0) FROM ops) \
                         - (SELECT COALESCE(SUM(n), 0) FROM payloads) \
                       WHERE id = $1) \
                     SELECT (SELECT count(*) FROM ops), (SELECT count(*) FROM payloads)",
                    &[&id, &done, &cut],
                )
                .doing("compacting history")?;
            Ok((r.get::<_, i64>(0) as u64, r.get::<_, i64>(1) as u64))
        });
        if let Ok((ops, payloads)) = r {
            counters.add(Counter::HistoryOpsCompacted, ops as i64);
            counters.add(Counter::HistoryPayloadsCompacted, payloads as i64);
        }
        r
    }

    fn ttl_ms(&self) -> f64 {
        self.conn.pool.lease_ttl_ms as f64
    }

    fn holder(&self) -> String {
        self.conn.pool.holder.clone()
    }

    /// Replaces a connection that broke (the server restarted, the
    /// network dropped) with a fresh one from the pool: the operation that
    /// met the break failed, with nothing of it committed; the next one
    /// runs on a new connection.
    fn live(&mut self) -> StoreResult<()> {
        if let Some(reason) = &self.quarantined {
            return Err(StoreError::Quarantined {
                space: self.id.clone(),
                reason: reason.to_string(),
                path: "the PostgreSQL store (spaces.quarantined)".into(),
            });
        }
        if self.conn.ensure()? {
            self.counters.inc(Counter::PgReconnects);
        }
        Ok(())
    }

    /// Gives this space's connection back to the pool until its next
    /// operation (the facade does after each one).
    pub fn idle(&mut self) {
        self.conn.release();
    }

    /// Sets the space aside when an operation found its rows invalid (a
    /// document that is not JSON): its `spaces` row names the reason, every
    /// host then refuses it, and the other spaces keep serving — the
    /// equivalent of moving a corrupt SQLite file to `quarantine/`.
    fn guard<T>(&mut self, r: StoreResult<T>) -> StoreResult<T> {
        if r.is_err() {
            // A failed transaction may have left hooks remembering rows it
            // did not commit, and what the handle knew may be what failed.
            self.memo.clear();
            self.known = None;
        }
        if let Err(StoreError::Stale(_)) = &r {
            self.counters.inc(Counter::PgStaleRefused);
        }
        match r {
            Err(e) if e.is_corruption() => {
                let reason = e.to_string();
                self.quarantined = Some(reason.as_str().into());
                let marked = self.conn.pool.take().and_then(|mut c| {
                    c.db()
                        .execute(
                            "UPDATE spaces SET quarantined = $2 WHERE id = $1",
                            &[&self.id, &reason],
                        )
                        .doing("setting a space aside")
                });
                self.counters.inc(Counter::SpacesQuarantined);
                tracing::error!(space = %self.id, reason, "space set aside");
                Err(StoreError::Corrupt {
                    path: format!("postgres: space {}", self.id).into(),
                    reason: match marked {
                        Ok(_) => format!("{reason}; the space is set aside"),
                        Err(m) => format!("{reason}; setting it aside failed: {m}"),
                    },
                })
            }
            other => other,
        }
    }

    /// Tells this process's waker that the space needs a host sooner.
    fn tell_earlier(&self, at: Option<u64>) {
        let Some(at) = at else { return };
        let f = self
            .conn
            .pool
            .on_earlier
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        if let Some(f) = f {
            f(&self.id, at);
        }
    }

    /// The epoch this process holds of this space's lease, and when its
    /// last renewal was sent ([`lease::Holds`]).
    fn held(&self) -> Option<(u64, u64)> {
        self.conn.pool.held.get(&self.id)
    }

    fn monotonic_ms(&self) -> u64 {
        self.conn.pool.clock.monotonic_ms()
    }

    /// Locks the space's row for the rest of `tx` (see [`lease::lock`]):
    /// its newest seq, when it needs a host (`wake_at_ms`), and what `ask`
    /// wanted to know of the lease.
    fn lock_space(
        tx: &mut Db<'_, postgres::Client>,
        id: &str,
        holder: &str,
        ask: lease::LeaseAsk<'_>,
    ) -> StoreResult<(u64, Option<i64>, lease::LeaseSeen)> {
        lease::lock(tx, id, holder, ask)?.ok_or_else(|| StoreError::UnknownSpace(id.to_string()))
    }

    /// Like [`SpaceStore::commit`], with `extra` running inside the same
    /// transaction after the index hooks (the firing of a schedule entry:
    /// advance the entry and append its event, atomically). An error from
    /// `extra` aborts the commit.
    pub fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
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

    /// Runs `f` in a plane-only transaction (no commit, no seq): schedule
    /// state, ledger, policy, dead letters. It holds the space's row lock,
    /// and moves `next_wake_ms` with the schedule in the same transaction.
    /// While this handle holds the space's lease, the transaction first
    /// checks that the database still shows it (holder, epoch, expiry) and
    /// is refused otherwise: a host that lost its lease writes no plane row.
    pub fn plane<T>(
        &mut self,
        f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        let r = self.plane_inner(f);
        self.guard(r)
    }

    fn plane_inner<T>(
        &mut self,
        f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.live()?;
        // The schedule, failures and action states taken ahead may change.
        self.ahead.start = None;
        let id = self.id.clone();
        let holder = self.holder();
        let held = match (self.tenure, self.held().map(|h| h.0)) {
            (Some(pinned), _) => Some(pinned),
            (None, seen) => {
                self.tenure = seen;
                seen
            }
        };
        let counters = self.counters.clone();
        // What the body relies on, checked as the space is locked: the
        // lease it works under and, under one, the schedule it knows.
        let mut known = self.known.take();
        let mut check = serde_json::json!({});
        if let Some(epoch) = held {
            check["live"] = serde_json::json!([holder, epoch]);
        }
        let relied = held.is_some() && known.is_some();
        match (relied, &known) {
            (true, Some(k)) => check["rev"] = k.rev.into(),
            _ => self.known = known.take(),
        }
        let mut db = self.conn.db();
        db.defer_begin(&id, check);
        let mut plane_rows = PgPlane::new(&mut db, &id);
        plane_rows.known = known.as_ref().map(|k| &k.schedule[..]);
        let mut plane = PlaneTx::new(&mut plane_rows, &id, &mut self.memo);
        let out = f(&mut plane);
        let touched = plane.schedule_touched;
        let (upserts, reshaped) = (plane_rows.upserts, plane_rows.reshaped);
        let out = out.and_then(|out| {
            if touched {
                db.defer(&id, "next_wake", &["spaces"], serde_json::json!({}));
            }
            Ok((out, db.commit().doing("writing the plane's rows")?))
        });
        drop(db);
        let (out, sent) = match out {
            Ok(v) => v,
            Err(e) => {
                if held.is_some() && matches!(e, StoreError::NotLeaseHolder(_)) {
                    counters.inc(Counter::PlaneWritesRefused);
                }
                return Err(e);
            }
        };
        let earlier = touched
            .then(|| earlier_wake(before(&sent), &sent, &counters))
            .flatten();
        match known {
            Some(k) => self.known = k.after(&sent, None, &upserts, reshaped),
            // What the handle knows is not what it knew when the schedule moved.
            None if touched => self.known = None,
            None => {}
        }
        self.tell_earlier(earlier);
        Ok(out)
    }

    fn commit_inner(
        &mut self,
        mut req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        self.live()?;
        let start_events = self.ahead.start_with_commit.take();
        // Whatever it writes, the documents read before are not the truth.
        *self.ahead = Ahead::default();
        let id = self.id.clone();
        let holder = self.holder();
        let ttl = self.ttl_ms();
        let counters = self.counters.clone();
        if req.class == CommitClass::Derived {
            let (now, ttl_ms) = (self.monotonic_ms(), self.conn.pool.lease_ttl_ms);
            let holds = &self.conn.pool.held;
            if let Some(l) =
                (req.lease.as_ref()).filter(|l| holds.self_fenced(&id, l, &holder, now, ttl_ms))
            {
                counters.inc(Counter::LeaseSelfFenced);
                counters.inc(Counter::DerivedRefused);
                return Err(StoreError::NotLeaseHolder(format!(
                    "this host's clock says the lease at epoch {} may have expired \
                     (no renewal for {} ms of its {} ms TTL)",
                    l.tenure,
                    now - self.held().map_or(0, |h| h.1),
                    ttl_ms
                )));
            }
        }
        let sent_ms = self.monotonic_ms();
        let hooks = self
            .conn
            .pool
            .hooks
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        // Commit and event times are on the host's (injected) clock, as on
        // SQLite; only lease expiry is arbitrated by the database's.
        let now_ms = self.conn.pool.clock.now_ms() as i64;
        let pool = self.conn.pool.clone();
        // Only a claim taken within a quarter of the TTL is worked under
        // (see `lease::take`): a tenure starts with most of its lease ahead.
        let fresh_hold = self
            .held()
            .filter(|(_, sent)| sent_ms.saturating_sub(*sent) < pool.lease_ttl_ms / 4)
            .map(|h| h.0);
        let known = self.known.take();
        // Relying on what the handle knows (checked as the transaction
        // locks the space) instead of reading under the lock. Not outside
        // a tenure: a handle holding no lease is not the space's only
        // writer. A taking relies on it only to work under its claim's
        // lease. Never a client's commit: it is not the host's to retry,
        // and one refused because something else wrote the space would
        // reach the client as an error where reading first succeeds.
        let released_at = self.released_at;
        let relies = known
            .as_ref()
            .filter(|k| released_at.is_none_or(|h| h == k.head))
            .filter(|_| match req.class {
                CommitClass::Authored => false,
                _ if req.take_lease => fresh_hold.is_some(),
                CommitClass::Derived => req.lease.is_some(),
                CommitClass::System => self.tenure.is_some(),
            });
        let mut db = self.conn.db();
        let (head, wake_before, seen, adopted) = match relies {
            Some(k) => {
                let mut check = serde_json::json!({ "head": k.head, "rev": k.rev });
                let mut seen = lease::LeaseSeen::NotRead;
                if let (CommitClass::Derived, Some(l)) = (&req.class, &req.lease) {
                    check["live"] = serde_json::json!([l.holder, l.tenure]);
                    seen = lease::LeaseSeen::Live(true);
                }
                let adopted = fresh_hold.filter(|_| req.take_lease).map(|epoch| {
                    check["adopt"] = serde_json::json!([holder, epoch]);
                    Lease {
                        holder: holder.clone(),
                        tenure: epoch,
                        // Its expiry comes back with the checks.
                        expires_at_ms: 0,
                    }
                });
                db.defer_begin(&id, check);
                if let Some(events) = start_events {
                    let (docs, limit) = prefetch::start_limits(events);
                    db.read_start(docs, limit);
                }
                (k.head, None, seen, adopted)
            }
            None => {
                db.begin().doing("beginning a commit")?;
                // The lease question the commit will ask, answered with the lock.
                let ask = match (&req.class, &req.lease) {
                    (CommitClass::Derived, Some(l)) => lease::LeaseAsk::IsLive(&l.holder, l.tenure),
                    _ if req.take_lease => lease::LeaseAsk::ForTaking,
                    _ => lease::LeaseAsk::Nothing,
                };
                let (head, wake, seen) = Self::lock_space(&mut db, &id, &holder, ask)?;
                (head, wake, seen, None)
            }
        };
        if req.take_lease && refuses_retake(released_at, head, &counters) {
            // As `acquire_lease` refuses it (a firing after its tenure gave
            // the lease back, and another host wrote meanwhile).
            return Err(StoreError::Stale(format!(
                "space {id} was written by another host since this tenure gave its lease back"
            )));
        }
        let relied = relies.is_some();
        let mut rows = PgCommit {
            plane: PgPlane::new(&mut db, &id),
            holder: &holder,
            ttl,
            counters: &counters,
            head,
            seen,
            adopt: fresh_hold.and(Some(&pool.held)),
            adopted,
            // A firing's event ids are its occurrences': one on record
            // already refuses the commit (the key), and the firing decides
            // again. Others' are looked up (a retried webhook's is
            // answered as a duplicate, not refused).
            events_new: relied && req.class == CommitClass::System,
        };
        rows.plane.known = relies.map(|k| &k.schedule[..]);
        let written = commit::write(
            &mut rows,
            &mut req,
            commit::CommitContext {
                space: &id,
                now_ms: now_ms as u64,
                counters: &counters,
                hooks: &hooks,
                memo: &mut self.memo,
            },
            extra,
        );
        let (upserts, reshaped) = (rows.plane.upserts, rows.plane.reshaped);
        // A derived commit relying on its lease learns it is gone from the
        // checks (before a read, or with the writes): refused and counted
        // as the lock-first check does.
        let refused = |e: StoreError| {
            if relied && req.class == CommitClass::Derived {
                if let StoreError::NotLeaseHolder(_) = e {
                    counters.inc(Counter::DerivedRefused);
                }
            }
            e
        };
        let mut written = written.map_err(&refused)?;
        let (seq, schedule_touched) = (written.seq, written.schedule_touched);

        // The new seq, the directory's undelivered flag and (when the
        // schedule changed) its next wake, in one write of the space's row,
        // and the lease given back when nothing is left undelivered: sent
        // with the commit's other writes, in one statement.
        db.defer(
            &id,
            "space_row",
            &["spaces"],
            serde_json::json!({
                "head": seq.unwrap_or(head),
                "touched": schedule_touched,
                // Relying on the handle, the checks' lock sees it.
                "before": wake_before,
            }),
        );
        if let Some(held) = req.lease.as_ref().filter(|_| req.release_lease_if_idle) {
            db.defer(
                &id,
                "release",
                &["execution_lease"],
                serde_json::json!({ "holder": held.holder, "epoch": held.tenure, "if_idle": true }),
            );
        }
        let mut sent = db.commit().doing("writing the commit").map_err(&refused)?;
        drop(db);
        let undelivered = sent["undelivered"].as_bool().unwrap_or(true);
        let earlier = earlier_wake(wake_before.or(before(&sent)), &sent, &counters);
        let released = sent["released"].as_bool().unwrap_or(false);
        if let Some(t) = written.taken.as_mut().filter(|t| t.expires_at_ms == 0) {
            t.expires_at_ms = sent["lease_expires_ms"].as_u64().unwrap_or(0);
        }
        // Known afresh where it was relied on and checked; after a commit
        // that read under the lock, only while the lock found the head it
        // knew and the schedule was not written (the revision it knew was
        // not checked, and stays to be: the revision this commit's row
        // update returned may hold another writer's change).
        let new_head = Some(seq.unwrap_or(head));
        self.known = match relied {
            true => known.and_then(|k| k.after(&sent, new_head, &upserts, reshaped)),
            false => known
                .filter(|k| k.head == head && !schedule_touched)
                .map(|mut k| {
                    k.head = seq.unwrap_or(head);
                    k
                }),
        };
        self.ahead.undelivered = Some((undelivered, self.monotonic_ms()));
        if let (Some(events), Some(start)) = (start_events, sent.get_mut("start")) {
            // What the tenure starts with, as of this commit. The commit
            // stands whatever this holds: rows that do not read are left to
            // the start's own read, which sets the space aside.
            if let Ok((docs, reads)) = prefetch::start_from_json(&id, start.take(), events) {
                self.ahead.docs = Some(docs);
                self.ahead.start = Some((reads, self.monotonic_ms()));
                counters.inc(Counter::PgStartReadWithCommit);
            }
        }
        self.tell_earlier(earlier);
        if let Some(t) = &written.taken {
            // A claim's lease worked under keeps the claim's sending time:
            // self-fencing counts from the request that set its expiry.
            if self.held().map(|h| h.0) != Some(t.tenure) {
                self.conn.pool.held.set(&id, t.tenure, sent_ms);
            }
            self.tenure = Some(t.tenure);
        }
        // Followed through this handle's own commits; another writer's
        // head (seen by a commit that read under the lock) ends it.
        self.released_at = match self.released_at {
            _ if written.taken.is_some() => None,
            Some(h) if h == head => Some(seq.unwrap_or(head)),
            Some(_) => Some(MOVED),
            None => None,
        };
        if released {
            if let Some(l) = &req.lease {
                self.conn.pool.held.clear(&id, l.tenure);
                self.tenure = None;
            }
            self.released_at = Some(seq.unwrap_or(head));
            counters.inc(Counter::LeaseReleased);
            counters.inc(Counter::LeaseReleasedWithWave);
        }
        Ok(written.finish(&req, released, &counters))
    }
}

/// Whether taking the lease again is refused with the space at `head`
/// under the lock: the tenure gave it back at another head
/// ([`PgSpace::released_at`]), so another host wrote the space meanwhile
/// (counted).
fn refuses_retake(released_at: Option<u64>, head: u64, counters: &SpaceCounters) -> bool {
    let refused = released_at.is_some_and(|h| h != head);
    if refused {
        counters.inc(Counter::LeaseRetakeRefused);
    }
    refused
}

/// The space's `wake_at_ms` as the transaction's checks locked it (a
/// transaction relying on the handle: see [`Known`]).
fn before(sent: &serde_json::Value) -> Option<i64> {
    sent["before"].as_i64()
}

/// The space's `wake_at_ms` after an update of its row sent with the
/// gathered writes (`spacewake_write`'s `space_row` and `next_wake`).
fn wake_at(sent: &serde_json::Value) -> Option<i64> {
    sent["wake_at_ms"].as_i64()
}

/// When the space now needs a host, if sooner than `before` (what
/// `spacewake_notice`, migration 17, told the fleet's listeners when the
/// row was updated: a hint only, every waker still finds due spaces by
/// claiming), counted. Not its own events (a wake at 0) when the
/// transaction checked that it holds the space's lease (`sent` has the
/// lease's expiry): those are the holder's to deliver, and no notice went
/// out (migration 23).
fn earlier_wake(
    before: Option<i64>,
    sent: &serde_json::Value,
    counters: &SpaceCounters,
) -> Option<u64> {
    let held = sent["lease_expires_ms"].is_i64();
    let earlier = match (before, wake_at(sent)) {
        (_, None) => None,
        (_, Some(0)) if held => None,
        (None, Some(a)) => Some(a),
        (Some(b), Some(a)) => (a < b).then_some(a),
    };
    if earlier.is_some() {
        counters.inc(Counter::PgWakeNotices);
    }
    earlier.map(|a| a.max(0) as u64)
}

pub(super) fn read_doc<C: GenericClient>(
    c: &mut Db<'_, C>,
    id: &str,
    doc: &str,
) -> StoreResult<Option<DocRead>> {
    let row = c
        .query_opt(
            "SELECT value, seq, rev FROM docs WHERE space = $1 AND id = $2",
            &[&id, &doc],
        )
        .doing("reading a document")?;
    let Some(row) = row else { return Ok(None) };
    let Some(text) = row.get::<_, Option<String>>(0) else {
        return Ok(None);
    };
    doc_read(id, doc, &text, row.get(1), row.get(2)).map(Some)
}

/// A document's row as read: its value parsed (invalid JSON is corruption,
/// and sets the space aside), its seq and rev.
fn doc_read(id: &str, doc: &str, text: &str, seq: i64, rev: i64) -> StoreResult<DocRead> {
    let value = serde_json::from_str(text).map_err(|e| StoreError::Corrupt {
        path: format!("postgres: space {id}").into(),
        reason: format!("document {doc:?} holds invalid JSON: {e}"),
    })?;
    Ok(DocRead {
        value,
        seq: seq as u64,
        rev: rev as u64,
    })
}

fn event_from_row(r: &Row) -> EventRecord {
    crate::store::rows::event_record(r).expect("an event row as selected")
}

/// The plane's rows of this space, read outside any transaction.
impl PgSpace {
    fn read_rows<T>(
        &mut self,
        f: impl FnOnce(&mut Db<'_, postgres::Client>, &str) -> StoreResult<T>,
    ) -> StoreResult<T> {
        self.live()?;
        let r = f(&mut self.conn.db(), &self.id);
        self.guard(r)
    }

    pub fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        // Unlike the other parts, the schedule read ahead answers every
        // read until the handle writes (a tenure's start reads it whole,
        // then the in-flight mark reads its piece's rows): no write but
        // this handle's moves a leased space's schedule, and a write
        // through the handle forgets it.
        let ahead = self.taken(|t| {
            let rows = match t.schedule_once {
                true => t.schedule.take()?,
                false => t.schedule.clone()?,
            };
            Some(match piece {
                None => rows,
                Some(p) => rows.into_iter().filter(|r| r.piece == p).collect(),
            })
        });
        if let Some(rows) = ahead {
            return Ok(rows);
        }
        self.read_rows(|db, id| rows::list_schedule(db, id, piece))
    }

    pub fn schedule_count(&mut self) -> StoreResult<u64> {
        self.read_rows(|db, id| {
            let r = db
                .query_one(
                    "SELECT count(*) FROM schedule_index WHERE space = $1",
                    &[&id],
                )
                .doing("counting schedule entries")?;
            Ok(r.get::<_, i64>(0) as u64)
        })
    }

    /// An entry's newest `keep` fires, oldest first.
    pub fn fires(&mut self, piece: &str, entry: u32, keep: usize) -> StoreResult<Vec<FireRecord>> {
        self.read_rows(|db, id| rows::list_fires(db, id, piece, entry, keep))
    }

    pub fn action_costs(&mut self, limit: usize) -> StoreResult<Vec<ActionCost>> {
        self.read_rows(|db, id| rows::list_action_costs(db, id, limit))
    }

    pub fn action_states(&mut self) -> StoreResult<Vec<(String, String)>> {
        if let Some(v) = self.taken(|t| t.action_states.take()) {
            return Ok(v);
        }
        self.read_rows(rows::action_states)
    }

    pub fn event_failures(&mut self) -> StoreResult<Vec<EventFailure>> {
        if let Some(v) = self.taken(|t| t.event_failures.take()) {
            return Ok(v);
        }
        self.read_rows(rows::event_failures)
    }

    pub fn dead_letters(&mut self) -> StoreResult<Vec<DeadLetter>> {
        self.read_rows(rows::dead_letters)
    }

    pub fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>> {
        self.read_rows(rows::list_ledger)
    }

    /// Bytes the space holds in the database: its documents, its retained
    /// events' payloads and its history's values (what a space's file holds
    /// on SQLite, less indexes and page slack). The documents are summed (a
    /// scan of the space's documents, so the space server measures only now
    /// and then: `spec/storage.md`, *Storage quota*); the history's part is
    /// the running total its writes keep (`spaces.history_bytes`, migration
    /// 22). `octet_length` reads a stored value's size without
    /// decompressing it.
    pub fn bytes_used(&mut self) -> StoreResult<u64> {
        if let Some(v) = self.taken(|t| t.bytes_used.take()) {
            return Ok(v);
        }
        self.read_rows(|db, id| {
            let r = db
                .query_one(
                    "SELECT ((SELECT COALESCE(SUM(octet_length(value)), 0) FROM docs WHERE space = $1) \
                     + (SELECT history_bytes FROM spaces WHERE id = $1))::bigint AS bytes",
                    &[&id],
                )
                .doing("measuring the space")?;
            Ok(r.get::<_, i64>(0).max(0) as u64)
        })
    }
}

impl SpaceStore for PgSpace {
    fn space_id(&self) -> &str {
        &self.id
    }
    fn compact_history(&mut self) -> StoreResult<(u64, u64)> {
        PgSpace::compact_history(self)
    }

    fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        PgSpace::commit_with(self, req, extra)
    }
    fn plane<T>(&mut self, f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>) -> StoreResult<T> {
        PgSpace::plane(self, f)
    }
    fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        PgSpace::schedule(self, piece)
    }
    fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>> {
        PgSpace::ledger(self)
    }
    fn fires(&mut self, piece: &str, entry: u32, keep: usize) -> StoreResult<Vec<FireRecord>> {
        PgSpace::fires(self, piece, entry, keep)
    }
    fn action_states(&mut self) -> StoreResult<Vec<(String, String)>> {
        PgSpace::action_states(self)
    }
    fn event_failures(&mut self) -> StoreResult<Vec<EventFailure>> {
        PgSpace::event_failures(self)
    }
    fn dead_letters(&mut self) -> StoreResult<Vec<DeadLetter>> {
        PgSpace::dead_letters(self)
    }

    fn read(&mut self, doc: &str) -> StoreResult<Option<DocRead>> {
        self.live()?;
        let r = self.read_prefetched(doc);
        self.guard(r)
    }

    fn head_seq(&mut self) -> StoreResult<u64> {
        self.live()?;
        let row = self
            .conn
            .db()
            .query_opt("SELECT head_seq FROM spaces WHERE id = $1", &[&self.id])
            .doing("reading the head seq")?
            .ok_or_else(|| StoreError::UnknownSpace(self.id.clone()))?;
        Ok(row.get::<_, i64>(0) as u64)
    }

    fn commits_since(&mut self, after_seq: u64, limit: usize) -> StoreResult<Vec<CommitRecord>> {
        self.live()?;
        let rows = self
            .conn
            .db()
            .query(
                "SELECT seq, class, principal, session, at_ms FROM commits \
                 WHERE space = $1 AND seq > $2 ORDER BY seq LIMIT $3",
                &[&self.id, &(after_seq as i64), &(limit as i64)],
            )
            .doing("reading the log")?;
        let mut out = Vec::with_capacity(rows.len());
        for r in rows {
            let seq = r.get::<_, i64>(0);
            let ops = self
                .conn
                .db()
                .query(
                    "SELECT doc_id, op, path, value FROM commit_ops \
                     WHERE space = $1 AND seq = $2 ORDER BY idx",
                    &[&self.id, &seq],
                )
                .doing("reading the log")?
                .into_iter()
                .map(|o| LoggedOp {
                    doc_id: o.get(0),
                    op: o.get(1),
                    path: o
                        .get::<_, Option<String>>(2)
                        .and_then(|s| serde_json::from_str(&s).ok()),
                    value: o
                        .get::<_, Option<String>>(3)
                        .and_then(|s| serde_json::from_str(&s).ok()),
                })
                .collect();
            out.push(CommitRecord {
                seq: seq as u64,
                class: r.get(1),
                principal: r.get(2),
                session: r.get(3),
                at_ms: r.get::<_, i64>(4) as u64,
                ops,
            });
        }
        Ok(out)
    }

    fn streams(&mut self) -> StoreResult<Vec<StreamState>> {
        self.live()?;
        Ok(self
            .conn
            .db()
            .query(
                "SELECT stream, head_seq, watermark_seq FROM streams WHERE space = $1 \
                 ORDER BY stream",
                &[&self.id],
            )
            .doing("reading streams")?
            .iter()
            .map(|r| StreamState {
                stream: r.get(0),
                head_seq: r.get::<_, i64>(1) as u64,
                watermark_seq: r.get::<_, i64>(2) as u64,
            })
            .collect())
    }

    fn undelivered_events(&mut self, limit: usize) -> StoreResult<Vec<EventRecord>> {
        if let Some(v) = self.taken(|t| t.undelivered(limit)) {
            return Ok(v);
        }
        self.live()?;
        Ok(self
            .conn
            .db()
            .query(
                "SELECT e.event_id, e.stream, e.seq, e.payload, e.fired_by, e.fired_at_ms \
                 FROM events e JOIN streams s ON s.space = e.space AND s.stream = e.stream \
                 WHERE e.space = $1 AND e.seq > s.watermark_seq \
                 ORDER BY e.seq, e.event_id LIMIT $2",
                &[&self.id, &(limit as i64)],
            )
            .doing("reading undelivered events")?
            .iter()
            .map(event_from_row)
            .collect())
    }

    fn event(&mut self, event_id: &str) -> StoreResult<Option<EventRecord>> {
        self.live()?;
        Ok(self
            .conn
            .db()
            .query_opt(
                "SELECT event_id, stream, seq, payload, fired_by, fired_at_ms FROM events \
                 WHERE space = $1 AND event_id = $2",
                &[&self.id, &event_id],
            )
            .doing("reading an event")?
            .as_ref()
            .map(event_from_row))
    }

    fn acquire_lease(&mut self) -> StoreResult<Option<Lease>> {
        // Another host may have written since: read the documents afresh.
        *self.ahead = Ahead::default();
        self.live()?;
        let id = self.id.clone();
        let holder = self.holder();
        let ttl = self.ttl_ms();
        let sent_ms = self.monotonic_ms();
        let mut db = self.conn.db();
        db.begin().doing("taking the lease")?;
        let (head, _, seen) = Self::lock_space(&mut db, &id, &holder, lease::LeaseAsk::ForTaking)?;
        if refuses_retake(self.released_at, head, &self.counters) {
            // Its runtime is out of date: the tenure ends, and the next
            // activation reads the space afresh.
            return Ok(None);
        }
        let current = match seen {
            lease::LeaseSeen::Row(row) => row,
            _ => unreachable!("asked for the row"),
        };
        let taken = lease::take(&mut db, &id, &holder, ttl, current, None, &self.counters)?;
        if let Some(l) = &taken {
            db.commit().doing("taking the lease")?;
            drop(db);
            self.counters.inc(Counter::LeaseAcquired);
            self.conn.pool.held.set(&id, l.tenure, sent_ms);
            self.tenure = Some(l.tenure);
            self.released_at = None;
        }
        Ok(taken)
    }

    fn renew_lease(&mut self, held: &Lease) -> StoreResult<Option<Lease>> {
        self.live()?;
        let ttl = self.ttl_ms();
        let sent_ms = self.monotonic_ms();
        let renewed = lease::renew(&mut self.conn.db(), &self.id, held, ttl)?;
        if renewed.is_some() {
            self.counters.inc(Counter::LeaseRenewed);
            self.conn.pool.held.set(&self.id, held.tenure, sent_ms);
        }
        Ok(renewed)
    }

    fn release_lease(&mut self, held: &Lease) -> StoreResult<()> {
        self.live()?;
        if lease::release(&mut self.conn.db(), &self.id, held)? == 1 {
            self.counters.inc(Counter::LeaseReleased);
        }
        self.conn.pool.held.clear(&self.id, held.tenure);
        if self.tenure == Some(held.tenure) {
            self.tenure = None;
        }
        Ok(())
    }

    fn current_lease(&mut self) -> StoreResult<Option<Lease>> {
        self.live()?;
        lease::current(&mut self.conn.db(), &self.id)
    }
}
