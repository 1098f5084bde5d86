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

mod config;
pub mod contract;
mod dead_letters;
mod directory;
mod error;
mod files;
mod lease;
pub mod lock;
mod log;
mod migrate;
pub mod path;
mod plane;
mod plane_sqlite;
pub mod postgres;
mod records;
mod shared;
mod space;

pub use config::{FaultAction, FaultPoint, StoreConfig, Synchronous, DEFAULT_HISTORY_COMMITS};
pub use contract::{SpaceBackend, SpaceStore};
pub use dead_letters::{DeadLetter, EventFailure};
pub use directory::{Directory, Discovered, Projection, SpaceEntry, UpcomingWake};
pub use error::{StoreError, StoreResult};
pub use files::FileAccess;
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
pub use shared::WakeListener;
pub use space::{Space, CLOSE_CHECKPOINT_BYTES};

use crate::clock::Clock;
use crate::metrics::{Counter, Counters};
use error::SqlContext;
use files::{check_file, configure_sqlite, BUSY_TIMEOUT};
use rusqlite::Connection;
use serde::Serialize;
use shared::StoreShared;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};

/// What a space spent in one ledger window ([`Store::window_spend`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WindowSpend {
    pub scheduled_cpu_us: u64,
    pub session_cpu_us: u64,
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

pub(crate) fn hex_id(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
