//! The host: one per process. It owns the store, activates spaces on their
//! triggers, and runs one space server per active space.
//!
//! # Lifecycle of a space
//! ```text
//! parked ──trigger──> activating ──lease + runtime──> active ──idle, no work──> parked
//!                          └──failure──> parked, with exponential back-off
//! ```
//! Triggers: a session opening on the space, undelivered events (appended
//! while parked, or found by boot discovery), a warm request. Every
//! activation is counted by trigger.
//!
//! # Where
//! - `admission.rs` — whether a request reaches an active server, starts
//!   one, waits for a slot or is refused; retiring a server.
//! - `scheduled.rs` — scheduled activations in flight and the budget check.
//! - `server.rs` — one space server (a tenure), acting on its
//!   `tenure.rs` lifecycle; `pool.rs` its threads.
//! - `waker.rs` — scheduled wakes; `keeper.rs` — leases of long turns;
//!   `failures.rs` — back-off; `request.rs` — what passes in and out.
//!
//! # Invariants
//! - At most one space server per space per host: the map of active spaces
//!   is the only way to reach one, and it is changed under one lock.
//! - A space server parks only under that lock after seeing its command
//!   channel empty, so a command sent to a server is either handled by it or
//!   finds it gone and activates a new one — never lost.
//! - Pattern code runs only on space-server threads, never on the network
//!   threads that call [`Host::ask`].

mod admission;
mod creation;
mod failures;
mod fleet_waker;
mod keeper;
mod pool;
mod quota;
mod request;
mod scheduled;
mod server;
mod startup;
mod tenure;
mod waker;
pub mod wave;

use crate::clock::Clock;
use crate::metrics::{Counter, Counters};
use crate::runtime::RuntimeConfig;
use crate::store::Store;
use failures::Failures;
use serde_json::Value;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};

pub use creation::{Creations, Creators};
pub(crate) use request::{shutting_down, stopped_before_reply, Cmd};
pub use request::{
    Access, Appended, Ask, Attach, DeletePiece, Deploy, HostError, Operation, Read, Reply, Request,
    Responder, SendEvent, SessionId, Trigger, Update, UpdateSink, ValueAt,
};

/// The arms of boot discovery: each names a reason a parked space needs its
/// host at start. (Scheduled wakes add an arm.)
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootArm {
    /// Events accepted before a restart and not yet delivered.
    UndeliveredEvents,
    /// A schedule entry due (or overdue: the host was down). The waker's
    /// first pass dispatches these; boot only counts them.
    DueSchedule,
}

pub const BOOT_ARMS: &[BootArm] = &[BootArm::UndeliveredEvents, BootArm::DueSchedule];

/// How long a space-server thread waits for its next tenure before it
/// exits: long enough to carry a herd of wakes or a burst of sessions from
/// one tenure to the next, short enough that a host gone quiet holds no
/// idle threads (their stacks and allocator caches) for long.
pub const POOL_KEEP: std::time::Duration = std::time::Duration::from_secs(2);

/// How many idle space-server threads a host keeps at a scheduled cap:
/// enough for a herd at the cap plus the sessions' spaces coming and going.
/// Also the engine images a host keeps by default (`serve
/// --engine-images`): a thread beyond the images builds a new engine for
/// every tenure, which tripled the CPU of a wake at cap 32.
pub fn threads_kept(max_scheduled: usize) -> usize {
    (2 * max_scheduled).max(crate::sandbox::DEFAULT_ENGINE_IMAGES)
}

