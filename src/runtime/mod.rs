//! The reactive runtime of one space: pieces instantiated from patterns,
//! their derivations pulled lazily, their handlers run on events, and each
//! wave's writes committed once as a derived commit.
//!
//! # Invariants
//! - Laziness: a derivation runs only when something pulls its output (a
//!   demanded result path, a handler's context, or another pulled node) and
//!   it is not fresh. Nothing runs because it merely exists.
//! - Freshness: a node is fresh after it ran or after its recorded inputs
//!   hash matched; any write to a document it reads makes it (and its
//!   readers) stale. The inputs hash is persisted on the plane
//!   (`action_state`), so a re-activated space does not recompute a node
//!   whose inputs did not change; a missing row means recompute.
//! - A handler's writes apply only if it returns normally (an async one:
//!   when it settles): an exception, a preemption or a capability denial
//!   discards them all.
//! - Capabilities: every write, send and reference an action returns is
//!   checked against what it was given ([`capability::Reach`]) before any
//!   of it applies; one refusal refuses the action. Writes are applied in
//!   time linear in what is written, within [`WriteLimits`].
//! - Pieces share no mutable JavaScript state: each deployed piece runs in
//!   its own instance of its program's modules (with the pieces its own
//!   handlers make), over a realm whose globals and intrinsics are frozen.
//! - Frames: what a derivation builds while it runs is registered under its
//!   node's id and replaced by the node's next run; a framed node runs once
//!   per tenure before anything inside its frame is read or sent to. What a
//!   handler instantiates or binds is a piece of its own, named after the
//!   event, so a replay makes nothing twice.
//! - No event wedges the space: an event whose wave failed its tenure runs
//!   alone next time, and after [`MAX_EVENT_ATTEMPTS`] is dead-lettered.
//! - A wave commits at most once, with the lease of this runtime's tenure,
//!   and advances the watermarks of the events it consumed in that commit.
//! - Only this module talks to the sandbox; only the store talks to SQL.
//!
//! # Layout
//! `mod.rs` holds the runtime's state and its tenure (start, lease, stop,
//! sends from outside); the rest is split by concern: `pieces.rs`
//! (programs, instantiation, demand), `documents.rs` (the document cache,
//! writes, links), `pull.rs` (bringing derivations up to date),
//! `handlers.rs` (events, capability checks, staged writes), `waves.rs`
//! (a wave from events to commit) and `metering.rs` (the wave's compute).

pub mod argument;
pub mod capability;
mod console;
mod documents;
pub mod effects;
pub mod graph;
mod handlers;
pub mod home;
mod metering;
mod now;
mod pieces;
mod pull;
mod waves;

use crate::clock::Clock;
use crate::compiler::{CompileCache, CompiledProgram, MemorySource};
use crate::metrics::{Counter, SpaceCounters};
use crate::sandbox::{
    Builtins, CallOptions, JsHandle, PreemptCause, Sandbox, SandboxConfig, SandboxError,
    TenureSandbox,
};
use crate::store::path::{get_at, set_at};
use crate::store::{
    Author, CommitClass, CommitRequest, DocOp, EventRecord, Lease, NewEvent, PathSeg, Space,
    StoreError,
};
use capability::Reach;
use graph::{
    as_link, as_stream, field_flag, linked_docs, Frame, Link, NodeDef, Recorded, StreamDef,
};
use metering::{write_costs, CostKey, CostTally, Meter};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

/// The JS source of the `commonfabric` module.
pub static COMMONFABRIC_JS: Builtins = Builtins {
    api: include_str!("commonfabric_public.js"),
    internal: include_str!("commonfabric.js"),
    subpaths: &[
        ("commonfabric/cfc", include_str!("commonfabric_cfc.js")),
        (
            "commonfabric/cfc-authoring",
            "export * from \"commonfabric/cfc\";\n",
        ),
        // Types only (`Schema<S>`): nothing at run time.
        ("commonfabric/schema", "export {};\n"),
    ],
};

/// `getPatternEnvironment().apiUrl` of a runtime whose host has no address
/// (the reference's own fallback).
pub const DEFAULT_PUBLIC_ORIGIN: &str = "http://localhost:8000";

/// Document listing the space's pieces: `{pieceId: {program, export}}`.
pub const PIECES_DOC: &str = "space/pieces";
/// The pieces the last activation set aside, with why (`{piece: reason}`):
/// written by the host, read by operators.
pub const SET_ASIDE_DOC: &str = "space/set-aside";

