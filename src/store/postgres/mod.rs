//! The PostgreSQL backend: every space of a fleet in one shared database
//! (`schema/postgres/`), so several hosts serve the same spaces. It keeps
//! the store's `# Contract` with these means:
//!
//! - **Commits** lock their space's row in `spaces` first (`FOR UPDATE`):
//!   commits of one space are serialised as SQLite's write lock serialises
//!   them, and the seq is the row's `head_seq + 1`, written back in the
//!   same transaction — gap-free.
//! - **Leases** carry an epoch (the SQLite backend's tenure) that rises
//!   with every taking; expiry is on the database's clock
//!   (`clock_timestamp()`), so no host's clock arbitrates. A derived commit
//!   checks holder, epoch and expiry in its own transaction, after locking
//!   the space's row, which a taking also locks: a takeover waits for a
//!   commit that passed its check, and a commit after a takeover fails it.
//! - **The directory** (next wake, undelivered) lives in the same `spaces`
//!   row and moves in the commit's own transaction, so it is never late.
//!
//! Connections come from a small pool shared by the spaces a store opens;
//! an open space holds one connection until it is dropped.

mod commit_rows;
mod directory;
mod fleet;
mod known;
mod lease;
mod plane;
mod pool;
mod prefetch;
mod space;

pub use fleet::{Claim, ClaimPass, FleetHost, RegisteredHost, WakeNotices};
pub use pool::{statements_sent, trace_statements};
pub use space::PgSpace;

use super::config::StoreConfig;
use super::contract::SpaceBackend;
use super::error::{PgContext, StoreError, StoreResult};
use super::plane::IndexHook;
use super::shared::WakeListener;
use crate::clock::Clock;
use crate::metrics::{Counter, Counters};
use pool::Cache;
use postgres::{Client, GenericClient, NoTls};
use std::sync::{Arc, Mutex, RwLock};

/// Milliseconds since the Unix epoch of a lease row's `expires_at`.
const MS: &str = "(extract(epoch from expires_at) * 1000)::bigint";

/// The PostgreSQL schema's numbered migrations, in order.
pub const PG_MIGRATIONS: &[(i64, &str, &str)] = &[
    (
        1,
        "0001_core",
        include_str!("../../../schema/postgres/0001_core.sql"),
    ),
    (
        2,
        "0002_lease_renewals",
        include_str!("../../../schema/postgres/0002_lease_renewals.sql"),
    ),
    (
        3,
        "0003_wake_at",
        include_str!("../../../schema/postgres/0003_wake_at.sql"),
    ),
    (
        4,
        "0004_hosts",
        include_str!("../../../schema/postgres/0004_hosts.sql"),
    ),
    (
        5,
        "0005_plane",
        include_str!("../../../schema/postgres/0005_plane.sql"),
    ),
    (
        6,
        "0006_grants",
        include_str!("../../../schema/postgres/0006_grants.sql"),
    ),
    (
        7,
        "0007_schedule_pending",
        include_str!("../../../schema/postgres/0007_schedule_pending.sql"),
    ),
    (
        8,
        "0008_history",
        include_str!("../../../schema/postgres/0008_history.sql"),
    ),
    (
        9,
        "0009_live_leases",
        include_str!("../../../schema/postgres/0009_live_leases.sql"),
    ),
    (
        10,
        "0010_operator_signatures",
        include_str!("../../../schema/postgres/0010_operator_signatures.sql"),
    ),
    (
        11,
        "0011_effect_ledger",
        include_str!("../../../schema/postgres/0011_effect_ledger.sql"),
    ),
    (
        12,
        "0012_fire_runs",
        include_str!("../../../schema/postgres/0012_fire_runs.sql"),
    ),
    (
        13,
        "0013_schedule_wake",
        include_str!("../../../schema/postgres/0013_schedule_wake.sql"),
    ),
    (
        14,
        "0014_schedule_cadence",
        include_str!("../../../schema/postgres/0014_schedule_cadence.sql"),
    ),
    (
        15,
        "0015_host_registry",
        include_str!("../../../schema/postgres/0015_host_registry.sql"),
    ),
    (
        16,
        "0016_lock_function",
        include_str!("../../../schema/postgres/0016_lock_function.sql"),
    ),
    (
        17,
        "0017_write_function",
        include_str!("../../../schema/postgres/0017_write_function.sql"),
    ),
    (
        18,
        "0018_transaction_function",
        include_str!("../../../schema/postgres/0018_transaction_function.sql"),
    ),
    (
        19,
        "0019_start_with_commit",
        include_str!("../../../schema/postgres/0019_start_with_commit.sql"),
    ),
    (
        20,
        "0020_spaces_fillfactor",
        include_str!("../../../schema/postgres/0020_spaces_fillfactor.sql"),
    ),
    (
        21,
        "0021_warm_function",
        include_str!("../../../schema/postgres/0021_warm_function.sql"),
    ),
    (
        22,
        "0022_history_bytes",
        include_str!("../../../schema/postgres/0022_history_bytes.sql"),
    ),
    (
        23,
        "0023_held_events_quiet",
        include_str!("../../../schema/postgres/0023_held_events_quiet.sql"),
    ),
];

