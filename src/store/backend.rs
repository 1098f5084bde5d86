//! The store as the layers above see it: one [`Store`], [`Space`] and
//! [`Directory`] whichever backend holds the spaces — the SQLite files of
//! one host ([`FileStore`]) or the PostgreSQL database a fleet shares
//! ([`PgStore`]). Each method hands the call to the backend in use; the
//! few that only mean something for files (checkpoints, exclusive access,
//! the directory's deferred moves) do nothing on PostgreSQL, where the
//! directory moves inside each commit's own transaction.

use super::config::StoreConfig;
use super::contract::{SpaceBackend, SpaceStore};
use super::dead_letters::{DeadLetter, EventFailure};
use super::directory::{Discovered, FileDirectory, Projection, SpaceEntry, UpcomingWake};
use super::error::StoreResult;
use super::file_store::{FileStore, WindowSpend};
use super::files::FileAccess;
use super::path::PathSeg;
use super::plane::{
    ActionCost, CommitView, FireRecord, IndexHook, LedgerRow, PlaneTx, ScheduleRow,
};
use super::postgres::{PgSpace, PgStore};
use super::records::{
    Author, CommitOutcome, CommitRecord, CommitRequest, DocRead, EventRecord, Lease, NewEvent,
    StreamState,
};
use super::shared::WakeListener;
use super::space::FileSpace;
use crate::clock::Clock;
use crate::metrics::{Counters, SpaceCounters};
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// The spaces this process serves, in whichever backend holds them.
#[derive(Clone)]
pub enum Store {
    /// One host's data directory of SQLite files (the default).
    Files(FileStore),
    /// A database shared by a fleet of hosts.
    Postgres(PgStore),
}

/// One open space.
pub enum Space {
    Files(FileSpace),
    Postgres(PgSpace),
}

/// The set of spaces and what each needs from a host.
#[derive(Clone, Copy)]
pub enum Directory<'a> {
    Files(&'a FileDirectory),
    Postgres(&'a PgStore),
}

macro_rules! each {
    ($v:expr, $b:ident => $e:expr) => {
        match $v {
            Self::Files($b) => $e,
            Self::Postgres($b) => $e,
        }
    };
}

/// Like `each!`, for an open space: on PostgreSQL its connection goes back
/// to the pool after each operation.
macro_rules! each_space {
    ($v:expr, $b:ident => $e:expr) => {
        match $v {
            Space::Files($b) => $e,
            Space::Postgres($b) => {
                let r = $e;
                $b.idle();
                r
            }
        }
    };
}

/// Like `each!`, for the calls the async edge makes (directory reads on a
/// session's open, the health route): on PostgreSQL they run off the
/// runtime's thread (see [`off_runtime`]).
macro_rules! each_edge {
    ($v:expr, $b:ident => $e:expr) => {
        match $v {
            Self::Files($b) => $e,
            Self::Postgres($b) => off_runtime(|| $e),
        }
    };
}

/// Runs `f` where the synchronous PostgreSQL client may block: that client
/// drives a small runtime of its own, which tokio refuses to start on a
/// thread that is running another runtime's tasks. Called from such a
/// thread (an HTTP or WebSocket handler reading the directory), `f` runs
/// on a scoped thread of its own while the caller waits — the same
/// blocking the SQLite directory's calls make there; everywhere else
/// (space servers, the waker, blocking tasks) it runs in place.
pub fn off_runtime<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    if tokio::runtime::Handle::try_current().is_err() {
        return f();
    }
    std::thread::scope(|s| match s.spawn(f).join() {
        Ok(v) => v,
        Err(panic) => std::panic::resume_unwind(panic),
    })
}