/// Scheduled-wake knobs.
#[derive(Debug, Clone)]
pub struct ScheduleConfig {
    /// Off: entries stay indexed and due wakes are counted as suppressed.
    pub enabled: bool,
    pub jitter_mode: crate::schedule::JitterMode,
    pub jitter_window_ms: u64,
    /// Scheduled activations in flight at once (caps a herd of due spaces).
    pub max_scheduled: usize,
    /// Scheduled activations dispatched at once while wakes are on time
    /// (no due wake has waited past `waker::CATCH_UP_AFTER_MS`); up to
    /// `max_scheduled` while catching up. Default: the cores.
    pub on_time_scheduled: usize,
    /// CPU µs per ledger window a space's `scheduled` bucket may spend
    /// before its scheduled wakes are skipped (per-space overrides live in
    /// the space's policy table). `None`: unlimited.
    pub scheduled_budget_us: Option<u64>,
    /// Back-off of schedules whose output no session reads.
    pub backoff: crate::schedule::backoff::BackoffPolicy,
    /// How long before a parked space's wake falls due the waker activates
    /// it (0: at the due time). Firing still waits for the due time.
    pub lead_ms: u64,
}

/// The machine's cores (1 if unknown): the default on-time cap.
pub fn default_on_time_scheduled() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for ScheduleConfig {
    fn default() -> Self {
        ScheduleConfig {
            enabled: true,
            jitter_mode: crate::schedule::JitterMode::Keyed,
            jitter_window_ms: crate::schedule::DEFAULT_WINDOW_MS,
            // Measured on two cores (spec/performance.md): 4-8 in flight
            // keep both cores busy; 32 lost a third of the throughput to
            // contention, and sessions stay responsive.
            max_scheduled: 8,
            // Measured on two cores, 1,000 wakes due within a second: no
            // more activations in flight than cores fired nearly all within
            // 2 ms while the machine kept up, 8 made single wakes 15-25 ms
            // late (spec/performance.md, session 37).
            on_time_scheduled: default_on_time_scheduled(),
            scheduled_budget_us: None,
            backoff: crate::schedule::backoff::BackoffPolicy::default(),
            // Above an activation's cost in a busy herd (a few ms), far
            // below any interval: wakes fire on time, and few spaces are
            // held active waiting.
            lead_ms: 100,
        }
    }
}

/// Spaces one peer address may create a minute, by default: ample for a
/// person or a script setting up, far from the thousands a minute that
/// fill a disk.
pub const DEFAULT_SPACE_CREATES_PER_MINUTE: u64 = 60;
/// A space's storage quota, by default: 256 MiB.
pub const DEFAULT_SPACE_QUOTA_BYTES: u64 = 256 * 1024 * 1024;

#[derive(Debug, Clone)]
pub struct HostConfig {
    /// A space with no sessions and no work parks after this long idle.
    pub idle_park_ms: u64,
    /// A wave stops taking new events after this long; the rest continue
    /// in the next wave, after pending commands are served.
    pub flush_deadline_ms: u64,
    /// A WebSocket connection from which nothing arrives for this long is
    /// closed; after half of it the server pings. 0: never.
    pub session_timeout_ms: u64,
    /// At most this many spaces are active at once (each is a thread, a
    /// JavaScript runtime and an open file). Past it, requests that would
    /// activate another space are refused as unavailable, and boot
    /// discovery's wakes wait for a slot.
    pub max_active_spaces: usize,
    /// Spaces one identity may own (create by a session's `open`); 0: no
    /// limit.
    pub max_spaces_per_identity: u64,
    /// Who may create spaces by a session's `open` (operators always may).
    pub space_creators: Creators,
    /// Spaces one peer address may create a minute (a token bucket whose
    /// burst is the same number); 0: no limit.
    pub space_creates_per_minute: u64,
    /// Bytes a space's file may hold (documents, retained events, their
    /// indexes) before events and deploys into it are refused; 0: no limit.
    pub space_quota_bytes: u64,
    /// First back-off after a failed activation; doubles per failure.
    pub failure_backoff_ms: u64,
    pub max_backoff_ms: u64,
    pub runtime: RuntimeConfig,
    pub schedule: ScheduleConfig,
}

