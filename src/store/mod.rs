//! The store: spaces on SQLite, commits, stream events, the direct-engine
//! plane and the host directory.
//!
//! # API boundary
//! Only this module touches SQL. Everything above it (the serving loop, the
//! scheduler, accounting) speaks in [`Store`], [`Space`], [`Directory`],
//! commits, events and plane rows. A second backend (a shared
//! PostgreSQL-compatible database for multi-host deployments, so hosts share
//! leases and the wake directory) would re-implement these types' methods;
//! nothing above depends on SQLite specifics.
//!
//! # Contract
//! What every backend of the store must keep (the SQLite files are the one
//! built; issue 19's PostgreSQL backend is to keep the same, and the store's
//! behavioural tests are to run against both):
//!
//! - **Commits.** One commit is one transaction: all of its document
//!   operations, event appends, watermark moves, index-hook rows and
//!   extensions (`commit_with`) are applied together or not at all. Its
//!   `seq` is the space's previous highest plus one: space-global, gap-free,
//!   in commit order. A commit with nothing new to write (every event a
//!   duplicate, no operations, no watermarks) writes nothing and has no
//!   `seq`.
//! - **Events** are idempotent by `eventId` within a space: appending a
//!   stored id again appends nothing and answers the `seq` that stored it.
//!   A stream's watermark only moves forward; an event is undelivered while
//!   its `seq` is past its stream's watermark.
//! - **Index hooks** ([`IndexHook`]) run inside the commit's transaction,
//!   after its operations and events, for every commit that has a `seq`; a
//!   hook's error refuses the whole commit. Plane-only transactions
//!   ([`Space::plane`]) have no `seq` and run no hooks.
//! - **The directory is early, never late.** A space's row (next wake,
//!   undelivered) may say it is needed sooner than it is, never later: a
//!   move earlier is written before the space's transaction commits, a move
//!   later only after it and under the space's write lock (so no other
//!   writer's earlier move is overwritten), or — on a file held exclusively,
//!   which no other writer can touch — right after its commit. A crash
//!   between the two leaves the directory early, which costs one needless
//!   look.
//! - **Leases.** One row per space: holder, tenure, expiry on the host
//!   clock. Taking it (alone, or inside a commit: `take_lease`) is refused
//!   while another holder's lease is live, except that a host holding the
//!   data directory's lock takes over its own dead instance's leases at
//!   once. Every taking raises the tenure by one.
//!   Releasing (alone, or inside a commit: `release_lease_if_idle`) sets the
//!   expiry to 0 and keeps the tenure.
//! - **Fencing.** Every derived commit carries its writer's lease and checks
//!   it in its own transaction: holder, tenure and expiry must match the
//!   row, or the commit is refused ([`StoreError::NotLeaseHolder`], counted
//!   `lease.derivedCommitsRefused`). A writer paused past its expiry, or
//!   whose tenure was taken over, cannot write.
//! - **Bad data is set aside.** A space whose file fails its checks is
//!   quarantined (moved aside, named in the directory, counted); the other
//!   spaces keep serving.
//! - **Schemas are numbered migrations** (`schema/`), applied at open; a
//!   schema newer than the binary knows is refused with a message, never
//!   touched.
//!
//! # Layout of a data directory
//! ```text
//! DATA/host.sqlite          the host directory (spaces, projections, host meta)
//! DATA/spaces/ID.sqlite     one file per space (WAL mode)
//! DATA/quarantine/          corrupt space files, set aside with a timestamp
//! ```
//!
//! # Durability
//! Files run in WAL mode. With the default `synchronous = NORMAL` a commit
//! acknowledged to the caller survives the process being killed (the write
//! is in the OS before `COMMIT` returns); a power loss may drop the newest
//! commits but never leaves a partial one. `Synchronous::Full` fsyncs every
//! commit for power-loss durability at a throughput cost.

mod dead_letters;
mod directory;
mod error;
mod lease;
pub mod lock;
mod log;
mod migrate;
pub mod path;
mod plane;
mod records;
mod space;

