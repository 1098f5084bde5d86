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
//! What every backend of the store keeps (the SQLite files and the shared
//! PostgreSQL database; `tests/store_contract.rs` runs one suite against
//! both):
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
//! - **Retention.** Commits older than the newest `history_commits` lose
//!   their operations, and delivered events older than them their payload;
//!   their rows stay (audit, duplicate ids). Nothing a resume, an
//!   undelivered event or a watermark needs is removed.
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

mod backend;
mod commit;
mod config;
pub mod contract;
mod dead_letters;
mod directory;
mod error;
mod file_store;
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
mod rows;
mod shared;
mod space;

pub use backend::{off_runtime, Directory, Space, Store};
pub use config::{FaultAction, FaultPoint, StoreConfig, Synchronous, DEFAULT_HISTORY_COMMITS};
pub use contract::{SpaceBackend, SpaceStore};
pub use dead_letters::{DeadLetter, EventFailure};
pub use directory::{Discovered, FileDirectory, Projection, SpaceEntry, UpcomingWake};
pub use error::{StoreError, StoreResult};
pub use file_store::{FileStore, WindowSpend};
pub use files::FileAccess;
pub use migrate::{Migration, HOST_MIGRATIONS, SPACE_MIGRATIONS};
pub use path::PathSeg;
pub use plane::{
    ActionCost, Bucket, CommitView, DeclaredRow, FireLog, FireRecord, FireRun, HookMemo, IndexHook,
    LedgerDelta, LedgerRow, PendingWake, PlaneTx, ScheduleRow, ScheduleStatus, FIRE_LOG_CHARS,
    FIRE_LOG_LINES, PRUNE_EVERY_PERIODS,
};
pub use records::value_depth;
pub use records::{
    AppliedOp, Author, CommitClass, CommitOutcome, CommitRecord, CommitRequest, DocOp, DocRead,
    EventRecord, Lease, LoggedOp, NewEvent, StreamState, MAX_VALUE_DEPTH,
};
pub use shared::WakeListener;
pub use space::{FileSpace, CLOSE_CHECKPOINT_FRAMES, KEEP_WAL_BYTES};

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