impl Store {
    /// Opens (creating if needed) the SQLite data directory `cfg.data_dir`.
    pub fn open(
        cfg: StoreConfig,
        clock: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> StoreResult<Store> {
        FileStore::open(cfg, clock, counters).map(Store::Files)
    }

    /// Connects to the fleet's PostgreSQL database at `url` (migrating it),
    /// with `cfg`'s lease TTL and holder.
    pub fn open_postgres(
        url: &str,
        cfg: StoreConfig,
        clock: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> StoreResult<Store> {
        PgStore::open_with(url, cfg, clock, counters).map(Store::Postgres)
    }

    /// The SQLite store, when the spaces are files.
    pub fn files(&self) -> Option<&FileStore> {
        match self {
            Store::Files(s) => Some(s),
            Store::Postgres(_) => None,
        }
    }

    /// The PostgreSQL store, when the spaces live in a shared database.
    pub fn postgres(&self) -> Option<&PgStore> {
        match self {
            Store::Files(_) => None,
            Store::Postgres(s) => Some(s),
        }
    }

    pub fn config(&self) -> &StoreConfig {
        each!(self, s => s.config())
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        each!(self, s => s.clock())
    }

    pub fn counters(&self) -> &Arc<Counters> {
        each!(self, s => s.counters())
    }

    pub fn directory(&self) -> Directory<'_> {
        match self {
            Store::Files(s) => Directory::Files(s.directory()),
            Store::Postgres(s) => Directory::Postgres(s),
        }
    }

    /// This process's lease-holder identity.
    pub fn holder(&self) -> &str {
        each!(self, s => s.holder())
    }

    /// Registers the listener told when a space's next wake moves earlier
    /// through this process.
    pub fn set_wake_listener(&self, f: WakeListener) {
        each!(self, s => s.set_wake_listener(f))
    }

    pub fn add_hook(&self, hook: Arc<dyn IndexHook>) {
        each!(self, s => s.add_hook(hook))
    }

    pub fn create_space(&self, id: &str, owner: &str) -> StoreResult<()> {
        each_edge!(self, s => s.create_space(id, owner))
    }

    /// Creates space `id` for `owner` unless `owner` already owns `limit`
    /// spaces (`Ok(Some(owned))`: nothing created). Exact under concurrency
    /// within one host when the caller holds the host's create lock; on a
    /// fleet's database, across every host (`PgStore::create_space_within`).
    pub fn create_space_within(
        &self,
        id: &str,
        owner: &str,
        limit: u64,
    ) -> StoreResult<Option<u64>> {
        match self {
            Store::Postgres(s) => off_runtime(|| s.create_space_within(id, owner, limit)),
            Store::Files(_) => {
                let owned = self.directory().owned_by(owner)?;
                if owned >= limit {
                    return Ok(Some(owned));
                }
                self.create_space(id, owner).map(|()| None)
            }
        }
    }

    /// A space's file (SQLite), or the name of its place in the database.
    pub fn space_path(&self, id: &str) -> PathBuf {
        match self {
            Store::Files(s) => s.space_path(id),
            Store::Postgres(_) => PathBuf::from(format!("postgres: space {id}")),
        }
    }

    /// See [`FileStore::window_spend`].
    pub fn window_spend(&self, id: &str, window_start_ms: u64) -> StoreResult<WindowSpend> {
        each_edge!(self, s => s.window_spend(id, window_start_ms))
    }

    pub fn open_space(&self, id: &str) -> StoreResult<Space> {
        self.open_space_with(id, FileAccess::Shared)
    }

    /// Opens a space; `access` chooses how a SQLite file is shared (a
    /// database row has no such choice).
    pub fn open_space_with(&self, id: &str, access: FileAccess) -> StoreResult<Space> {
        match self {
            Store::Files(s) => s.open_space_with(id, access).map(Space::Files),
            Store::Postgres(s) => off_runtime(|| s.open_space(id)).map(Space::Postgres),
        }
    }
}

impl Space {
    pub fn id(&self) -> &str {
        each!(self, s => s.id())
    }

    /// Where the space lives, for messages: its file, or the database.
    pub fn path(&self) -> &Path {
        each!(self, s => s.path())
    }

    pub fn counters(&self) -> &SpaceCounters {
        each!(self, s => s.counters())
    }

    /// Whether other hosts may write this space's rows between two of this
    /// handle's transactions (a fleet's database), so decisions made on an
    /// earlier read must be checked again inside the transaction that
    /// writes them.
    pub fn shared_by_fleet(&self) -> bool {
        matches!(self, Space::Postgres(_))
    }

    pub fn access(&self) -> FileAccess {
        match self {
            Space::Files(s) => s.access(),
            Space::Postgres(_) => FileAccess::Shared,
        }
    }

    /// See [`FileSpace::share`]; a no-op on PostgreSQL.
    pub fn share(&mut self) -> StoreResult<()> {
        match self {
            Space::Files(s) => s.share(),
            Space::Postgres(_) => Ok(()),
        }
    }

    pub fn commit(&mut self, req: CommitRequest) -> StoreResult<CommitOutcome> {
        self.commit_with(req, |_, _| Ok(()))
    }

    pub fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        each_space!(self, s => s.commit_with(req, extra))
    }