/// How deep links may chain before we call it a cycle.
const MAX_LINK_DEPTH: usize = 64;

/// Host-wide compile cache: compiled programs keyed by a blake3 hash of
/// their sources, shared by every space runtime in the process.
pub fn compile_cache() -> &'static CompileCache {
    static CACHE: OnceLock<CompileCache> = OnceLock::new();
    CACHE.get_or_init(CompileCache::new)
}

#[derive(Debug, thiserror::Error)]
pub enum RuntimeError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("{0}")]
    Sandbox(#[from] SandboxError),
    #[error("pattern does not compile:\n{0}")]
    Compile(String),
    #[error(
        "space {space:?} is held by another host ({holder}; its lease runs until {})",
        crate::human::format_utc_ms(*.expires_at_ms)
    )]
    LeaseHeld {
        space: String,
        holder: String,
        expires_at_ms: u64,
    },
    #[error("the lease of this tenure was lost")]
    LeaseLost,
    #[error("no piece {0:?} in this space")]
    UnknownPiece(String),
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    InvalidArgument(#[from] argument::ArgumentMismatch),
}

pub type RuntimeResult<T> = Result<T, RuntimeError>;

/// Limits for the pattern code of one space.
#[derive(Debug, Clone)]
pub struct RuntimeConfig {
    pub sandbox: SandboxConfig,
    /// Engine state is reused across tenures by restoring a start-up heap
    /// image (`sandbox/image.rs`), with at most this many images alive in
    /// the process (one per space-server thread); 0 builds a sandbox per
    /// tenure.
    pub engine_images: usize,
    /// Budget of one action (handler or derivation), in interrupt polls.
    pub action_budget: Option<u64>,
    /// At most this many events are consumed by one wave.
    pub wave_event_limit: usize,
    /// Meter waves into the ledger (on by default; off only to measure the
    /// metering's own cost).
    pub metering: bool,
    /// Ledger window length (default one UTC day).
    pub ledger_window_ms: u64,
    /// Sizes of what pattern code may write (`spec/protocol.md`, *Limits*).
    pub limits: WriteLimits,
    /// Bytes (as JSON) of documents a space runtime keeps cached between
    /// waves, outside the engine's heap: past it, documents no pending wave
    /// holds are dropped at the end of a wave and read again when needed.
    pub doc_cache_bytes: usize,
    /// Keys the seed of a handler's `Math.random()`, so no sender can
    /// choose an event id for the outcome it wants (the host derives it
    /// from its secret; the all-zero default is for runtimes without one).
    pub entropy_key: EntropyKey,
    /// Where clients reach this host (its first `--public-origin`, else its
    /// listen address): what `getPatternEnvironment().apiUrl` answers.
    pub public_origin: Arc<str>,
    /// The host's effect broker (`fetch*` builtins); `None`: effects answer
    /// their error state.
    pub effects: Option<Arc<crate::effects::Broker>>,
}

/// What the pattern code of one space may write. A run past one of them is
/// refused as a whole (`actions.refused`) and its writes are discarded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteLimits {
    /// Bytes of one document's value (as JSON).
    pub doc_bytes: usize,
    /// Bytes one wave's actions may write in total (as JSON, per action's
    /// final value of each document it touches): the wave's budget of
    /// host-side work.
    pub wave_write_bytes: usize,
    /// Writes (`set`s) one handler run may make.
    pub action_writes: usize,
    /// Pieces one handler run may create (patterns it calls, handlers it
    /// binds).
    pub action_pieces: usize,
    /// Pieces one space may hold, deployed and created together.
    pub space_pieces: usize,
}

impl Default for WriteLimits {
    fn default() -> Self {
        WriteLimits {
            doc_bytes: 4 << 20,
            wave_write_bytes: 16 << 20,
            action_writes: 100_000,
            // Creating a piece costs about 0.1 ms of the run and a few
            // hundred bytes of the piece list: 1,000 in one event stays
            // within a wave's deadline, and 20,000 keeps the list a few MB.
            action_pieces: 1_000,
            space_pieces: 20_000,
        }
    }
}

/// The key of handler entropy. `Debug` never prints it.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct EntropyKey(pub [u8; 32]);

impl std::fmt::Debug for EntropyKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EntropyKey(<redacted>)")
    }
}

/// Domain separation of the handler-entropy hash from other uses of a key.
const ENTROPY_DOMAIN: &[u8] = b"spacewake/handler-entropy/v1\0";