impl Default for HostConfig {
    fn default() -> Self {
        HostConfig {
            idle_park_ms: 30_000,
            flush_deadline_ms: 100,
            session_timeout_ms: 60_000,
            max_active_spaces: 4_096,
            max_spaces_per_identity: 1_000,
            space_creators: Creators::Open,
            space_creates_per_minute: DEFAULT_SPACE_CREATES_PER_MINUTE,
            space_quota_bytes: DEFAULT_SPACE_QUOTA_BYTES,
            failure_backoff_ms: 1_000,
            // Five minutes: long enough that a broken space costs little,
            // short enough that a fixed one comes back without an operator.
            max_backoff_ms: 300_000,
            runtime: RuntimeConfig::default(),
            schedule: ScheduleConfig::default(),
        }
    }
}

struct Active {
    tx: mpsc::Sender<Cmd>,
    generation: u64,
}

pub(crate) struct HostInner {
    pub store: Store,
    pub clock: Arc<dyn Clock>,
    pub cfg: HostConfig,
    pub jitter: crate::schedule::Jitter,
    scheduled: Mutex<HashSet<String>>,
    nothing_due: Mutex<Vec<String>>,
    waker: Mutex<Option<mpsc::Sender<()>>>,
    pub(crate) stopped: std::sync::atomic::AtomicBool,
    /// Set once by [`Host::begin_shutdown`]; sessions watch it.
    shutting_down: tokio::sync::watch::Sender<bool>,
    pub counters: Arc<Counters>,
    active: Mutex<HashMap<String, Active>>,
    pool: Arc<pool::Pool>,
    failures: Mutex<HashMap<String, Failures>>,
    generation: std::sync::atomic::AtomicU64,
    grants: GrantsWatch,
    /// Wakes that found the host at `max_active_spaces`, in arrival order.
    waiting: Mutex<std::collections::VecDeque<(String, Trigger)>>,
    /// Activations refused by another holder's live lease, to try again
    /// when it can expire: space -> (that time on the host clock, trigger).
    /// The waker keeps the time.
    lease_retries: Mutex<HashMap<String, (u64, Trigger)>>,
    /// Renews the leases of turns that run long (`keeper.rs`).
    pub(crate) keeper: Arc<keeper::Keeper>,
    /// Space creation's lock and rate buckets (`creation.rs`).
    creations: Creations,
}

impl Drop for HostInner {
    fn drop(&mut self) {
        self.keeper.stop();
        // Idle server threads would otherwise keep their engine images
        // (counted process-wide) for up to POOL_KEEP after the host is gone.
        self.pool.release_idle();
    }
}

/// How stale the host's view of grant changes may get (see
/// [`Host::grants_version`]).
pub const GRANTS_RECHECK: std::time::Duration = std::time::Duration::from_millis(100);