/// Key of the advisory lock that serialises migrations across hosts.
const MIGRATION_LOCK: i64 = 0x7370_6163_6577_616b; // "spacewak"

/// A host stops committing under a lease by itself once its own monotonic
/// clock says this share of the TTL has passed since the start of the last
/// renewal that succeeded: three quarters, so a holder renewing every third
/// of the TTL has missed two renewals first.
pub const SELF_FENCE_NUM_DEN: (u64, u64) = (3, 4);

/// How many idle connections a store keeps for its spaces: above what a
/// host runs at once (its scheduled cap, 8 by default, with the waker, the
/// lease keeper and sessions beside), or each operation past the idle ones
/// opens a connection and prepares its statements again. At 8 kept, a cap
/// of 16 opened 130 connections for 1,000 wakes and fell a second and a
/// half behind (`spec/performance.md`, *Session 34*).
pub(crate) const POOL_IDLE: usize = 24;

/// A fleet's store: one PostgreSQL database.
#[derive(Clone)]
pub struct PgStore {
    inner: Arc<PgShared>,
}

struct PgShared {
    url: String,
    /// The host's settings (its lease TTL and holder are the two below).
    cfg: StoreConfig,
    clock: Arc<dyn Clock>,
    holder: String,
    lease_ttl_ms: u64,
    counters: Arc<Counters>,
    idle: Mutex<Vec<(Client, Cache)>>,
    /// Index hooks run inside every commit's transaction.
    hooks: RwLock<Arc<Vec<Arc<dyn IndexHook>>>>,
    /// Told when a commit through this process moved a space's wake earlier.
    on_earlier: RwLock<Option<WakeListener>>,
    /// The leases this process holds, for self-fencing and for fencing
    /// plane writes.
    held: lease::Holds,
    /// What opening each space this host just claimed would read, read by
    /// the claim's own statement (see [`fleet::OpenAhead`]).
    ahead: fleet::Ahead,
}

impl PgStore {
    /// Connects, applies pending migrations under the fleet-wide advisory
    /// lock, and refuses a database whose schema is newer than this binary.
    pub fn open(
        url: &str,
        holder: &str,
        lease_ttl_ms: u64,
        clock: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> StoreResult<PgStore> {
        let mut cfg = StoreConfig::new("");
        cfg.holder = Some(holder.to_string());
        cfg.lease_ttl_ms = lease_ttl_ms;
        PgStore::open_with(url, cfg, clock, counters)
    }

    /// [`PgStore::open`] with a host's settings: the lease TTL from `cfg`,
    /// the holder from `cfg.holder` or, when unset, a fresh
    /// `host-…/instance` identity of its own.
    pub fn open_with(
        url: &str,
        cfg: StoreConfig,
        clock: Arc<dyn Clock>,
        counters: Arc<Counters>,
    ) -> StoreResult<PgStore> {
        let mut client = Client::connect(url, NoTls).doing("connecting")?;
        migrate(&mut client)?;
        let holder = cfg.holder.clone().unwrap_or_else(|| {
            format!(
                "host-{}/{}",
                super::hex_id(&rand::random::<[u8; 6]>()),
                super::hex_id(&rand::random::<[u8; 6]>())
            )
        });
        let store = PgStore {
            inner: Arc::new(PgShared {
                url: url.to_string(),
                lease_ttl_ms: cfg.lease_ttl_ms,
                cfg,
                clock,
                holder,
                counters,
                idle: Mutex::new(vec![(client, Cache::new())]),
                hooks: RwLock::new(Arc::new(Vec::new())),
                on_earlier: RwLock::new(None),
                held: lease::Holds::default(),
                ahead: fleet::Ahead::default(),
            }),
        };
        store.heartbeat()?;
        Ok(store)
    }

    pub fn config(&self) -> &StoreConfig {
        &self.inner.cfg
    }

    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.inner.counters
    }