pub use dead_letters::{DeadLetter, EventFailure};
pub use directory::{Directory, Discovered, Projection, SpaceEntry, UpcomingWake};
pub use error::{StoreError, StoreResult};
pub use migrate::{Migration, HOST_MIGRATIONS, SPACE_MIGRATIONS};
pub use path::PathSeg;
pub use plane::{
    ActionCost, Bucket, CommitView, DeclaredRow, FireRecord, IndexHook, LedgerDelta, LedgerRow,
    PlaneTx, ScheduleRow, ScheduleStatus, PRUNE_EVERY_PERIODS,
};
pub use records::{
    AppliedOp, Author, CommitClass, CommitOutcome, CommitRecord, CommitRequest, DocOp, DocRead,
    EventRecord, Lease, LoggedOp, NewEvent, StreamState,
};
pub use space::{Space, CLOSE_CHECKPOINT_BYTES};

use crate::clock::Clock;
use crate::metrics::{Counter, Counters};
use error::SqlContext;
use rusqlite::Connection;
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// What a space spent in one ledger window ([`Store::window_spend`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowSpend {
    pub scheduled_cpu_us: u64,
    pub session_cpu_us: u64,
}

/// How hard SQLite syncs on commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum Synchronous {
    /// Survives process crashes; may lose the newest commits on power loss.
    #[default]
    Normal,
    /// Fsync on every commit.
    Full,
}

#[derive(Debug, Clone)]
pub struct StoreConfig {
    pub data_dir: PathBuf,
    /// How long an acquired or renewed lease lasts (default 15 s).
    pub lease_ttl_ms: u64,
    /// How often a tenure renews its lease (default 5 s: three renewals per
    /// TTL, so one slow renewal does not lose the space).
    pub lease_renew_ms: u64,
    /// Commits whose operations are kept in the log (the newest ones);
    /// older commits keep their row (who, when, how many operations) and
    /// lose their operations, and delivered events older than them their
    /// payload (`Space::compact_history`). 0 keeps everything.
    pub history_commits: u64,
    pub synchronous: Synchronous,
    /// Overrides the lease holder name (tests run two "hosts" in one process).
    pub holder: Option<String>,
    /// This process holds the data directory's lock ([`lock::DirectoryLock`]),
    /// so no earlier instance of this host is alive: a live lease held by
    /// one of them is taken over at once instead of after its TTL.
    pub owns_directory: bool,
    /// Crash-test injection: fail or abort the process at a named point of
    /// the commit path. Never set in production.
    pub fault: Option<(FaultPoint, FaultAction)>,
    /// Test injection: refuse every commit that consumes the event with
    /// this id without dead-lettering it, as if its wave's commit were
    /// invalid (a poison event). Never set in production.
    pub refuse_delivering: Option<String>,
}

/// Commits whose operations the log keeps by default.
pub const DEFAULT_HISTORY_COMMITS: u64 = 10_000;

/// Points in the commit path where a crash test can stop the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultPoint {
    /// After the directory moved earlier, before the space's SQLite COMMIT.
    BeforeSpaceCommit,
    /// After the space's SQLite COMMIT, before the directory moves later.
    AfterSpaceCommit,
}

/// What happens at a fault point.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultAction {
    /// Return an error, as if the process had died there (in-process tests).
    Error,
    /// Abort the process on the spot (child-process crash tests).
    Abort,
}

impl StoreConfig {
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        StoreConfig {
            data_dir: data_dir.into(),
            lease_ttl_ms: 15_000,
            lease_renew_ms: 5_000,
            synchronous: Synchronous::Normal,
            holder: None,
            owns_directory: false,
            fault: None,
            refuse_delivering: None,
            history_commits: DEFAULT_HISTORY_COMMITS,
        }
    }
}

/// State shared by the store and every open space.
pub(crate) struct StoreShared {
    pub(crate) cfg: StoreConfig,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) directory: Directory,
    pub(crate) hooks: RwLock<Arc<Vec<Arc<dyn IndexHook>>>>,
    pub(crate) counters: Arc<Counters>,
    /// `host-id/instance-id`: who we are when we hold a lease.
    pub(crate) holder: String,
    /// Called after a commit moved a space's next wake earlier (the waker
    /// listens, so it never polls).
    pub(crate) on_earlier: RwLock<Option<WakeListener>>,
}

/// A callback told `(space, new next wake)` when a space's wake moves earlier.
pub type WakeListener = Arc<dyn Fn(&str, u64) + Send + Sync>;

/// How long a connection waits on another's lock before reporting busy.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);

/// How long an exclusive open waits for other connections to close the
/// file before it opens it shared instead.
const EXCLUSIVE_OPEN_WAIT: std::time::Duration = std::time::Duration::from_millis(50);

