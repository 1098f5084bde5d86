//! The store's configuration and its crash-test fault points: plain data,
//! imported by every other file of the store.

use std::path::PathBuf;

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
    /// payload (`FileSpace::compact_history`). 0 keeps everything.
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