    /// Registers the listener told when a commit through this process
    /// moved a space's wake earlier (other hosts hear of it by NOTIFY).
    pub fn set_wake_listener(&self, f: WakeListener) {
        *self
            .inner
            .on_earlier
            .write()
            .unwrap_or_else(|p| p.into_inner()) = Some(f);
    }

    pub fn create_space(&self, id: &str, owner: &str) -> StoreResult<()> {
        SpaceBackend::create(self, id, owner)
    }

    /// [`PgStore::create_space`] unless `owner` already owns `limit`
    /// spaces (`Ok(Some(owned))`, nothing created). Counted and created in
    /// one transaction under a lock on the owner, so creates through every
    /// host of the fleet together stay within the limit.
    pub fn create_space_within(
        &self,
        id: &str,
        owner: &str,
        limit: u64,
    ) -> StoreResult<Option<u64>> {
        super::validate_space_id(id)?;
        let mut c = self.inner.take()?;
        let mut tx = c.c().transaction().doing("creating a space")?;
        tx.execute(
            "SELECT pg_advisory_xact_lock(hashtextextended('spacewake/owner/' || $1, 0))",
            &[&owner],
        )
        .doing("locking the owner's spaces")?;
        let owned = tx
            .query_one("SELECT count(*) FROM spaces WHERE owner = $1", &[&owner])
            .doing("counting spaces")?
            .get::<_, i64>(0) as u64;
        if owned >= limit {
            return Ok(Some(owned));
        }
        let inserted = self.insert_space(&mut tx, id, owner)?;
        tx.commit().doing("creating a space")?;
        self.created(id, inserted)?;
        Ok(None)
    }

    /// The new space's row; false when the id was taken already.
    fn insert_space(&self, c: &mut impl GenericClient, id: &str, owner: &str) -> StoreResult<bool> {
        let n = c
            .execute(
                "INSERT INTO spaces (id, owner, created_at_ms) VALUES ($1, $2, $3) \
                 ON CONFLICT (id) DO NOTHING",
                &[&id, &owner, &(self.inner.clock.now_ms() as i64)],
            )
            .doing("creating a space")?;
        Ok(n > 0)
    }

    /// After a create committed: counted, and (as on SQLite) parked with no
    /// counters kept; `SpaceExists` when nothing was inserted.
    fn created(&self, id: &str, inserted: bool) -> StoreResult<()> {
        if !inserted {
            return Err(StoreError::SpaceExists(id.to_string()));
        }
        self.inner.counters.space(id).inc(Counter::SpacesCreated);
        self.inner.counters.retire_space(id);
        Ok(())
    }

    /// Opens and warms connections until `n` are idle (at most the pool's
    /// 24): a serving host does so as it starts (see `Host::start_waker`),
    /// so its first wakes find ready connections. Returns how many it
    /// opened.
    pub fn fill_pool(&self, n: usize) -> StoreResult<usize> {
        self.inner.fill(n)
    }

    pub fn open_space(&self, id: &str) -> StoreResult<PgSpace> {
        SpaceBackend::open(self, id)
    }

    /// A handle on `id` that knows what opening it read (`read`).
    fn opened(&self, id: &str, c: pool::Pooled, read: fleet::OpenAhead) -> PgSpace {
        let mut space = PgSpace::new(id, self.inner.counters.space(id), c);
        // Rows that do not read are left to the handle's own read, which
        // sets the space aside.
        if let Ok(schedule) = prefetch::schedule_from_json(id, read.schedule) {
            space.know(known::Known {
                head: read.head,
                rev: read.rev,
                schedule: schedule.clone(),
            });
            space.schedule_ahead(schedule);
        }
        space
    }

    pub fn holder(&self) -> &str {
        &self.inner.holder
    }

    /// Registers an index hook for every commit made through this store.
    pub fn add_hook(&self, hook: Arc<dyn IndexHook>) {
        let mut hooks = self.inner.hooks.write().unwrap_or_else(|p| p.into_inner());
        let mut next = (**hooks).clone();
        next.push(hook);
        *hooks = Arc::new(next);
    }