/// How a space file's connection shares the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileAccess {
    /// Other connections, in this process or others, may read and write
    /// while it is open (SQLite's shared-memory WAL index, `-shm`).
    Shared,
    /// This connection alone until it closes or reopens shared
    /// ([`Space::share`]): SQLite keeps the WAL index in its own memory, so
    /// opening sets up no `-shm` mapping and no transaction takes its file
    /// locks — about a fifth of a scheduled wake's CPU. Anyone else opening
    /// the file meanwhile waits (the busy timeout), so it is for short
    /// tenures: a scheduled wake with nobody attached.
    Exclusive,
}

/// The store of one host: a data directory of spaces.
#[derive(Clone)]
pub struct Store {
    shared: Arc<StoreShared>,
}

impl Store {
    pub fn open(
        cfg: StoreConfig,
        clock: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> StoreResult<Store> {
        configure_sqlite();
        for dir in [
            cfg.data_dir.clone(),
            cfg.data_dir.join("spaces"),
            cfg.data_dir.join("quarantine"),
        ] {
            std::fs::create_dir_all(&dir).map_err(|source| StoreError::Io {
                path: dir.clone(),
                source,
            })?;
        }
        let directory = Directory::open(&cfg.data_dir.join("host.sqlite"))?;
        let host_id = directory.meta_or_init("host_id", || {
            format!("host-{}", hex_id(&rand::random::<[u8; 6]>()))
        })?;
        let holder = cfg
            .holder
            .clone()
            .unwrap_or_else(|| format!("{host_id}/{}", hex_id(&rand::random::<[u8; 6]>())));
        Ok(Store {
            shared: Arc::new(StoreShared {
                cfg,
                clock,
                directory,
                hooks: RwLock::new(Arc::new(Vec::new())),
                counters,
                holder,
                on_earlier: RwLock::new(None),
            }),
        })
    }

    pub fn config(&self) -> &StoreConfig {
        &self.shared.cfg
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.shared.clock
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.shared.counters
    }

    pub fn directory(&self) -> &Directory {
        &self.shared.directory
    }

    /// This process's lease-holder identity.
    pub fn holder(&self) -> &str {
        &self.shared.holder
    }

    /// Registers the listener told when a space's next wake moves earlier.
    pub fn set_wake_listener(&self, f: WakeListener) {
        *self
            .shared
            .on_earlier
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    /// Registers an index hook; it runs inside every later commit.
    pub fn add_hook(&self, hook: Arc<dyn IndexHook>) {
        let mut hooks = self.shared.hooks.write().unwrap_or_else(|p| p.into_inner());
        let mut next = (**hooks).clone();
        next.push(hook);
        *hooks = Arc::new(next);
    }

    pub fn space_path(&self, id: &str) -> PathBuf {
        self.shared
            .cfg
            .data_dir
            .join("spaces")
            .join(format!("{id}.sqlite"))
    }

    /// Creates a space: its file (fully migrated) and its directory row.
    pub fn create_space(&self, id: &str, owner: &str) -> StoreResult<()> {
        validate_space_id(id)?;
        if self.shared.directory.get(id)?.is_some() {
            return Err(StoreError::SpaceExists(id.to_string()));
        }
        let path = self.space_path(id);
        if !path.exists() {
            // Build the file under a private temporary name, then link it into
            // place: a crash never leaves a half-initialised space file, and
            // two processes creating the same space never replace a file the
            // other is already using (linking fails if the name exists).
            let tmp =
                path.with_extension(format!("creating-{}", hex_id(&rand::random::<[u8; 6]>())));
            {
                let mut conn = self.connect(&tmp)?;
                migrate::migrate(&mut conn, &tmp, SPACE_MIGRATIONS, None)?;
                conn.execute_batch("PRAGMA wal_checkpoint(TRUNCATE);")
                    .at(&tmp)?;
            }
            for suffix in ["-wal", "-shm"] {
                let _ = std::fs::remove_file(format!("{}{suffix}", tmp.display()));
            }
            let linked = std::fs::hard_link(&tmp, &path);
            let _ = std::fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
                Err(source) => {
                    return Err(StoreError::Io {
                        path: path.clone(),
                        source,
                    })
                }
            }
        }
        // A file without a directory row (a crash between the two steps) is
        // adopted here.
        self.shared
            .directory
            .insert_space(id, owner, self.shared.clock.now_ms())?;
        // Counted, then its counter set may go at once (a created space
        // is parked): creating spaces keeps no memory per space.
        self.shared.counters.space(id).inc(Counter::SpacesCreated);
        self.shared.counters.retire_space(id);
        Ok(())
    }

    /// The CPU (µs) a space's `scheduled` and `session` buckets spent in
    /// the ledger window starting at `window_start_ms`, read with one query
    /// on a connection of its own, without opening the space (no
    /// migration, no projection, no hooks): for listings of many spaces.
    /// A space held exclusively by a scheduled tenure for more than 50 ms
    /// reads as busy (an error).
    pub fn window_spend(&self, id: &str, window_start_ms: u64) -> StoreResult<WindowSpend> {
        validate_space_id(id)?;
        let path = self.space_path(id);
        let conn = Connection::open_with_flags(
            &path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| error::open_error(&path, e))?;
        conn.busy_timeout(std::time::Duration::from_millis(50))
            .at(&path)?;
        let mut spend = WindowSpend::default();
        let mut stmt = conn
            .prepare("SELECT bucket, cpu_us FROM compute_ledger WHERE window_start_ms = ?1")
            .at(&path)?;
        let rows = stmt
            .query_map([window_start_ms as i64], |r| {
                Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
            })
            .at(&path)?;
        for row in rows {
            let (bucket, cpu) = row.at(&path)?;
            match bucket.as_str() {
                "scheduled" => spend.scheduled_cpu_us += cpu as u64,
                _ => spend.session_cpu_us += cpu as u64,
            }
        }
        Ok(spend)
    }

    /// Opens a registered space's file, upgrading its schema if needed. A
    /// corrupt or truncated file is quarantined and reported with its path.
    pub fn open_space(&self, id: &str) -> StoreResult<Space> {
        self.open_space_with(id, FileAccess::Shared)
    }

    /// [`Store::open_space`], choosing how the file is shared.
    pub fn open_space_with(&self, id: &str, access: FileAccess) -> StoreResult<Space> {
        validate_space_id(id)?;
        let entry = self
            .shared
            .directory
            .get(id)?
            .ok_or_else(|| StoreError::UnknownSpace(id.to_string()))?;
        let path = self.space_path(id);
        if let Some(reason) = entry.quarantined {
            return Err(StoreError::Quarantined {
                space: id.to_string(),
                reason,
                path: self.shared.cfg.data_dir.join("quarantine"),
            });
        }
        match self.open_file(&path, access) {
            Ok((conn, got)) => {
                if got != access {
                    self.shared
                        .counters
                        .space(id)
                        .inc(Counter::SpacesExclusiveFallbacks);
                }
                let view = directory::Projection {
                    next_wake_ms: entry.next_wake_ms,
                    undelivered: entry.undelivered,
                };
                Space::new(id.to_string(), path, conn, got, self.shared.clone(), view)
            }
            Err(e) if e.is_corruption() => {
                let reason = e.to_string();
                let moved = self.shared.quarantine_files(id, &path, &reason);
                Err(StoreError::Corrupt {
                    path,
                    reason: format!("{reason}; moved to {}", moved.display()),
                })
            }
            Err(e) => Err(e),
        }
    }

    /// Returns the connection and the access it got: exclusive access falls
    /// back to shared when the file is not yet in WAL mode, or when another
    /// connection has it open (it would wait for that one to close).
    fn open_file(&self, path: &Path, access: FileAccess) -> StoreResult<(Connection, FileAccess)> {
        let in_wal_mode = check_file(path)?;
        if in_wal_mode && access == FileAccess::Exclusive {
            match self.open_migrated(path, true, FileAccess::Exclusive) {
                Ok(conn) => return Ok((conn, FileAccess::Exclusive)),
                Err(e) if e.is_busy() => {}
                Err(e) => return Err(e),
            }
        }
        let conn = self.open_migrated(path, in_wal_mode, FileAccess::Shared)?;
        Ok((conn, FileAccess::Shared))
    }

    fn open_migrated(
        &self,
        path: &Path,
        in_wal_mode: bool,
        access: FileAccess,
    ) -> StoreResult<Connection> {
        let mut conn = self.shared.connect(path, in_wal_mode, access)?;
        migrate::migrate(&mut conn, path, SPACE_MIGRATIONS, None).map_err(|e| match e {
            StoreError::Sqlite { path, source } => error::open_error(&path, source),
            other => other,
        })?;
        if access == FileAccess::Exclusive {
            // The exclusive lock is taken by the first read (above); from
            // here on, waits are the ordinary ones.
            conn.busy_timeout(BUSY_TIMEOUT).at(path)?;
        }
        Ok(conn)
    }

    fn connect(&self, path: &Path) -> StoreResult<Connection> {
        self.shared.connect(path, false, FileAccess::Shared)
    }
}

impl StoreShared {
    /// Opens a space file's connection. `in_wal_mode`: the file's header
    /// already says WAL (journal mode is persistent), so no `journal_mode`
    /// pragma is needed — and only then may the access be exclusive, which
    /// must be chosen before the first read.
    pub(crate) fn connect(
        &self,
        path: &Path,
        in_wal_mode: bool,
        access: FileAccess,
    ) -> StoreResult<Connection> {
        let conn = Connection::open_with_flags(
            path,
            rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE
                | rusqlite::OpenFlags::SQLITE_OPEN_CREATE
                | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| error::open_error(path, e))?;
        conn.busy_timeout(match access {
            FileAccess::Shared => BUSY_TIMEOUT,
            FileAccess::Exclusive => EXCLUSIVE_OPEN_WAIT,
        })
        .at(path)?;
        let sync = match self.cfg.synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        if in_wal_mode {
            if access == FileAccess::Exclusive {
                conn.execute_batch("PRAGMA locking_mode = EXCLUSIVE;")
                    .at(path)?;
            }
            conn.pragma_update(None, "synchronous", sync).at(path)?;
        } else {
            migrate::enable_wal(&conn, path, sync)?;
        }
        keep_wal_files(&conn, path)?;
        conn.set_prepared_statement_cache_capacity(64);
        Ok(conn)
    }