/// The directory's grants version as last read, and when. Re-read at most
/// every [`GRANTS_RECHECK`] by whichever session needs it (and by
/// `session::watch_grants` while sessions are open), because reading it on
/// every request halved the serving benchmark's events/s: the directory's
/// lock is also the one every space thread writes through.
struct GrantsWatch {
    version: std::sync::atomic::AtomicU64,
    checked_at: Mutex<Option<crate::clock::Stopwatch>>,
    /// Publishes each new version, so a session that neither sends nor
    /// receives still learns of a revocation.
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for GrantsWatch {
    fn default() -> Self {
        GrantsWatch {
            version: Default::default(),
            checked_at: Default::default(),
            changed: tokio::sync::watch::channel(0).0,
        }
    }
}

/// A handle to the host; cheap to clone.
#[derive(Clone)]
pub struct Host {
    inner: Arc<HostInner>,
}

impl Host {
    /// A host on `store`. Registers the schedule index hook (with the jitter
    /// secret kept in the host directory) so every later commit is indexed.
    pub fn new(store: Store, mut cfg: HostConfig) -> Host {
        let clock = store.clock().clone();
        let counters = store.counters().clone();
        let secret = jitter_secret(&store);
        // Handler entropy is keyed by the same secret, in its own domain.
        cfg.runtime.entropy_key =
            crate::runtime::EntropyKey(blake3::derive_key("spacewake handler entropy v1", &secret));
        let jitter = crate::schedule::Jitter::new(
            cfg.schedule.jitter_mode,
            cfg.schedule.jitter_window_ms,
            secret,
        );
        store.add_hook(Arc::new(crate::schedule::ScheduleIndexHook::new(
            jitter.clone(),
        )));
        // The sandbox needs its own stack headroom above its JS stack limit.
        let stack = cfg.runtime.sandbox.max_stack_bytes + 4 * 1024 * 1024;
        // Enough idle threads for a herd at the scheduled cap plus the
        // sessions' spaces coming and going; each costs its touched stack.
        let max_idle = threads_kept(cfg.schedule.max_scheduled);
        let pool = pool::Pool::new(stack, max_idle, POOL_KEEP, counters.clone());
        let keeper = keeper::Keeper::start(
            store.clone(),
            std::time::Duration::from_millis(store.config().lease_renew_ms),
        );
        let host = Host {
            inner: Arc::new(HostInner {
                store,
                clock,
                cfg,
                jitter,
                scheduled: Mutex::new(HashSet::new()),
                nothing_due: Mutex::new(Vec::new()),
                waker: Mutex::new(None),
                stopped: false.into(),
                shutting_down: tokio::sync::watch::channel(false).0,
                counters,
                active: Mutex::new(HashMap::new()),
                pool,
                failures: Mutex::new(HashMap::new()),
                generation: 0.into(),
                grants: GrantsWatch::default(),
                waiting: Mutex::new(std::collections::VecDeque::new()),
                lease_retries: Mutex::new(HashMap::new()),
                keeper,
                creations: Creations::default(),
            }),
        };
        // A manual clock's jump reaches every space server's timers. Weak:
        // the clock outlives hosts in tests, and must not keep them alive.
        let inner = Arc::downgrade(&host.inner);
        host.inner.clock.on_jump(Box::new(move || {
            if let Some(inner) = inner.upgrade() {
                inner.clock_moved();
            }
        }));
        host
    }

    /// Starts the waker thread (boot discovery's "a schedule is due" arm is
    /// its first pass). Idempotent.
    pub fn start_waker(&self) {
        let mut slot = self.inner.waker.lock().unwrap_or_else(|p| p.into_inner());
        if slot.is_some() {
            return;
        }
        let (tx, rx) = mpsc::channel();
        *slot = Some(tx.clone());
        drop(slot);
        let poke = tx.clone();
        let host = Arc::downgrade(&self.inner);
        self.inner
            .store
            .set_wake_listener(Arc::new(move |space: &str, at: u64| {
                // Undelivered events (a wake "at 0") of a space active here
                // are its server's to run before it may park: nothing for
                // the waker (a firing's own event told it so at every wake).
                let own_events = at == 0 && host.upgrade().is_some_and(|h| h.is_active(space));
                if !own_events {
                    let _ = poke.send(());
                }
            }));
        let poke = tx;
        self.inner.clock.on_jump(Box::new(move || {
            let _ = poke.send(());
        }));
        if let Some(pg) = self.inner.store.postgres() {
            // Connections for a herd at the cap, the waker's and the lease
            // keeper's, ready before the first wakes need them.
            let (warm, n) = (pg.clone(), self.inner.cfg.schedule.max_scheduled + 2);
            std::thread::Builder::new()
                .name("fleet-warm".into())
                .spawn(move || {
                    if let Err(e) = warm.fill_pool(n) {
                        tracing::warn!(error = %e, "warming the database connections failed");
                    }
                })
                .expect("the connection warming thread starts");
            let (pg, inner) = (pg.clone(), Arc::downgrade(&self.inner));
            std::thread::Builder::new()
                .name("fleet-notices".into())
                .spawn(move || fleet_waker::listen(pg, inner))
                .expect("the fleet notice thread starts");
        }
        let inner = self.inner.clone();
        std::thread::Builder::new()
            .name("waker".into())
            .spawn(move || waker::run(inner, rx))
            .expect("the waker thread starts");
    }