/// The seed of a handler run's `Math.random()`: a keyed hash of space,
/// piece and event id. The same event replayed after a crash draws the
/// same numbers; without the key, the numbers cannot be predicted.
pub fn handler_seed(key: &EntropyKey, space: &str, piece: &str, event_id: &str) -> u64 {
    let mut h = blake3::Hasher::new_keyed(&key.0);
    h.update(ENTROPY_DOMAIN);
    for part in [space, piece, event_id] {
        h.update(&(part.len() as u64).to_le_bytes());
        h.update(part.as_bytes());
    }
    u64::from_le_bytes(h.finalize().as_bytes()[..8].try_into().expect("8 bytes"))
}

/// The id of an event a handler derives from the event it handles
/// (`PARENT/send/N`). Bounded like a client's id: a parent too long to
/// extend is replaced by its hash, so a derived id can never make a commit
/// invalid, and stays the same when the parent is replayed.
pub fn derived_event_id(parent: &str, kind: &str, n: usize) -> String {
    let suffix = format!("/{kind}/{n}");
    let max = crate::protocol::messages::MAX_EVENT_ID_CHARS;
    if parent.chars().count() + suffix.len() <= max {
        return format!("{parent}{suffix}");
    }
    let digest = blake3::hash(parent.as_bytes()).to_hex();
    format!("~{}{suffix}", &digest[..32])
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            sandbox: SandboxConfig::default(),
            engine_images: crate::sandbox::DEFAULT_ENGINE_IMAGES,
            action_budget: None,
            wave_event_limit: 256,
            metering: true,
            ledger_window_ms: crate::accounting::DEFAULT_WINDOW_MS,
            entropy_key: EntropyKey::default(),
            limits: WriteLimits::default(),
            doc_cache_bytes: DEFAULT_DOC_CACHE_BYTES,
            public_origin: Arc::from(DEFAULT_PUBLIC_ORIGIN),
            effects: None,
        }
    }
}

/// Half the engine's default heap limit: a space's runtime then holds at
/// most about one and a half times that limit in all (engine heap plus
/// cached documents between waves).
pub const DEFAULT_DOC_CACHE_BYTES: usize = 32 << 20;

/// What happened to one action, kept for diagnosis and tests.
#[derive(Debug, Clone, PartialEq)]
pub struct ActionFailure {
    pub action: String,
    pub kind: &'static str,
    pub error: String,
}

/// A node as listed for operators and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeInfo {
    pub id: String,
    pub piece: String,
    pub kind: String,
    pub label: String,
    pub runs: u64,
}

/// What a wave did.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WaveReport {
    pub seq: Option<u64>,
    pub events: usize,
    /// Events consumed whose handler ran and returned normally.
    pub delivered: Vec<String>,
    /// Events consumed whose handler failed (writes discarded).
    pub failed_events: Vec<String>,
    /// Events consumed without running their handler (the caller asked).
    pub skipped_events: Vec<String>,
    /// Events consumed without delivery after their retries.
    pub dead_lettered: Vec<String>,
    /// (event id, last error) of each of `dead_lettered`.
    pub dead_letter_errors: Vec<(String, String)>,
    /// What the wave's meter booked to the ledger (None when metering is
    /// off or the wave ran nothing).
    pub metered: Option<crate::store::LedgerDelta>,
    /// Documents the wave wrote.
    pub written: Vec<String>,
    /// Bytes its handlers wrote (values as measured by the storage quota).
    pub written_bytes: u64,
    pub handler_runs: u64,
    pub derivation_runs: u64,
    pub failures: Vec<ActionFailure>,
    /// What each wake event's callback run did, for its fire's record.
    pub wake_runs: Vec<WakeRun>,
}

pub use crate::schedule::delivery::WakeRun;

impl WaveReport {
    /// What delivery settles of this wave (`schedule::delivery`).
    pub fn outcome(&self) -> crate::schedule::delivery::WaveOutcome<'_> {
        crate::schedule::delivery::WaveOutcome {
            seq: self.seq,
            delivered: &self.delivered,
            failed: &self.failed_events,
            skipped: &self.skipped_events,
            dead_lettered: &self.dead_lettered,
            dead_letter_errors: &self.dead_letter_errors,
            written: &self.written,
            wake_runs: &self.wake_runs,
        }
    }
}

/// Bookkeeping run inside a wave's transaction with the wave's report.
pub type WaveSettle<'a> =
    &'a mut dyn FnMut(&WaveReport, &mut crate::store::PlaneTx<'_>) -> crate::store::StoreResult<()>;

struct Node {
    def: NodeDef,
    piece: String,
    runs: u64,
}