    pub(crate) fn wake_moved_earlier(&self, space: &str, before: Option<u64>, after: Option<u64>) {
        if let Some(t) = after {
            if before.is_none_or(|b| t < b) {
                let f = self
                    .on_earlier
                    .read()
                    .unwrap_or_else(|p| p.into_inner())
                    .clone();
                if let Some(f) = f {
                    f(space, t);
                }
            }
        }
    }

    /// Fires the configured fault if `at` is its point.
    pub(crate) fn fault(&self, at: FaultPoint) -> StoreResult<()> {
        match self.cfg.fault {
            Some((p, FaultAction::Abort)) if p == at => std::process::abort(),
            Some((p, FaultAction::Error)) if p == at => Err(StoreError::InvalidCommit(format!(
                "injected fault at {at:?}"
            ))),
            _ => Ok(()),
        }
    }

    /// Moves a space's files into `quarantine/`, marks the directory and
    /// counts it. Returns where the main file went. Best effort on the file
    /// moves: the directory mark alone keeps the space from being served.
    pub(crate) fn quarantine_files(&self, id: &str, path: &Path, reason: &str) -> PathBuf {
        let stamp = self.clock.now_ms();
        let dest = self
            .cfg
            .data_dir
            .join("quarantine")
            .join(format!("{id}.{stamp}.sqlite"));
        let _ = std::fs::rename(path, &dest);
        for suffix in ["-wal", "-shm"] {
            let from = PathBuf::from(format!("{}{suffix}", path.display()));
            let to = PathBuf::from(format!("{}{suffix}", dest.display()));
            let _ = std::fs::rename(from, to);
        }
        let _ = self.directory.set_quarantined(id, Some(reason));
        self.counters.space(id).inc(Counter::SpacesQuarantined);
        tracing::error!(space = id, path = %dest.display(), reason, "space file quarantined");
        dest
    }
}

/// Process-wide SQLite settings, applied once before the first connection.
/// Memory statistics are off: with them on, every SQLite allocation takes
/// one global mutex, which space threads contended for in a herd of
/// scheduled wakes. Nothing here reads SQLite's memory statistics.
fn configure_sqlite() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        // SAFETY: sqlite3_config is called before this process opens any
        // connection through the store; if SQLite was initialised already
        // (another user in the process), it returns SQLITE_MISUSE and
        // changes nothing, which is harmless.
        unsafe {
            rusqlite::ffi::sqlite3_config(
                rusqlite::ffi::SQLITE_CONFIG_MEMSTATUS,
                0 as std::ffi::c_int,
            );
        }
    });
}