    pub fn config(&self) -> &HostConfig {
        &self.inner.cfg
    }

    pub fn store(&self) -> &Store {
        &self.inner.store
    }

    /// Space creation's lock and per-address rates.
    pub fn creations(&self) -> &Creations {
        &self.inner.creations
    }

    pub fn counters(&self) -> &Arc<Counters> {
        &self.inner.counters
    }

    /// Whether `space` has a space server on this host now.
    pub fn is_active(&self, space: &str) -> bool {
        self.inner.is_active(space)
    }

    pub fn active_spaces(&self) -> Vec<String> {
        let mut v = self.inner.active_ids();
        v.sort();
        v
    }

    /// Sends a request to the space's server, activating it if parked, and
    /// waits for its reply (of the request's own type) without blocking the
    /// calling thread's executor.
    pub async fn ask<A: Ask>(
        &self,
        space: &str,
        trigger: Trigger,
        req: A,
    ) -> Result<A::Reply, HostError> {
        let rx = self.send_for_reply(space, trigger, req.into())?;
        let reply = rx
            .await
            .unwrap_or_else(|_| Err(stopped_before_reply(space)))?;
        unpack::<A>(reply)
    }

    /// Blocking form of [`Host::ask`], for CLI tools and tests.
    pub fn ask_blocking<A: Ask>(
        &self,
        space: &str,
        trigger: Trigger,
        req: A,
    ) -> Result<A::Reply, HostError> {
        let rx = self.send_for_reply(space, trigger, req.into())?;
        let reply = rx
            .blocking_recv()
            .unwrap_or_else(|_| Err(stopped_before_reply(space)))?;
        unpack::<A>(reply)
    }

    /// Deploys a one-file pattern (its default export, with `argument`) as
    /// a piece of `space`, blocking; returns the piece's id. For the
    /// start-up check and the benchmarks.
    pub fn deploy_file_blocking(
        &self,
        space: &str,
        file: &str,
        source: &str,
        argument: Value,
    ) -> Result<String, HostError> {
        let deploy = Deploy {
            entry: file.to_string(),
            files: BTreeMap::from([(file.to_string(), source.to_string())]),
            export: None,
            argument,
        };
        self.ask_blocking(space, Trigger::Session, deploy)
    }

    fn send_for_reply(
        &self,
        space: &str,
        trigger: Trigger,
        req: Request,
    ) -> Result<tokio::sync::oneshot::Receiver<Result<Reply, HostError>>, HostError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.dispatch(
            space,
            trigger,
            Cmd {
                req,
                reply: Some(tx),
            },
        )?;
        Ok(rx)
    }

    /// Runs an operator's action on `space`'s file, through the host: on
    /// the space server's handle if the space is active, else on a brief
    /// operator tenure (no lease, no runtime) that ends as soon as it is
    /// done. A change that moves the space's wake earlier tells the waker
    /// at once (the store's wake listener), so a triggered entry fires
    /// within milliseconds.
    pub async fn operate(
        &self,
        space: &str,
        op: Operation,
    ) -> Result<crate::operator::OpResult<Value>, HostError> {
        self.ask(space, Trigger::Operator, op).await
    }

    /// Sends a request without waiting for a reply.
    pub fn notify(
        &self,
        space: &str,
        trigger: Trigger,
        req: impl Into<Request>,
    ) -> Result<(), HostError> {
        let req = req.into();
        self.dispatch(space, trigger, Cmd { req, reply: None })
    }

    /// Stops the waker (space servers finish and park on their own). A host
    /// that shares its clock with another (tests) must be stopped before
    /// the other starts, or both would fire.
    pub fn shutdown(&self) {
        self.inner
            .stopped
            .store(true, std::sync::atomic::Ordering::SeqCst);
        self.inner.poke_waker();
    }