    /// See [`FileSpace::defer_later_moves`]; PostgreSQL moves the directory
    /// inside each transaction, so there is nothing to defer.
    pub fn defer_later_moves(&mut self) {
        if let Space::Files(s) = self {
            s.defer_later_moves()
        }
    }

    pub fn settle_projection(&mut self) -> StoreResult<()> {
        match self {
            Space::Files(s) => s.settle_projection(),
            Space::Postgres(_) => Ok(()),
        }
    }

    pub fn reconcile_projection(&mut self) -> StoreResult<Projection> {
        each_space!(self, s => s.reconcile_projection())
    }

    pub fn plane<T>(
        &mut self,
        f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>,
    ) -> StoreResult<T> {
        each_space!(self, s => s.plane(f))
    }

    pub fn acquire_lease(&mut self) -> StoreResult<Option<Lease>> {
        each_space!(self, s => SpaceStore::acquire_lease(s))
    }

    pub fn renew_lease(&mut self, held: &Lease) -> StoreResult<Option<Lease>> {
        each_space!(self, s => SpaceStore::renew_lease(s, held))
    }

    pub fn release_lease(&mut self, held: &Lease) -> StoreResult<()> {
        each_space!(self, s => SpaceStore::release_lease(s, held))
    }

    pub fn current_lease(&mut self) -> StoreResult<Option<Lease>> {
        each_space!(self, s => SpaceStore::current_lease(s))
    }

    /// See [`FileSpace::defer_checkpoints`]; checkpoints are SQLite's.
    pub fn defer_checkpoints(&mut self, safety_pages: u32) -> StoreResult<()> {
        match self {
            Space::Files(s) => s.defer_checkpoints(safety_pages),
            Space::Postgres(_) => Ok(()),
        }
    }

    pub fn checkpoint_all(&mut self) -> StoreResult<()> {
        match self {
            Space::Files(s) => s.checkpoint_all(),
            Space::Postgres(_) => Ok(()),
        }
    }

    pub fn checkpoint(&mut self) -> StoreResult<()> {
        match self {
            Space::Files(s) => s.checkpoint(),
            Space::Postgres(_) => Ok(()),
        }
    }

    pub fn read(&mut self, id: &str) -> StoreResult<Option<DocRead>> {
        each_space!(self, s => SpaceStore::read(s, id))
    }

    pub fn read_path(&mut self, id: &str, path: &[PathSeg]) -> StoreResult<Option<Value>> {
        Ok(self
            .read(id)?
            .and_then(|d| super::path::get_at(&d.value, path).cloned()))
    }

    pub fn head_seq(&mut self) -> StoreResult<u64> {
        each_space!(self, s => SpaceStore::head_seq(s))
    }

    /// Bytes the space holds: its file's pages in use (see
    /// `FileSpace::bytes_used`, O(1)) or its rows in a fleet's database
    /// (`PgSpace::bytes_used`, a scan of the space's rows).
    pub fn bytes_used(&mut self) -> StoreResult<u64> {
        match self {
            Space::Files(s) => s.bytes_used(),
            Space::Postgres(s) => s.bytes_used(),
        }
    }

    /// Takes ahead, where reads are round trips (a fleet's database), what
    /// a tenure's start reads one by one; `events`: the most undelivered
    /// events its first wave reads. Nothing to do on a space file.
    pub fn prefetch_tenure(&mut self, events: usize) -> StoreResult<()> {
        match self {
            Space::Files(_) => Ok(()),
            Space::Postgres(s) => s.prefetch_tenure(events),
        }
    }

    /// Asks the next commit to bring back what [`Space::prefetch_tenure`]
    /// would read (a fleet's database, where the commit that opens a
    /// tenure can read it in its own statement). Nothing on a space file.
    pub fn start_with_next_commit(&mut self, events: usize) {
        if let Space::Postgres(s) = self {
            s.start_with_next_commit(events);
        }
    }

    /// Whether [`Space::bytes_used`] is a scan rather than a header read.
    pub fn measuring_is_a_scan(&self) -> bool {
        matches!(self, Space::Postgres(_))
    }

    pub fn commits_since(
        &mut self,
        after_seq: u64,
        limit: usize,
    ) -> StoreResult<Vec<CommitRecord>> {
        each_space!(self, s => SpaceStore::commits_since(s, after_seq, limit))
    }

    pub fn streams(&mut self) -> StoreResult<Vec<StreamState>> {
        each_space!(self, s => SpaceStore::streams(s))
    }

    pub fn has_undelivered(&mut self) -> StoreResult<bool> {
        each_space!(self, s => s.has_undelivered())
    }