/// Keeps a space's `-wal` and `-shm` files across closes instead of
/// deleting them at the last close and creating them at the next open.
/// Creating and unlinking two files per activation was about a third of a
/// scheduled wake's CPU (inode allocation on ext4). A parked space keeps a
/// WAL of at most `space::CLOSE_CHECKPOINT_BYTES` and a 32 KiB index.
fn keep_wal_files(conn: &Connection, path: &Path) -> StoreResult<()> {
    let mut on: std::ffi::c_int = 1;
    // SAFETY: the handle is live for the call; PERSIST_WAL reads and writes
    // one int through the pointer, which outlives the call.
    let rc = unsafe {
        rusqlite::ffi::sqlite3_file_control(
            conn.handle(),
            c"main".as_ptr(),
            rusqlite::ffi::SQLITE_FCNTL_PERSIST_WAL,
            (&mut on as *mut std::ffi::c_int).cast(),
        )
    };
    if rc != rusqlite::ffi::SQLITE_OK {
        return Err(StoreError::Io {
            path: path.to_path_buf(),
            source: std::io::Error::other(format!("cannot keep the WAL file (SQLite code {rc})")),
        });
    }
    // During a tenure the WAL may grow to 4 MiB between resets before it is
    // cut back.
    conn.pragma_update(None, "journal_size_limit", 4 * 1024 * 1024)
        .at(path)?;
    // Closing does not checkpoint by itself: `Space`'s drop decides, by the
    // WAL's size (see `space::CLOSE_CHECKPOINT_BYTES`).
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .at(path)?;
    Ok(())
}