struct Binding {
    def: StreamDef,
    piece: String,
}

struct EntryPoints {
    begin_program: JsHandle,
    instantiate: JsHandle,
    run_node: JsHandle,
    run_map: JsHandle,
    run_handler: JsHandle,
}

/// One active space's runtime: its sandbox, graph and pending wave.
pub struct SpaceRuntime {
    space: Space,
    lease: Lease,
    /// Give the lease back with a wave's commit once nothing is left to
    /// deliver (a brief scheduled tenure about to park; see
    /// [`SpaceRuntime::release_with_last_wave`]).
    release_with_last_wave: bool,
    /// The lease was given back with a wave: the next commit, if any, takes
    /// it again first.
    lease_released: bool,
    clock: Arc<dyn Clock>,
    lease_ttl_ms: u64,
    cfg: RuntimeConfig,
    sandbox: TenureSandbox,
    entry: EntryPoints,
    /// Program hash -> module instances loaded this tenure.
    instances: HashMap<String, u32>,
    /// (owner piece, program hash) -> the instance its pieces run in.
    owner_instances: HashMap<(String, String), String>,
    /// Piece -> the deployed piece it descends from (itself if deployed).
    piece_owner: HashMap<String, String>,
    /// Each loaded program's entry file (by hash), so the ledger names a
    /// pattern as `file#export`.
    program_entries: HashMap<String, String>,
    pieces: BTreeMap<String, (String, String)>,
    nodes: HashMap<String, Node>,
    streams: HashMap<String, Binding>,
    /// document id -> nodes whose arguments read it.
    readers: HashMap<String, HashSet<String>>,
    /// Write-through cache of documents (`None` = absent).
    docs: HashMap<String, Option<Value>>,
    /// The seq that last wrote each cached document (as far as we know).
    doc_seq: HashMap<String, u64>,
    /// While `Some`, every document read raises it to that document's seq.
    read_seq: Option<u64>,
    /// While `Some`, the documents a node's inputs were assembled from
    /// (through links too): what the node depends on.
    read_log: Option<HashSet<String>>,
    /// Documents read since the last [`SpaceRuntime::take_session_reads`]
    /// by reads made on behalf of sessions (for the back-off of unread
    /// scheduled output).
    session_reads: HashSet<String>,
    /// Documents written by the pending wave (reported with the wave).
    wave_writes: BTreeSet<String>,
    fresh: HashSet<String>,
    /// Nodes being refreshed (their inputs resolving), innermost last.
    refreshing: Vec<String>,
    /// Nodes whose frame (what their run built) is registered this tenure.
    framed: HashSet<String>,
    action_hash: HashMap<String, String>,
    demand: BTreeSet<(String, Vec<PathSeg>)>,
    // The pending wave. Writes coalesce per document: the commit carries
    // each touched document's final value once, in first-touched order.
    touched: Vec<String>,
    touched_set: HashSet<String>,
    sends: Vec<NewEvent>,
    watermarks: BTreeMap<String, u64>,
    hashes_to_store: BTreeMap<String, String>,
    report: WaveReport,
    counters: SpaceCounters,
    failures: Vec<ActionFailure>,
    bucket: crate::store::Bucket,
    meter: Option<Meter>,
    /// Per-action attribution not yet written: it rides along with every
    /// [`COST_FLUSH_WAVES`]th commit (and at stop), so diagnosis costs a
    /// write per many waves, not per wave. The ledger itself is never
    /// buffered.
    pending_costs: BTreeMap<CostKey, CostTally>,
    waves_since_costs: u32,
    /// Undelivered events whose waves failed their tenure: attempts and the
    /// last error (mirrors the plane's `event_failures`).
    event_failures: HashMap<String, (u32, String)>,
    /// (event id, stream, seq) of the events the wave in flight consumes.
    wave_events: Vec<(String, String, u64)>,
    /// Events the wave in flight dead-letters, with attempts and error.
    dead_lettering: Vec<(EventRecord, u32, String)>,
    failed_wave_attempts: u32,
    /// While a wake event's callback runs: the lines it logs, kept for its
    /// fire's record.
    wake_logs: Option<Vec<crate::store::FireLog>>,
    /// Bytes the pending wave's actions wrote (see [`WriteLimits`]).
    wave_bytes: usize,
    /// The space's rate for `console.*` lines (`console.rs`).
    log_rate: console::LogRate,
    /// Pieces this activation could not load, with why: the space serves
    /// the others, and their events are dead-lettered.
    set_aside: BTreeMap<String, String>,
    /// What the document cache may hold: bytes counted as documents are
    /// read from the store and written by actions (an upper estimate: a
    /// document written twice counts twice until the next trim measures).
    cache_estimate: usize,
    /// What the space's storage quota has left for the pending wave's
    /// actions to write (set by the host before each wave); `None`: no quota.
    storage_left: Option<u64>,
    /// `#now/N` clocks pulled this tenure: node -> (grid ms, tick it holds).
    ticking: BTreeMap<String, (u64, u64)>,
    /// Effect requests of this tenure on their way (`effects.rs`).
    effects_in_flight: HashMap<String, effects::InFlight>,
    /// Where the broker hands outcomes back (the space server's queue).
    effect_sink: Option<effects::EffectSink>,
    /// Effects booked since the last metered wave (the ledger's effect
    /// columns; the compute ones stay zero here).
    effect_tally: crate::store::LedgerDelta,
    /// The space's scheduled budget is spent: waves billing the scheduled
    /// bucket send no effect (set by the host per turn).
    scheduled_budget_spent: bool,
    /// While `Some`, reads keep links to keyed elements (`elementById`)
    /// and collect their documents here (a handler's documents).
    element_links: Option<Vec<String>>,
    /// While set, a linked object or array read says where it came from
    /// (`{$from, $at, value}`: an action's inputs, so what it hands on
    /// unchanged stays a link); `sources_made` counts those given.
    sources: bool,
    sources_made: u64,
    /// The links a deep resolution is inside of (`resolve_deep`).
    following: Vec<(String, Vec<PathSeg>)>,
    /// The last link resolved led nowhere (no such document or field): an
    /// object field holding it is left out, so pattern code reads
    /// `undefined` there, as in the reference, not `null`.
    last_absent: bool,
    /// The nodes nothing links to, pulled in every wave for what they write
    /// (`None`: the graph changed since they were found).
    effects: Option<Vec<String>>,
}