    pub fn undelivered_events(&mut self, limit: usize) -> StoreResult<Vec<EventRecord>> {
        each_space!(self, s => SpaceStore::undelivered_events(s, limit))
    }

    pub fn event(&mut self, event_id: &str) -> StoreResult<Option<EventRecord>> {
        each_space!(self, s => SpaceStore::event(s, event_id))
    }

    pub fn append_event(&mut self, author: Author, event: NewEvent) -> StoreResult<CommitOutcome> {
        each_space!(self, s => SpaceStore::append_event(s, author, event))
    }

    pub fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        each_space!(self, s => s.schedule(piece))
    }

    pub fn schedule_count(&mut self) -> StoreResult<u64> {
        each_space!(self, s => s.schedule_count())
    }

    pub fn fires(&mut self, piece: &str, entry: u32, keep: usize) -> StoreResult<Vec<FireRecord>> {
        each_space!(self, s => s.fires(piece, entry, keep))
    }

    pub fn action_costs(&mut self, limit: usize) -> StoreResult<Vec<ActionCost>> {
        each_space!(self, s => s.action_costs(limit))
    }

    pub fn action_states(&mut self) -> StoreResult<Vec<(String, String)>> {
        each_space!(self, s => s.action_states())
    }

    /// See [`FileSpace::compact_history`].
    pub fn compact_history(&mut self) -> StoreResult<(u64, u64)> {
        each_space!(self, s => s.compact_history())
    }

    pub fn event_failures(&mut self) -> StoreResult<Vec<EventFailure>> {
        each_space!(self, s => s.event_failures())
    }

    pub fn dead_letters(&mut self) -> StoreResult<Vec<DeadLetter>> {
        each_space!(self, s => s.dead_letters())
    }

    pub fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>> {
        each_space!(self, s => s.ledger())
    }
}

impl std::fmt::Debug for Space {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Space").field("id", &self.id()).finish()
    }
}

impl Directory<'_> {
    pub fn get(&self, id: &str) -> StoreResult<Option<SpaceEntry>> {
        each_edge!(self, d => d.get(id))
    }

    pub fn owned_by(&self, owner: &str) -> StoreResult<u64> {
        each_edge!(self, d => d.owned_by(owner))
    }

    /// All spaces, in id order, one bounded page at a time after `after`.
    pub fn list(&self, after: Option<&str>, limit: usize) -> StoreResult<Vec<SpaceEntry>> {
        each_edge!(self, d => d.list(after, limit))
    }

    pub fn all(&self) -> StoreResult<Vec<SpaceEntry>> {
        each_edge!(self, d => d.all())
    }

    pub fn count(&self) -> StoreResult<u64> {
        each_edge!(self, d => d.count())
    }

    /// Boot discovery: every healthy space with undelivered events or a
    /// wake due at or before `now_ms`.
    pub fn discover(&self, now_ms: u64) -> StoreResult<Vec<Discovered>> {
        each_edge!(self, d => d.discover(now_ms))
    }

    pub fn earliest_wake(&self) -> StoreResult<Option<u64>> {
        each_edge!(self, d => d.earliest_wake())
    }

    /// The next `limit` wakes in time order.
    pub fn upcoming_wakes(&self, limit: usize) -> StoreResult<Vec<UpcomingWake>> {
        each_edge!(self, d => d.upcoming_wakes(limit))
    }

    pub fn settle_no_budget_policy(&self, id: &str) -> StoreResult<()> {
        each_edge!(self, d => d.settle_no_budget_policy(id))
    }

    pub fn projection(&self, id: &str) -> StoreResult<Option<Projection>> {
        each_edge!(self, d => d.projection(id))
    }

    /// Grants `did` access to a space (`"read"` or `"write"`); `None` revokes.
    pub fn set_grant(&self, space: &str, did: &str, access: Option<&str>) -> StoreResult<()> {
        each_edge!(self, d => d.set_grant(space, did, access))
    }

    pub fn grants_version(&self) -> StoreResult<u64> {
        each_edge!(self, d => d.grants_version())
    }

    /// The access `did` has to `space`: `"owner"`, `"write"`, `"read"` or none.
    pub fn access(&self, space: &str, did: &str) -> StoreResult<Option<String>> {
        each_edge!(self, d => d.access(space, did))
    }

    /// Records an accepted operator action by its decoded signature (a
    /// replay is refused across restarts, and across a fleet's hosts);
    /// false when it was recorded already.
    pub fn first_use_of_signature(
        &self,
        signature: &[u8],
        now_ms: u64,
        forget_before_ms: u64,
    ) -> StoreResult<bool> {
        each_edge!(self, d => d.first_use_of_signature(signature, now_ms, forget_before_ms))
    }

    pub fn meta(&self, key: &str) -> StoreResult<Option<String>> {
        each_edge!(self, d => d.meta(key))
    }

    pub fn meta_or_init(&self, key: &str, init: impl FnOnce() -> String) -> StoreResult<String> {
        each!(self, d => d.meta_or_init(key, init))
    }

    /// A full checkpoint of the host file (SQLite; nothing on PostgreSQL).
    pub fn checkpoint_all(&self) -> StoreResult<()> {
        match self {
            Directory::Files(d) => d.checkpoint_all(),
            Directory::Postgres(_) => Ok(()),
        }
    }

    /// The SQLite directory, for what only it has (checkpoint counts,
    /// bulk registration in benchmarks).
    pub fn files(&self) -> Option<&FileDirectory> {
        match self {
            Directory::Files(d) => Some(d),
            Directory::Postgres(_) => None,
        }
    }
}