    /// Starts shutting down: the waker stops, every session is told (they
    /// watch [`Host::shutdown_signal`]), and no request starts a space
    /// server any more. Then [`Host::stop_spaces`] stops the active ones.
    pub fn begin_shutdown(&self) {
        self.inner.shutting_down.send_replace(true);
        self.shutdown();
    }

    pub fn is_shutting_down(&self) -> bool {
        self.inner.is_shutting_down()
    }

    /// Becomes `true` when the host starts shutting down.
    pub fn shutdown_signal(&self) -> tokio::sync::watch::Receiver<bool> {
        self.inner.shutting_down.subscribe()
    }

    /// Asks every active space server to stop (after the wave it is in,
    /// with its lease released and its file checkpointed) and waits for
    /// them until `grace` has passed `since`. Returns how many stopped and
    /// which spaces were still active then (abandoned: their leases are
    /// left to expire, or to be taken over by this host's next process).
    pub fn stop_spaces(
        &self,
        since: crate::clock::Stopwatch,
        grace: std::time::Duration,
    ) -> StopReport {
        let targets: Vec<mpsc::Sender<Cmd>> = self
            .inner
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|a| a.tx.clone())
            .collect();
        for tx in &targets {
            let _ = tx.send(Cmd {
                req: Request::Stop,
                reply: None,
            });
        }
        loop {
            let still = self.active_spaces();
            if still.is_empty() || since.passed(grace) {
                return StopReport {
                    stopped: targets.len().saturating_sub(still.len()),
                    abandoned: still,
                };
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }

    /// How many grant changes the host file has seen (`Directory::
    /// grants_version`), at most [`GRANTS_RECHECK`] old. Open sessions
    /// compare it with the value under which they read their grant.
    pub fn grants_version(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let g = &self.inner.grants;
        // One refresher at a time; the others use the value it last read.
        if let Ok(mut at) = g.checked_at.try_lock() {
            if at.is_none_or(|t| t.passed(GRANTS_RECHECK)) {
                if let Ok(v) = self.inner.store.directory().grants_version() {
                    if g.version.swap(v, Relaxed) != v {
                        g.changed.send_replace(v);
                    }
                }
                *at = Some(crate::clock::Stopwatch::start());
            }
        }
        g.version.load(Relaxed)
    }

    /// Wakes when [`Host::grants_version`] reads a new version.
    pub fn grant_changes(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.grants.changed.subscribe()
    }

    /// How long a silent WebSocket connection is kept (`None`: for ever).
    pub fn session_timeout(&self) -> Option<std::time::Duration> {
        let ms = self.inner.cfg.session_timeout_ms;
        (ms > 0).then(|| std::time::Duration::from_millis(ms))
    }

    /// Boot discovery: activates every space an arm names. On a fleet's
    /// database it does nothing: the waker's first pass claims what needs
    /// a host fleet-wide, taking each space's lease in the same statement,
    /// where activating here could race the hosts already serving them.
    pub fn boot(&self) -> crate::store::StoreResult<usize> {
        if self.inner.store.postgres().is_some() {
            return Ok(0);
        }
        let now = self.inner.clock.now_ms();
        let found = self.inner.store.directory().discover(now)?;
        let mut n = 0usize;
        for d in found {
            for arm in BOOT_ARMS {
                let hit = match arm {
                    BootArm::UndeliveredEvents => d.undelivered,
                    BootArm::DueSchedule => d.next_wake_ms.is_some_and(|t| t <= now),
                };
                if !hit {
                    continue;
                }
                self.inner
                    .counters
                    .space(&d.id)
                    .inc(Counter::BootDiscovered);
                n += 1;
                if *arm == BootArm::UndeliveredEvents {
                    let _ = self.notify(&d.id, Trigger::Boot, Request::Wake);
                }
                break;
            }
        }
        Ok(n)
    }

    /// Waits up to `timeout_ms` for every active space to park on its own;
    /// returns how many are still active.
    pub fn park_all_idle(&self, timeout_ms: u64) -> usize {
        let waiting = crate::clock::Stopwatch::start();
        let timeout = std::time::Duration::from_millis(timeout_ms);
        loop {
            let n = self.active_spaces().len();
            if n == 0 || waiting.passed(timeout) {
                return n;
            }
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
    }
}

/// What [`Host::stop_spaces`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReport {
    /// Space servers that stopped cleanly (lease released, file closed).
    pub stopped: usize,
    /// Spaces still active at the deadline.
    pub abandoned: Vec<String>,
}

/// The host's jitter secret: 32 random bytes created once per data
/// directory and kept in the host directory, so jitter is stable across
/// restarts and differs between deployments.
fn jitter_secret(store: &Store) -> [u8; 32] {
    let hex = store
        .directory()
        .meta_or_init("jitter_secret", || {
            rand::random::<[u8; 32]>()
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect()
        })
        .unwrap_or_default();
    let mut out = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).take(32).enumerate() {
        out[i] = std::str::from_utf8(chunk)
            .ok()
            .and_then(|c| u8::from_str_radix(c, 16).ok())
            .unwrap_or(0);
    }
    out
}