/// Suffix of a stored inputs hash whose run built a frame.
const FRAMED: &str = "+frame";

/// Failed waves an event may be in before it is dead-lettered.
pub const MAX_EVENT_ATTEMPTS: u32 = 3;

/// Builds a sandbox with `cfg`'s limits, loads the authoring API into it
/// and frees it: the host's start-up check of the engine. The compiled API
/// stays in the process's bytecode cache, so no activation compiles it.
pub fn check_engine(cfg: &RuntimeConfig) -> RuntimeResult<()> {
    let sandbox = Sandbox::new(cfg.sandbox.clone(), &COMMONFABRIC_JS)?;
    sandbox.import(crate::sandbox::COMMONFABRIC, &CallOptions::reactive())?;
    Ok(())
}

/// Whether a new piece's argument must fit its pattern's argument type.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ArgumentCheck {
    Strict,
    Lenient,
}

/// The error for a lease another holder has: who, and until when.
fn lease_held(space: &mut Space) -> RuntimeError {
    let current = space.current_lease().ok().flatten();
    RuntimeError::LeaseHeld {
        space: space.id().to_string(),
        holder: current
            .as_ref()
            .map_or_else(String::new, |l| l.holder.clone()),
        expires_at_ms: current.map_or(0, |l| l.expires_at_ms),
    }
}

impl SpaceRuntime {
    /// Takes the space's lease for a tenure and rebuilds every piece's graph.
    pub fn start(
        space: Space,
        clock: Arc<dyn Clock>,
        lease_ttl_ms: u64,
        cfg: RuntimeConfig,
    ) -> RuntimeResult<SpaceRuntime> {
        SpaceRuntime::start_leased(space, None, clock, lease_ttl_ms, cfg)
    }

