//! The store's boundary as traits: what a backend gives the layers above
//! for one space ([`SpaceStore`]) and for the set of spaces
//! ([`SpaceBackend`]). The SQLite files ([`super::FileStore`], [`super::FileSpace`])
//! and the shared PostgreSQL database ([`super::postgres::PgStore`]) both
//! implement them, and `tests/store_contract.rs` runs one behavioural suite
//! against each. The rules each implementation keeps are the store's
//! `# Contract` (in `store/mod.rs`).

use super::dead_letters::{DeadLetter, EventFailure};
use super::error::StoreResult;
use super::plane::{CommitView, FireRecord, IndexHook, LedgerRow, PlaneTx, ScheduleRow};
use super::records::{Author, CommitClass, NewEvent, StreamState};
use super::records::{CommitOutcome, CommitRecord, CommitRequest, DocRead, EventRecord, Lease};
use std::sync::Arc;

/// One open space: its commits, reads, events and lease.
pub trait SpaceStore {
    fn space_id(&self) -> &str;

    /// Writes one commit atomically (see the contract's *Commits*,
    /// *Events* and *Fencing*), running the store's index hooks inside it.
    fn commit(&mut self, req: CommitRequest) -> StoreResult<CommitOutcome> {
        self.commit_with(req, |_, _| Ok(()))
    }

    /// Like [`SpaceStore::commit`], with `extra` running in the same
    /// transaction after the index hooks; an error from either writes
    /// nothing.
    fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome>;

    /// Runs `f` in a plane-only transaction (no commit, no seq), keeping
    /// the directory's next wake early-never-late.
    fn plane<T>(&mut self, f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>) -> StoreResult<T>;

    fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>>;
    fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>>;
    fn fires(&mut self, piece: &str, entry: u32, keep: usize) -> StoreResult<Vec<FireRecord>>;
    fn action_states(&mut self) -> StoreResult<Vec<(String, String)>>;
    fn event_failures(&mut self) -> StoreResult<Vec<EventFailure>>;
    fn dead_letters(&mut self) -> StoreResult<Vec<DeadLetter>>;

    /// Applies the retention rule (`StoreConfig::history_commits`): commits
    /// older than the newest `history_commits` lose their operations and
    /// delivered events older than them their payloads (the rows stay);
    /// nothing until half the kept history is new. Returns the operations
    /// and payloads removed.
    fn compact_history(&mut self) -> StoreResult<(u64, u64)>;

    /// Appends one event as an authored commit; idempotent by `eventId`.
    fn append_event(&mut self, author: Author, event: NewEvent) -> StoreResult<CommitOutcome> {
        self.commit(CommitRequest::new(CommitClass::Authored, author).event(event))
    }

    fn read(&mut self, doc: &str) -> StoreResult<Option<DocRead>>;

    /// The newest commit's seq (0 before the first).
    fn head_seq(&mut self) -> StoreResult<u64>;

    /// Commits after `after_seq`, oldest first, at most `limit`.
    fn commits_since(&mut self, after_seq: u64, limit: usize) -> StoreResult<Vec<CommitRecord>>;

    fn streams(&mut self) -> StoreResult<Vec<StreamState>>;

    /// Events past their stream's watermark, in (seq, eventId) order.
    fn undelivered_events(&mut self, limit: usize) -> StoreResult<Vec<EventRecord>>;

    fn event(&mut self, event_id: &str) -> StoreResult<Option<EventRecord>>;

    /// Takes the lease for a new tenure (epoch + 1) if it is free, expired
    /// or ours; `None` while another holder's lease is live.
    fn acquire_lease(&mut self) -> StoreResult<Option<Lease>>;

    /// Extends a live lease; `None` when it expired or was taken.
    fn renew_lease(&mut self, held: &Lease) -> StoreResult<Option<Lease>>;

    /// Gives the lease up (a no-op for a lease no longer held).
    fn release_lease(&mut self, held: &Lease) -> StoreResult<()>;