    /// The schema version the database is at.
    pub fn schema_version(&self) -> StoreResult<i64> {
        let mut c = self.inner.take()?;
        let v = schema_version(c.c())?;
        Ok(v)
    }
}

fn schema_version(c: &mut impl GenericClient) -> StoreResult<i64> {
    let has_meta: bool = c
        .query_one("SELECT to_regclass('store_meta') IS NOT NULL", &[])
        .doing("reading the schema version")?
        .get(0);
    if !has_meta {
        return Ok(0);
    }
    let row = c
        .query_opt(
            "SELECT value FROM store_meta WHERE key = 'schema_version'",
            &[],
        )
        .doing("reading the schema version")?;
    Ok(row
        .and_then(|r| r.get::<_, String>(0).parse().ok())
        .unwrap_or(0))
}

fn migrate(client: &mut Client) -> StoreResult<()> {
    let mut tx = client.transaction().doing("migrating")?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .doing("taking the migration lock")?;
    let found = schema_version(&mut tx)?;
    let supported = PG_MIGRATIONS.last().map_or(0, |m| m.0);
    if found > supported {
        return Err(StoreError::NewerDatabaseSchema { found, supported });
    }
    for (version, name, sql) in PG_MIGRATIONS {
        if *version <= found {
            continue;
        }
        tx.batch_execute(sql)
            .doing(&format!("applying migration {name}"))?;
        tx.execute(
            "INSERT INTO store_meta (key, value) VALUES ('schema_version', $1) \
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&version.to_string()],
        )
        .doing("recording the schema version")?;
    }
    tx.commit().doing("migrating")
}

/// What opening a space reads: whether it is set aside, and its schedule.
fn open_sql() -> &'static str {
    static SQL: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SQL.get_or_init(|| {
        format!(
            "SELECT quarantined, {}, head_seq, schedule_rev FROM spaces WHERE id = $1",
            prefetch::schedule_ahead_sql()
        )
    })
}

impl SpaceBackend for PgStore {
    type Space = PgSpace;

    fn create(&self, id: &str, owner: &str) -> StoreResult<()> {
        super::validate_space_id(id)?;
        let mut c = self.inner.take()?;
        let inserted = self.insert_space(c.c(), id, owner)?;
        self.created(id, inserted)
    }

    fn open(&self, id: &str) -> StoreResult<PgSpace> {
        super::validate_space_id(id)?;
        let mut c = self.inner.take()?;
        // A space this host just claimed was read by the claim, under the
        // lease it took: nothing else writes it while that lease holds.
        let now = self.inner.clock.monotonic_ms();
        if let Some(a) = self.inner.ahead.take(id, now) {
            self.inner.counters.add_host(Counter::PgOpenedWithClaim, 1);
            return Ok(self.opened(id, c, a));
        }
        // The schedule comes with the check: a scheduled tenure's firing
        // reads it first thing, and its transactions rely on it with the
        // head seq and the schedule's revision (checked as they lock).
        let row = c
            .db()
            .query_opt(open_sql(), &[&id])
            .doing("opening a space")?;
        let Some(r) = row else {
            return Err(StoreError::UnknownSpace(id.to_string()));
        };
        if let Some(reason) = r.get::<_, Option<String>>(0) {
            return Err(StoreError::Quarantined {
                space: id.to_string(),
                reason,
                path: "the PostgreSQL store (spaces.quarantined)".into(),
            });
        }
        let read = fleet::OpenAhead {
            schedule: r.get(1),
            head: r.get::<_, i64>(2) as u64,
            rev: r.get(3),
        };
        Ok(self.opened(id, c, read))
    }

    fn add_hook(&self, hook: Arc<dyn IndexHook>) {
        PgStore::add_hook(self, hook)
    }

    fn directory_next_wake(&self, id: &str) -> StoreResult<Option<u64>> {
        let mut c = self.inner.take()?;
        let row = c
            .db()
            .query_opt("SELECT next_wake_ms FROM spaces WHERE id = $1", &[&id])
            .doing("reading the directory")?
            .ok_or_else(|| StoreError::UnknownSpace(id.to_string()))?;
        Ok(row.get::<_, Option<i64>>(0).map(|v| v.max(0) as u64))
    }
}