    /// [`SpaceRuntime::start`] for a tenure whose lease was already taken
    /// (`lease`: in the firing's transaction, see `schedule::fire::
    /// fire_due_taking_lease`); with `None` the lease is acquired here.
    pub fn start_leased(
        mut space: Space,
        lease: Option<Lease>,
        clock: Arc<dyn Clock>,
        lease_ttl_ms: u64,
        cfg: RuntimeConfig,
    ) -> RuntimeResult<SpaceRuntime> {
        let lease = match lease {
            Some(l) => l,
            None => match space.acquire_lease()? {
                Some(l) => l,
                None => return Err(lease_held(&mut space)),
            },
        };
        let sandbox = TenureSandbox::get(&cfg.sandbox, &COMMONFABRIC_JS, cfg.engine_images)?;
        space.counters().inc(if sandbox.reused() {
            Counter::EngineImagesReused
        } else {
            Counter::EngineSandboxesBuilt
        });
        // The host's entry points live in the private module behind
        // `commonfabric`, which no pattern module can import.
        let ns = sandbox
            .import(crate::sandbox::INTERNAL_MODULE, &CallOptions::reactive())?
            .value;
        let entry = EntryPoints {
            begin_program: sandbox.get(ns, "__beginProgram")?,
            instantiate: sandbox.get(ns, "__instantiate")?,
            run_node: sandbox.get(ns, "__runNode")?,
            run_map: sandbox.get(ns, "__runMap")?,
            run_handler: sandbox.get(ns, "__runHandler")?,
        };
        let started_ms = clock.now_ms();
        let counters = space.counters().clone();
        space.prefetch_tenure(cfg.wave_event_limit)?;
        let action_hash = space.action_states()?.into_iter().collect();
        let event_failures = space
            .event_failures()?
            .into_iter()
            .map(|f| (f.event_id, (f.attempts, f.last_error)))
            .collect();
        let mut rt = SpaceRuntime {
            space,
            lease,
            release_with_last_wave: false,
            lease_released: false,
            clock,
            lease_ttl_ms,
            cfg,
            sandbox,
            entry,
            instances: HashMap::new(),
            owner_instances: HashMap::new(),
            piece_owner: HashMap::new(),
            program_entries: HashMap::new(),
            pieces: BTreeMap::new(),
            nodes: HashMap::new(),
            streams: HashMap::new(),
            readers: HashMap::new(),
            docs: HashMap::new(),
            doc_seq: HashMap::new(),
            read_seq: None,
            read_log: None,
            session_reads: HashSet::new(),
            wave_writes: BTreeSet::new(),
            fresh: HashSet::new(),
            refreshing: Vec::new(),
            framed: HashSet::new(),
            action_hash,
            demand: BTreeSet::new(),
            touched: Vec::new(),
            touched_set: HashSet::new(),
            sends: Vec::new(),
            watermarks: BTreeMap::new(),
            hashes_to_store: BTreeMap::new(),
            report: WaveReport::default(),
            counters,
            failures: Vec::new(),
            bucket: crate::store::Bucket::Session,
            meter: None,
            pending_costs: BTreeMap::new(),
            waves_since_costs: 0,
            event_failures,
            wave_events: Vec::new(),
            dead_lettering: Vec::new(),
            wake_logs: None,
            failed_wave_attempts: 0,
            wave_bytes: 0,
            log_rate: console::LogRate::new(started_ms),
            set_aside: BTreeMap::new(),
            cache_estimate: 0,
            storage_left: None,
            ticking: BTreeMap::new(),
            effects_in_flight: HashMap::new(),
            effect_sink: None,
            effect_tally: Default::default(),
            scheduled_budget_spent: false,
            element_links: None,
            sources: false,
            sources_made: 0,
            following: Vec::new(),
            last_absent: false,
            effects: None,
        };
        if let Some(broker) = rt.cfg.effects.clone() {
            // The space's own effect knobs, as an operator last set them.
            let o = crate::accounting::effect_overrides(&mut rt.space)?;
            broker.set_space_limits(rt.space.id(), &o);
        }
        let listed = rt.doc(PIECES_DOC)?.unwrap_or(json!({}));
        if let Some(map) = listed.as_object() {
            for (piece, info) in map {
                let program = info["program"].as_str().unwrap_or_default().to_string();
                let export = info["export"].as_str().unwrap_or("default").to_string();
                let owner = graph::deployed_ancestor(map, piece);
                let loaded = rt
                    .load_stored_program(&program)
                    .and_then(|compiled| rt.record_piece(piece, &owner, &compiled, &export, None));
                match loaded {
                    Ok(()) => {}
                    // What one piece's code or stored program does wrong
                    // costs that piece, not the space: it is set aside and
                    // the others serve. The store or the lease failing
                    // still ends the activation.
                    Err(
                        e @ (RuntimeError::Sandbox(_)
                        | RuntimeError::Compile(_)
                        | RuntimeError::Invalid(_)
                        | RuntimeError::InvalidArgument(_)
                        | RuntimeError::UnknownPiece(_)),
                    ) => rt.set_aside_piece(piece, e.to_string()),
                    Err(e) => return Err(e),
                }
            }
        }
        // What operators see: kept in step with this activation (written
        // with its first wave, and only when it changed).
        let recorded = rt.doc(SET_ASIDE_DOC)?;
        let now = json!(rt.set_aside);
        let changed = match &recorded {
            Some(v) => *v != now,
            None => !rt.set_aside.is_empty(),
        };
        if changed {
            rt.write(SET_ASIDE_DOC, &[], now)?;
        }
        Ok(rt)
    }