impl SpaceStore for Space {
    fn space_id(&self) -> &str {
        self.id()
    }
    fn compact_history(&mut self) -> StoreResult<(u64, u64)> {
        Space::compact_history(self)
    }
    fn commit_with(
        &mut self,
        req: CommitRequest,
        extra: impl FnOnce(&CommitView<'_>, &mut PlaneTx<'_>) -> Result<(), String>,
    ) -> StoreResult<CommitOutcome> {
        Space::commit_with(self, req, extra)
    }
    fn plane<T>(&mut self, f: impl FnOnce(&mut PlaneTx<'_>) -> StoreResult<T>) -> StoreResult<T> {
        Space::plane(self, f)
    }
    fn schedule(&mut self, piece: Option<&str>) -> StoreResult<Vec<ScheduleRow>> {
        Space::schedule(self, piece)
    }
    fn ledger(&mut self) -> StoreResult<Vec<LedgerRow>> {
        Space::ledger(self)
    }
    fn fires(&mut self, piece: &str, entry: u32, keep: usize) -> StoreResult<Vec<FireRecord>> {
        Space::fires(self, piece, entry, keep)
    }
    fn action_states(&mut self) -> StoreResult<Vec<(String, String)>> {
        Space::action_states(self)
    }
    fn event_failures(&mut self) -> StoreResult<Vec<EventFailure>> {
        Space::event_failures(self)
    }
    fn dead_letters(&mut self) -> StoreResult<Vec<DeadLetter>> {
        Space::dead_letters(self)
    }
    fn read(&mut self, doc: &str) -> StoreResult<Option<DocRead>> {
        Space::read(self, doc)
    }
    fn head_seq(&mut self) -> StoreResult<u64> {
        Space::head_seq(self)
    }
    fn commits_since(&mut self, after_seq: u64, limit: usize) -> StoreResult<Vec<CommitRecord>> {
        Space::commits_since(self, after_seq, limit)
    }
    fn streams(&mut self) -> StoreResult<Vec<StreamState>> {
        Space::streams(self)
    }
    fn undelivered_events(&mut self, limit: usize) -> StoreResult<Vec<EventRecord>> {
        Space::undelivered_events(self, limit)
    }
    fn event(&mut self, event_id: &str) -> StoreResult<Option<EventRecord>> {
        Space::event(self, event_id)
    }
    fn acquire_lease(&mut self) -> StoreResult<Option<Lease>> {
        Space::acquire_lease(self)
    }
    fn renew_lease(&mut self, held: &Lease) -> StoreResult<Option<Lease>> {
        Space::renew_lease(self, held)
    }
    fn release_lease(&mut self, held: &Lease) -> StoreResult<()> {
        Space::release_lease(self, held)
    }
    fn current_lease(&mut self) -> StoreResult<Option<Lease>> {
        Space::current_lease(self)
    }
}

impl SpaceBackend for Store {
    type Space = Space;
    fn create(&self, id: &str, owner: &str) -> StoreResult<()> {
        self.create_space(id, owner)
    }
    fn open(&self, id: &str) -> StoreResult<Space> {
        self.open_space(id)
    }
    fn add_hook(&self, hook: Arc<dyn IndexHook>) {
        Store::add_hook(self, hook)
    }
    fn directory_next_wake(&self, id: &str) -> StoreResult<Option<u64>> {
        Ok(self
            .directory()
            .projection(id)?
            .and_then(|p| p.next_wake_ms))
    }
}