    fn current_lease(&mut self) -> StoreResult<Option<Lease>>;
}

/// A set of spaces: creating and opening them.
pub trait SpaceBackend {
    type Space: SpaceStore;

    /// Creates a space (refused if it exists).
    fn create(&self, id: &str, owner: &str) -> StoreResult<()>;

    /// Opens a created space.
    fn open(&self, id: &str) -> StoreResult<Self::Space>;

    /// Registers an index hook for every commit through this store.
    fn add_hook(&self, hook: Arc<dyn IndexHook>);

    /// When the directory says space `id` next needs a host for its
    /// schedule: never later than its earliest due entry.
    fn directory_next_wake(&self, id: &str) -> StoreResult<Option<u64>>;
}

impl SpaceStore for super::FileSpace {
    fn space_id(&self) -> &str {
        self.id()
    }
    fn compact_history(&mut self) -> StoreResult<(u64, u64)> {
        super::FileSpace::compact_history(self)
    }
    fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        super::FileSpace::commit_with(self, req, extra)
    }
    fn plane<T>(&mut self, f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>) -> StoreResult<T> {
        super::FileSpace::plane(self, f)
    }
    fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        super::FileSpace::schedule(self, piece)
    }
    fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>> {
        super::FileSpace::ledger(self)
    }
    fn fires(&mut self, piece: &str, entry: u32, keep: usize) -> StoreResult<Vec<FireRecord>> {
        super::FileSpace::fires(self, piece, entry, keep)
    }
    fn action_states(&mut self) -> StoreResult<Vec<(String, String)>> {
        super::FileSpace::action_states(self)
    }
    fn event_failures(&mut self) -> StoreResult<Vec<EventFailure>> {
        super::FileSpace::event_failures(self)
    }
    fn dead_letters(&mut self) -> StoreResult<Vec<DeadLetter>> {
        super::FileSpace::dead_letters(self)
    }
    fn read(&mut self, doc: &str) -> StoreResult<Option<DocRead>> {
        super::FileSpace::read(self, doc)
    }
    fn head_seq(&mut self) -> StoreResult<u64> {
        super::FileSpace::head_seq(self)
    }
    fn commits_since(&mut self, after_seq: u64, limit: usize) -> StoreResult<Vec<CommitRecord>> {
        super::FileSpace::commits_since(self, after_seq, limit)
    }
    fn streams(&mut self) -> StoreResult<Vec<StreamState>> {
        super::FileSpace::streams(self)
    }
    fn undelivered_events(&mut self, limit: usize) -> StoreResult<Vec<EventRecord>> {
        super::FileSpace::undelivered_events(self, limit)
    }
    fn event(&mut self, event_id: &str) -> StoreResult<Option<EventRecord>> {
        super::FileSpace::event(self, event_id)
    }
    fn acquire_lease(&mut self) -> StoreResult<Option<Lease>> {
        super::FileSpace::acquire_lease(self)
    }
    fn renew_lease(&mut self, held: &Lease) -> StoreResult<Option<Lease>> {
        super::FileSpace::renew_lease(self, held)
    }
    fn release_lease(&mut self, held: &Lease) -> StoreResult<()> {
        super::FileSpace::release_lease(self, held)
    }
    fn current_lease(&mut self) -> StoreResult<Option<Lease>> {
        super::FileSpace::current_lease(self)
    }
}

impl SpaceBackend for super::FileStore {
    type Space = super::FileSpace;
    fn create(&self, id: &str, owner: &str) -> StoreResult<()> {
        self.create_space(id, owner)
    }
    fn open(&self, id: &str) -> StoreResult<super::FileSpace> {
        self.open_space(id)
    }
    fn add_hook(&self, hook: Arc<dyn IndexHook>) {
        super::FileStore::add_hook(self, hook)
    }
    fn directory_next_wake(&self, id: &str) -> StoreResult<Option<u64>> {
        Ok(self
            .directory()
            .projection(id)?
            .and_then(|p| p.next_wake_ms))
    }
}