    /// The space's store handle (for the serving loop's bookkeeping).
    pub fn space(&mut self) -> &mut Space {
        &mut self.space
    }

    pub fn lease(&self) -> &Lease {
        &self.lease
    }

    /// Ends the tenure: releases the lease. Pending work is dropped; call
    /// [`SpaceRuntime::flush`] first to keep it.
    pub fn stop(mut self) -> RuntimeResult<Space> {
        let costs = self.take_costs(true);
        let written = match costs.is_empty() {
            true => Ok(()),
            false => self.space.plane(|p| write_costs(p, &costs)),
        };
        // Given back even when the costs could not be written (a lease lost
        // meanwhile refuses them): the store forgets the hold either way.
        if !self.lease_released {
            let lease = self.lease.clone();
            self.space.release_lease(&lease)?;
        }
        written?;
        Ok(self.space)
    }

    /// Asks that the lease be given back in the commit of the wave that
    /// leaves nothing to deliver, on a file held exclusively (a brief
    /// scheduled tenure, which parks right after): one write transaction
    /// fewer per wake. If work comes after all, the next commit takes the
    /// lease again first (or the tenure ends if another holder has it).
    pub fn release_with_last_wave(&mut self, on: bool) {
        self.release_with_last_wave = on;
    }

    /// Whether the lease was given back with a wave (and not taken again).
    pub fn lease_released(&self) -> bool {
        self.lease_released
    }

    fn record_failure(&mut self, action: &str, kind: &'static str, e: &SandboxError) {
        self.counters.inc(match e {
            SandboxError::Preempted { .. } => Counter::ActionsPreempted,
            SandboxError::OutOfMemory { .. } => Counter::ActionsOutOfMemory,
            SandboxError::Capability { .. } => Counter::ActionsCapabilityDenied,
            _ => Counter::ActionsFailed,
        });
        tracing::warn!(action, kind, error = %e, "action failed");
        self.push_failure(ActionFailure {
            action: action.to_string(),
            kind,
            error: e.to_string(),
        });
    }

    /// Sets a piece this activation cannot load aside: counted, listed
    /// with the tenure's failures, its events dead-lettered
    /// ([`SpaceRuntime::set_aside_reason`]).
    fn set_aside_piece(&mut self, piece: &str, reason: String) {
        tracing::warn!(piece, reason, "piece set aside");
        self.counters.inc(Counter::PiecesSetAside);
        self.push_failure(ActionFailure {
            action: piece.to_string(),
            kind: "piece",
            error: format!("set aside: {reason}"),
        });
        self.set_aside.insert(piece.to_string(), reason);
    }

    /// Why the piece a stream or document belongs to is set aside, if it is.
    pub(super) fn set_aside_reason(&self, id: &str) -> Option<String> {
        self.set_aside
            .iter()
            .find(|(p, _)| capability::owned_by(id, p))
            .map(|(p, r)| format!("piece {p} is set aside: {r}"))
    }

    /// The pieces this activation set aside, with why.
    pub fn set_aside(&self) -> &BTreeMap<String, String> {
        &self.set_aside
    }

    fn push_failure(&mut self, f: ActionFailure) {
        self.report.failures.push(f.clone());
        self.failures.push(f);
        if self.failures.len() > 256 {
            self.failures.remove(0);
        }
    }

    /// For manual-clock drivers (scenarios) that jump time past the lease:
    /// renews the lease, or starts a new tenure if it lapsed and nobody else
    /// took the space. The serving loop never does this; it ends the tenure.
    pub fn resume_tenure(&mut self) -> RuntimeResult<()> {
        if self.space.renew_lease(&self.lease)?.is_some() {
            self.lease = self.space.current_lease()?.unwrap_or(self.lease.clone());
            return Ok(());
        }
        match self.space.acquire_lease()? {
            Some(l) => {
                self.lease = l;
                Ok(())
            }
            None => Err(lease_held(&mut self.space)),
        }
    }

    /// Which ledger bucket this tenure's waves bill: `Scheduled` for a tenure
    /// started by a scheduled wake, `Session` otherwise.
    /// Whether the space's scheduled budget is spent: then a wave billing
    /// the scheduled bucket sends no effect (`effects.skippedBudget`).
    pub fn set_scheduled_budget_spent(&mut self, spent: bool) {
        self.scheduled_budget_spent = spent;
    }