/// A reply of another kind than the request's is a bug in the space
/// server, answered as an internal error rather than a panic.
fn unpack<A: Ask>(reply: Reply) -> Result<A::Reply, HostError> {
    A::unpack(reply).map_err(|other| {
        let asked = std::any::type_name::<A>().rsplit("::").next();
        HostError::Internal(format!(
            "a {} was answered with {other:?}",
            asked.unwrap_or("request")
        ))
    })
}

impl HostInner {
    /// The spaces active on this host now, in no order.
    /// Whether `space` has a space server on this host.
    pub(crate) fn is_active(&self, space: &str) -> bool {
        self.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains_key(space)
    }

    pub(crate) fn active_ids(&self) -> Vec<String> {
        self.active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .cloned()
            .collect()
    }

    pub(crate) fn is_shutting_down(&self) -> bool {
        *self.shutting_down.borrow()
    }

    /// The space's directory row; `None` if unknown or unreadable.
    fn directory_entry(&self, space: &str) -> Option<crate::store::SpaceEntry> {
        self.store.directory().get(space).ok().flatten()
    }

    pub(crate) fn poke_waker(&self) {
        if let Some(tx) = self
            .waker
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
        {
            let _ = tx.send(());
        }
    }

    /// Hands `req` to the space's server if it is active; nothing otherwise.
    pub(crate) fn send_if_active(&self, id: &str, req: Request) {
        if let Some(a) = self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(id)
        {
            let _ = a.tx.send(Cmd { req, reply: None });
        }
    }

    /// The host clock jumped: every active server looks at its timers.
    fn clock_moved(&self) {
        for a in self
            .active
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
        {
            let _ = a.tx.send(Cmd {
                req: Request::ClockMoved,
                reply: None,
            });
        }
    }

    /// How long until a backed-off space may be tried again.
    pub(crate) fn retry_delay_ms(&self, at_least: u64) -> u64 {
        at_least.max(self.cfg.failure_backoff_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_request_unpacks_only_its_own_kind_of_reply() {
        let value = Reply::Value(ValueAt {
            value: serde_json::json!(3),
            seq: 7,
        });
        assert_eq!(
            unpack::<Read>(value.clone()).unwrap(),
            ValueAt {
                value: serde_json::json!(3),
                seq: 7
            }
        );
        let wrong = unpack::<Deploy>(value).unwrap_err();
        assert!(
            matches!(&wrong, HostError::Internal(m) if m.starts_with("a Deploy was answered with Value")),
            "{wrong}"
        );
        assert_eq!(
            unpack::<Attach>(Reply::Attached { head_seq: 4 }).unwrap(),
            4
        );
        assert_eq!(unpack::<Request>(Reply::Done).unwrap(), Reply::Done);
    }
}