/// Space ids name files, so they are restricted to a safe alphabet.
pub fn validate_space_id(id: &str) -> StoreResult<()> {
    let bad = |reason| {
        Err(StoreError::InvalidSpaceId {
            id: id.to_string(),
            reason,
        })
    };
    if id.is_empty() || id.len() > 200 {
        return bad("it must be 1 to 200 characters long");
    }
    if id.starts_with('.') {
        return bad("it must not start with '.'");
    }
    if !id
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | ':'))
    {
        return bad("only letters, digits and - _ . : are allowed");
    }
    Ok(())
}

/// Cheap structural checks of a space file before SQLite sees it: SQLite
/// treats an empty file as a new database and reads past a truncated end as
/// zeros, both of which would hide data loss. Returns whether the header
/// says WAL mode (bytes 18 and 19 both 2).
fn check_file(path: &Path) -> StoreResult<bool> {
    use std::io::Read;
    let corrupt = |reason: String| StoreError::Corrupt {
        path: path.to_path_buf(),
        reason,
    };
    let meta = std::fs::metadata(path).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let len = meta.len();
    if len == 0 {
        return Err(corrupt("the file is empty (truncated)".into()));
    }
    let mut header = [0u8; 100];
    let mut f = std::fs::File::open(path).map_err(|source| StoreError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    if len < 100 || f.read_exact(&mut header).is_err() {
        return Err(corrupt(format!(
            "the file is {len} bytes, shorter than a SQLite header"
        )));
    }
    if &header[..16] != b"SQLite format 3\0" {
        return Err(corrupt(
            "the file does not start with a SQLite header".into(),
        ));
    }
    let page_size = match u16::from_be_bytes([header[16], header[17]]) {
        1 => 65_536u64,
        n => n as u64,
    };
    if !(512..=65_536).contains(&page_size) || !page_size.is_power_of_two() {
        return Err(corrupt(format!(
            "the header names an invalid page size {page_size}"
        )));
    }
    // With a non-empty WAL beside it, the main file may legitimately lag;
    // SQLite's own checks cover that case.
    let wal = PathBuf::from(format!("{}-wal", path.display()));
    let wal_len = std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
    let change_counter = u32::from_be_bytes([header[24], header[25], header[26], header[27]]);
    let valid_for = u32::from_be_bytes([header[92], header[93], header[94], header[95]]);
    let pages = u32::from_be_bytes([header[28], header[29], header[30], header[31]]) as u64;
    if wal_len == 0 && change_counter == valid_for && pages > 0 && len < pages * page_size {
        return Err(corrupt(format!(
            "the file is truncated: {len} bytes, the header says {} ({pages} pages of {page_size})",
            pages * page_size
        )));
    }
    Ok(header[18] == 2 && header[19] == 2)
}

pub(crate) fn hex_id(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