    pub fn set_bucket(&mut self, bucket: crate::store::Bucket) {
        self.bucket = bucket;
    }

    /// Bytes the next wave's actions may write before the space's storage
    /// quota refuses them (`None`: no quota). Counted like the wave's write
    /// budget, by each document's whole new value, so it errs on refusing.
    pub fn set_storage_left(&mut self, left: Option<u64>) {
        self.storage_left = left;
    }

    /// Renews the tenure's lease now; `LeaseLost` ends the tenure.
    pub fn renew_lease(&mut self) -> RuntimeResult<()> {
        if self.lease_released {
            // Nothing to renew: the next commit takes it again.
            return Ok(());
        }
        match self.space.renew_lease(&self.lease)? {
            Some(l) => {
                self.lease = l;
                Ok(())
            }
            None => Err(RuntimeError::LeaseLost),
        }
    }

    /// The data keys of a piece's result (not the `$`-reserved ones): what a
    /// warm request for the piece demands.
    pub fn data_keys(&mut self, piece: &str) -> RuntimeResult<Vec<String>> {
        let result = self.doc(piece)?.unwrap_or(Value::Null);
        Ok(result
            .as_object()
            .map(|m| m.keys().filter(|k| !k.starts_with('$')).cloned().collect())
            .unwrap_or_default())
    }

    /// Bytes the space's JavaScript heap holds now.
    pub fn memory_used_bytes(&self) -> u64 {
        self.sandbox.memory_used_bytes()
    }

    /// Whether a piece exists in this space.
    pub fn has_piece(&self, piece: &str) -> bool {
        self.pieces.contains_key(piece)
    }

    /// Reads a raw document (no link resolution, no pulls).
    pub fn read_doc(&mut self, id: &str) -> RuntimeResult<(Option<Value>, u64)> {
        let v = self.doc(id)?;
        Ok((v, self.doc_seq.get(id).copied().unwrap_or(0)))
    }

    fn ensure_lease(&mut self) -> RuntimeResult<()> {
        if self.lease_released {
            // Work after the last wave: a new tenure of the lease.
            let taken = self.space.acquire_lease()?.ok_or(RuntimeError::LeaseLost)?;
            self.lease = taken;
            self.lease_released = false;
            return Ok(());
        }
        let now = self.clock.now_ms();
        // Renew when a third of the TTL has passed, as the serving loop does.
        if now + self.lease_ttl_ms * 2 / 3 < self.lease.expires_at_ms {
            return Ok(());
        }
        match self.space.renew_lease(&self.lease)? {
            Some(l) => {
                self.lease = l;
                Ok(())
            }
            None => Err(RuntimeError::LeaseLost),
        }
    }

    /// Appends an event to a piece's stream at `path` as an authored commit.
    pub fn send(
        &mut self,
        piece: &str,
        path: &[PathSeg],
        event_id: &str,
        payload: Value,
        author: &Author,
    ) -> RuntimeResult<u64> {
        let stream = self.stream_at(piece, path)?.ok_or_else(|| {
            RuntimeError::Invalid(format!(
                "no stream at {} of piece {piece}",
                crate::store::path::display_path(path)
            ))
        })?;
        let out = self.space.append_event(
            author.clone(),
            NewEvent {
                event_id: event_id.to_string(),
                stream,
                payload,
                fired_by: author.principal.clone(),
            },
        )?;
        Ok(out.seq.unwrap_or(0))
    }

    /// Sets the value at a result path of a piece, following links to the
    /// document that holds it (the argument, a local cell): what the
    /// reference harness's `send` does to a path that is not a stream. The
    /// write joins the pending wave. Derived outputs and the space's own
    /// documents cannot be set this way.
    pub fn set_path(&mut self, piece: &str, path: &[PathSeg], value: Value) -> RuntimeResult<()> {
        if !self.pieces.contains_key(piece) {
            return Err(RuntimeError::UnknownPiece(piece.to_string()));
        }
        let (doc, at) = self.cell_target(&Link {
            doc: piece.to_string(),
            path: path.to_vec(),
        })?;
        if self.nodes.contains_key(&doc) || capability::is_protected(&doc) {
            return Err(RuntimeError::Invalid(format!(
                "{} of piece {piece} is computed, not a cell that can be set",
                crate::store::path::display_path(path)
            )));
        }
        self.write(&doc, &at, value)
    }
}
