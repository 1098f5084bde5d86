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
//! - No event wedges the space: an event whose wave failed its tenure runs
//!   alone next time, and after [`MAX_EVENT_ATTEMPTS`] is dead-lettered.
//! - A wave commits at most once, with the lease of this runtime's tenure,
//!   and advances the watermarks of the events it consumed in that commit.
//! - Only this module talks to the sandbox; only the store talks to SQL.

pub mod argument;
pub mod capability;
pub mod graph;

use crate::clock::Clock;
use crate::compiler::{CompileCache, CompiledProgram, MemorySource};
use crate::metrics::{Counter, SpaceCounters};
use crate::sandbox::{CallOptions, JsHandle, Sandbox, SandboxConfig, SandboxError};
use crate::store::path::{get_at, set_at};
use crate::store::{
    Author, CommitClass, CommitRequest, DocOp, EventRecord, Lease, NewEvent, PathSeg, Space,
    StoreError,
};
use capability::Reach;
use graph::{as_link, as_stream, field_flag, linked_docs, Link, NodeDef, Recorded, StreamDef};
use serde_json::{json, Value};
use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, OnceLock};

/// The JS source of the `commonfabric` module.
pub const COMMONFABRIC_JS: &str = include_str!("commonfabric.js");

/// Document listing the space's pieces: `{pieceId: {program, export}}`.
pub const PIECES_DOC: &str = "space/pieces";

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
    /// Keys the seed of a handler's `Math.random()`, so no sender can
    /// choose an event id for the outcome it wants (the host derives it
    /// from its secret; the all-zero default is for runtimes without one).
    pub entropy_key: EntropyKey,
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
}

impl Default for WriteLimits {
    fn default() -> Self {
        WriteLimits {
            doc_bytes: 4 << 20,
            wave_write_bytes: 16 << 20,
            action_writes: 100_000,
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
            action_budget: None,
            wave_event_limit: 256,
            metering: true,
            ledger_window_ms: crate::accounting::DEFAULT_WINDOW_MS,
            entropy_key: EntropyKey::default(),
            limits: WriteLimits::default(),
        }
    }
}

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
    /// What the wave's meter booked to the ledger (None when metering is
    /// off or the wave ran nothing).
    pub metered: Option<crate::store::LedgerDelta>,
    /// Documents the wave wrote.
    pub written: Vec<String>,
    pub handler_runs: u64,
    pub derivation_runs: u64,
    pub failures: Vec<ActionFailure>,
}

/// Bookkeeping run inside a wave's transaction with the wave's report.
pub type WaveSettle<'a> =
    &'a mut dyn FnMut(&WaveReport, &mut crate::store::PlaneTx<'_>) -> crate::store::StoreResult<()>;

/// The compute of the wave in progress, until it commits.
struct Meter {
    cpu_start_us: u64,
    wall_start: std::time::Instant,
    /// action id -> (piece, kind, wall ns, runs)
    actions: BTreeMap<String, (String, &'static str, u64, u64)>,
}

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
    instantiate: JsHandle,
    run_node: JsHandle,
    run_handler: JsHandle,
}

/// One active space's runtime: its sandbox, graph and pending wave.
pub struct SpaceRuntime {
    space: Space,
    lease: Lease,
    clock: Arc<dyn Clock>,
    lease_ttl_ms: u64,
    cfg: RuntimeConfig,
    sandbox: Sandbox,
    entry: EntryPoints,
    loaded: HashSet<String>,
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
    /// Documents read since the last [`SpaceRuntime::take_session_reads`]
    /// by reads made on behalf of sessions (for the back-off of unread
    /// scheduled output).
    session_reads: HashSet<String>,
    /// Documents written by the pending wave (reported with the wave).
    wave_writes: BTreeSet<String>,
    fresh: HashSet<String>,
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
    /// Bytes the pending wave's actions wrote (see [`WriteLimits`]).
    wave_bytes: usize,
}

/// Failed waves an event may be in before it is dead-lettered.
pub const MAX_EVENT_ATTEMPTS: u32 = 3;

/// Waves between writes of the per-action attribution.
const COST_FLUSH_WAVES: u32 = 32;

/// (piece, action, kind, pattern, cpu µs, wall µs, runs) of one action.
type CostRow = (String, String, &'static str, String, u64, u64, u64);
/// (window start, piece, action)
type CostKey = (u64, String, String);
/// (kind, pattern, cpu µs, wall µs, runs)
type CostTally = (&'static str, String, u64, u64, u64);

/// Builds a sandbox with `cfg`'s limits, loads the authoring API into it
/// and frees it: the host's start-up check of the engine. The compiled API
/// stays in the process's bytecode cache, so no activation compiles it.
pub fn check_engine(cfg: &RuntimeConfig) -> RuntimeResult<()> {
    let sandbox = Sandbox::new(cfg.sandbox.clone(), COMMONFABRIC_JS)?;
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
        mut space: Space,
        clock: Arc<dyn Clock>,
        lease_ttl_ms: u64,
        cfg: RuntimeConfig,
    ) -> RuntimeResult<SpaceRuntime> {
        let lease = match space.acquire_lease()? {
            Some(l) => l,
            None => return Err(lease_held(&mut space)),
        };
        let sandbox = Sandbox::new(cfg.sandbox.clone(), COMMONFABRIC_JS)?;
        let ns = sandbox
            .import(crate::sandbox::COMMONFABRIC, &CallOptions::reactive())?
            .value;
        let entry = EntryPoints {
            instantiate: sandbox.get(ns, "__instantiate")?,
            run_node: sandbox.get(ns, "__runNode")?,
            run_handler: sandbox.get(ns, "__runHandler")?,
        };
        let counters = space.counters().clone();
        let action_hash = space.action_states()?.into_iter().collect();
        let event_failures = space
            .event_failures()?
            .into_iter()
            .map(|f| (f.event_id, (f.attempts, f.last_error)))
            .collect();
        let mut rt = SpaceRuntime {
            space,
            lease,
            clock,
            lease_ttl_ms,
            cfg,
            sandbox,
            entry,
            loaded: HashSet::new(),
            pieces: BTreeMap::new(),
            nodes: HashMap::new(),
            streams: HashMap::new(),
            readers: HashMap::new(),
            docs: HashMap::new(),
            doc_seq: HashMap::new(),
            read_seq: None,
            session_reads: HashSet::new(),
            wave_writes: BTreeSet::new(),
            fresh: HashSet::new(),
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
            failed_wave_attempts: 0,
            wave_bytes: 0,
        };
        let listed = rt.doc(PIECES_DOC)?.unwrap_or(json!({}));
        if let Some(map) = listed.as_object() {
            for (piece, info) in map {
                let program = info["program"].as_str().unwrap_or_default().to_string();
                let export = info["export"].as_str().unwrap_or("default").to_string();
                let compiled = rt.load_stored_program(&program)?;
                rt.record_piece(piece, &compiled, &export, None)?;
            }
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
        if !costs.is_empty() {
            self.space.plane(|p| write_costs(p, &costs))?;
        }
        let lease = self.lease.clone();
        self.space.release_lease(&lease)?;
        Ok(self.space)
    }

    // ----- programs and pieces -------------------------------------------

    /// Stores a compiled program's sources in the space (once per hash) and
    /// creates a piece from its `export` with `argument`. Returns the piece id.
    pub fn create_piece(
        &mut self,
        program: &CompiledProgram,
        export: Option<&str>,
        argument: &Value,
    ) -> RuntimeResult<String> {
        self.create_piece_with(program, export, argument, ArgumentCheck::Lenient)
    }

    /// [`SpaceRuntime::create_piece`] for a deploy: the argument must fit
    /// the pattern's argument type ([`argument::check`]), or nothing is
    /// created. The scenario harness, like the reference's, does not check.
    pub fn deploy_piece(
        &mut self,
        program: &CompiledProgram,
        export: Option<&str>,
        argument: &Value,
    ) -> RuntimeResult<String> {
        self.create_piece_with(program, export, argument, ArgumentCheck::Strict)
    }

    fn create_piece_with(
        &mut self,
        program: &CompiledProgram,
        export: Option<&str>,
        argument: &Value,
        check: ArgumentCheck,
    ) -> RuntimeResult<String> {
        let hash = program.hash_hex();
        let export = export.unwrap_or("default").to_string();
        let seq = self.space.head_seq()?;
        let n = self.pieces.len();
        let digest = blake3::hash(format!("{hash}/{export}/{seq}/{n}/{argument}").as_bytes());
        let piece = format!("pc-{}", &digest.to_hex()[..16]);
        // First, so a pattern that fails to start (or refuses its
        // argument) leaves nothing behind, not even its sources.
        self.record_piece(&piece, program, &export, Some((argument, check)))?;
        let program_doc = format!("program/{hash}");
        if self.doc(&program_doc)?.is_none() {
            let modules: Vec<Value> = program
                .modules
                .iter()
                .map(|m| json!({"name": m.name, "source": m.source}))
                .collect();
            self.write(
                &program_doc,
                &[],
                json!({"entry": program.entry().name, "modules": modules}),
            )?;
        }
        // When it was created, for operators (the listing's only use).
        let created_ms = self.clock.now_ms();
        self.write(
            PIECES_DOC,
            &[PathSeg::Key(piece.clone())],
            json!({"program": hash, "export": export, "createdMs": created_ms}),
        )?;
        self.counters.inc(Counter::PiecesCreated);
        Ok(piece)
    }

    fn load_stored_program(&mut self, hash: &str) -> RuntimeResult<Arc<CompiledProgram>> {
        let doc = self
            .doc(&format!("program/{hash}"))?
            .ok_or_else(|| RuntimeError::Invalid(format!("program {hash} is not stored")))?;
        let entry = doc["entry"].as_str().unwrap_or_default().to_string();
        let mut src = MemorySource::new();
        for m in doc["modules"].as_array().into_iter().flatten() {
            src.insert(
                m["name"].as_str().unwrap_or_default(),
                m["source"].as_str().unwrap_or_default(),
            );
        }
        compile_cache()
            .compile(&entry, &src)
            .map_err(|d| RuntimeError::Compile(crate::compiler::render(&d)))
    }

    fn ensure_loaded(&mut self, program: &CompiledProgram) -> RuntimeResult<()> {
        let hash = program.hash_hex();
        if self.loaded.contains(&hash) {
            return Ok(());
        }
        let prefix = format!("p{}/r/", &hash[..16]);
        let names: Vec<(String, String)> = program
            .modules
            .iter()
            .map(|m| {
                (
                    format!("{prefix}{}", m.name.trim_start_matches("./")),
                    m.js.clone(),
                )
            })
            .collect();
        let entry_name = program.entry().name.trim_start_matches("./").to_string();
        // A boot module per program hands its entry namespace to
        // commonfabric's registry (namespaces cannot cross into Rust).
        let boot = format!(
            "import * as m from \"./{entry_name}\";\n\
             import {{ __registerProgram }} from \"commonfabric\";\n\
             __registerProgram(\"{hash}\", m);\n"
        );
        let mut mods: Vec<(&str, &str)> = names
            .iter()
            .map(|(n, s)| (n.as_str(), s.as_str()))
            .collect();
        let boot_name = format!("{prefix}__boot.js");
        mods.push((&boot_name, &boot));
        self.sandbox.add_modules(&mods)?;
        let ns = self
            .sandbox
            .import(&boot_name, &self.options_reactive())?
            .value;
        self.sandbox.release(ns);
        self.loaded.insert(hash);
        Ok(())
    }

    /// Runs the pattern body and records the piece's graph. On first
    /// creation (`argument` given) it also writes the argument document, the
    /// local cells and the result document.
    fn record_piece(
        &mut self,
        piece: &str,
        program: &CompiledProgram,
        export: &str,
        argument: Option<(&Value, ArgumentCheck)>,
    ) -> RuntimeResult<()> {
        self.ensure_loaded(program)?;
        let out = self.sandbox.call(
            self.entry.instantiate,
            &[json!(program.hash_hex()), json!(export), json!(piece)],
            &self.options_reactive(),
        )?;
        let mut rec: Recorded = serde_json::from_value(out.value)
            .map_err(|e| RuntimeError::Invalid(format!("pattern graph: {e}")))?;
        if !declaration_was_validated(program, &rec.result) {
            // A `$SCHEDULE` the compiler never saw (a key built at run
            // time): not stored, so never indexed.
            if let Some(m) = rec.result.as_object_mut() {
                m.remove(crate::schedule::SCHEDULE_KEY);
            }
            self.counters.inc(Counter::ScheduleUnvalidated);
            tracing::warn!(
                piece,
                "a [SCHEDULE] the compiler did not validate was dropped"
            );
        }
        if let (Some((arg, ArgumentCheck::Strict)), Some(schema)) =
            (argument, rec.argument_schema.as_ref())
        {
            // Before anything is written for the piece.
            argument::check(schema, arg)?;
        }
        // The graph may refer only to the piece's own documents and to what
        // its argument refers to (what its deployer gave it).
        let mut reach = Reach::new(piece);
        match argument {
            Some((arg, _)) => reach.add_refs_in(arg),
            None => {
                if let Some(arg) = self.doc(&format!("{piece}/argument"))? {
                    reach.add_refs_in(&arg);
                }
            }
        }
        let graph_refs = std::iter::once(&rec.result)
            .chain(rec.nodes.iter().map(|n| &n.args))
            .chain(rec.streams.iter().map(|s| &s.context))
            .chain(rec.cells.iter().map(|c| &c.initial));
        for v in graph_refs {
            if let Err(reason) = reach.check_value(v) {
                self.counters.inc(Counter::ActionsRefused);
                return Err(RuntimeError::Invalid(format!(
                    "piece {piece} refers outside what it was given: {reason}"
                )));
            }
        }
        if let Some((arg, _)) = argument {
            let arg = graph::apply_defaults(rec.argument_schema.as_ref(), arg);
            self.write(&format!("{piece}/argument"), &[], arg)?;
        }
        for c in &rec.cells {
            if self.doc(&c.id)?.is_none() {
                self.write(&c.id, &[], c.initial.clone())?;
            }
        }
        if self.doc(piece)?.as_ref() != Some(&rec.result) {
            self.write(piece, &[], rec.result.clone())?;
        }
        for n in rec.nodes {
            let mut reads = Vec::new();
            linked_docs(&n.args, &mut reads);
            for d in reads {
                self.readers.entry(d).or_default().insert(n.id.clone());
            }
            self.nodes.insert(
                n.id.clone(),
                Node {
                    def: n,
                    piece: piece.to_string(),
                    runs: 0,
                },
            );
        }
        for s in rec.streams {
            self.streams.insert(
                s.id.clone(),
                Binding {
                    def: s,
                    piece: piece.to_string(),
                },
            );
        }
        self.pieces
            .insert(piece.to_string(), (program.hash_hex(), export.to_string()));
        Ok(())
    }

    /// Deletes a piece: its result document (which drops its schedule
    /// entries through the index hook) and its listing; its graph is
    /// forgotten. Its cells stay, unreferenced.
    pub fn delete_piece(&mut self, piece: &str) -> RuntimeResult<()> {
        if self.pieces.remove(piece).is_none() {
            return Err(RuntimeError::UnknownPiece(piece.to_string()));
        }
        self.doc(piece)?;
        self.docs.insert(piece.to_string(), None);
        if self.touched_set.insert(piece.to_string()) {
            self.touched.push(piece.to_string());
        }
        self.invalidate(piece);
        let mut listed = self.doc(PIECES_DOC)?.unwrap_or(json!({}));
        if let Some(m) = listed.as_object_mut() {
            m.remove(piece);
        }
        self.write(PIECES_DOC, &[], listed)?;
        self.nodes.retain(|_, n| n.piece != piece);
        self.streams.retain(|_, b| b.piece != piece);
        self.demand.retain(|(p, _)| p != piece);
        Ok(())
    }

    pub fn pieces(&self) -> Vec<String> {
        self.pieces.keys().cloned().collect()
    }

    /// Every derivation node of `piece` with its run count in this tenure.
    pub fn nodes(&self, piece: &str) -> Vec<NodeInfo> {
        let mut v: Vec<NodeInfo> = self
            .nodes
            .values()
            .filter(|n| n.piece == piece)
            .map(|n| NodeInfo {
                id: n.def.id.clone(),
                piece: n.piece.clone(),
                kind: n.def.kind.clone(),
                label: n.def.label.clone(),
                runs: n.runs,
            })
            .collect();
        v.sort_by(|a, b| a.id.cmp(&b.id));
        v
    }

    /// Actions that failed in this tenure (most recent last).
    pub fn failures(&self) -> &[ActionFailure] {
        &self.failures
    }

    // ----- demand ----------------------------------------------------------

    /// Adds a result path of a piece to the space's demand.
    pub fn demand(&mut self, piece: &str, path: &[PathSeg]) {
        self.demand.insert((piece.to_string(), path.to_vec()));
    }

    pub fn clear_demand(&mut self) {
        self.demand.clear();
    }

    // ----- documents ---------------------------------------------------------

    fn doc(&mut self, id: &str) -> RuntimeResult<Option<Value>> {
        let v = match self.docs.get(id) {
            Some(v) => v.clone(),
            None => {
                let read = self.space.read(id)?;
                if let Some(d) = &read {
                    self.doc_seq.insert(id.to_string(), d.seq);
                }
                let v = read.map(|d| d.value);
                self.docs.insert(id.to_string(), v.clone());
                v
            }
        };
        if let Some(seen) = self.read_seq.as_mut() {
            *seen = (*seen).max(self.doc_seq.get(id).copied().unwrap_or(0));
            self.session_reads.insert(id.to_string());
        }
        Ok(v)
    }

    /// Like [`SpaceRuntime::read`], also returning the newest seq among the
    /// documents the value was assembled from: the seq a client update
    /// carries, and what a resuming client compares with.
    pub fn read_tracked(&mut self, piece: &str, path: &[PathSeg]) -> RuntimeResult<(Value, u64)> {
        self.read_seq = Some(0);
        let r = self.read(piece, path);
        let seq = self.read_seq.take().unwrap_or(0);
        Ok((r?, seq))
    }

    /// The documents sessions have read since the last call.
    pub fn take_session_reads(&mut self) -> HashSet<String> {
        std::mem::take(&mut self.session_reads)
    }

    /// Writes into the pending wave and makes every reader stale.
    fn write(&mut self, doc: &str, path: &[PathSeg], value: Value) -> RuntimeResult<()> {
        let current = self.doc(doc)?;
        let next = match &current {
            Some(c) if !path.is_empty() => crate::store::path::set_at_owned(c.clone(), path, value),
            _ => set_at(None, path, value),
        }
        .map_err(|e| RuntimeError::Invalid(format!("write to {doc}: {e}")))?;
        if current.as_ref() == Some(&next) {
            return Ok(());
        }
        self.docs.insert(doc.to_string(), Some(next));
        if self.touched_set.insert(doc.to_string()) {
            self.touched.push(doc.to_string());
        }
        self.wave_writes.insert(doc.to_string());
        self.invalidate(doc);
        Ok(())
    }

    fn invalidate(&mut self, doc: &str) {
        let Some(readers) = self.readers.get(doc).cloned() else {
            return;
        };
        for node in readers {
            if self.fresh.remove(&node) {
                self.invalidate(&node);
            }
        }
    }

    /// The value at `path` of document `doc`, following links and pulling
    /// the derivations on the way; nested links are resolved too.
    fn value_at(&mut self, doc: &str, path: &[PathSeg], depth: usize) -> RuntimeResult<Value> {
        if depth > MAX_LINK_DEPTH {
            return Err(RuntimeError::Invalid(format!(
                "links from {doc:?} form a cycle"
            )));
        }
        if self.nodes.contains_key(doc) {
            self.pull(doc)?;
        }
        let mut cur = self.doc(doc)?.unwrap_or(Value::Null);
        for (i, seg) in path.iter().enumerate() {
            if let Some(l) = as_link(&cur) {
                let mut rest = l.path.clone();
                rest.extend_from_slice(&path[i..]);
                return self.value_at(&l.doc, &rest, depth + 1);
            }
            cur = match get_at(&cur, std::slice::from_ref(seg)) {
                Some(v) => v.clone(),
                None => return Ok(Value::Null),
            };
        }
        self.resolve_deep(cur, depth + 1)
    }

    fn resolve_deep(&mut self, v: Value, depth: usize) -> RuntimeResult<Value> {
        if let Some(l) = as_link(&v) {
            return self.value_at(&l.doc, &l.path, depth + 1);
        }
        Ok(match v {
            Value::Array(a) => Value::Array(
                a.into_iter()
                    .map(|x| self.resolve_deep(x, depth))
                    .collect::<RuntimeResult<_>>()?,
            ),
            Value::Object(m) => {
                if m.contains_key("$stream") {
                    return Ok(Value::Object(m));
                }
                let mut out = serde_json::Map::new();
                for (k, x) in m {
                    out.insert(k, self.resolve_deep(x, depth)?);
                }
                Value::Object(out)
            }
            other => other,
        })
    }

    /// Resolves a path into a piece's result: what a client or a scenario
    /// reads. Pulls exactly the derivations the path needs.
    pub fn read(&mut self, piece: &str, path: &[PathSeg]) -> RuntimeResult<Value> {
        if !self.pieces.contains_key(piece) {
            return Err(RuntimeError::UnknownPiece(piece.to_string()));
        }
        self.value_at(piece, path, 0)
    }

    /// The stream at a result path (following links), if it is one.
    pub fn stream_at(&mut self, piece: &str, path: &[PathSeg]) -> RuntimeResult<Option<String>> {
        let mut doc = piece.to_string();
        let mut cur = self.doc(&doc)?.unwrap_or(Value::Null);
        let mut rest: Vec<PathSeg> = path.to_vec();
        for _ in 0..MAX_LINK_DEPTH {
            let mut followed = false;
            for i in 0..=rest.len() {
                let here = get_at(&cur, &rest[..i]).cloned().unwrap_or(Value::Null);
                if let Some(l) = as_link(&here) {
                    let mut next = l.path.clone();
                    next.extend_from_slice(&rest[i..]);
                    doc = l.doc;
                    cur = self.doc(&doc)?.unwrap_or(Value::Null);
                    rest = next;
                    followed = true;
                    break;
                }
                if i == rest.len() {
                    return Ok(as_stream(&here).map(str::to_string));
                }
            }
            if !followed {
                break;
            }
        }
        Ok(None)
    }

    // ----- derivations -----------------------------------------------------

    fn options_reactive(&self) -> CallOptions {
        let o = CallOptions::reactive();
        match self.cfg.action_budget {
            Some(b) => o.with_budget(b),
            None => o,
        }
    }

    /// Brings one node up to date, upstream first. The stale upstream nodes
    /// are ordered by an explicit depth-first walk rather than recursion, so
    /// a long lift chain neither overflows the native stack nor trips the
    /// engine's stack check (QuickJS measures the native stack).
    fn pull(&mut self, id: &str) -> RuntimeResult<()> {
        if self.fresh.contains(id) {
            return Ok(());
        }
        let mut order = Vec::new();
        let mut visited = HashSet::new();
        let mut stack = vec![(id.to_string(), false)];
        while let Some((n, expanded)) = stack.pop() {
            if expanded {
                order.push(n);
                continue;
            }
            if self.fresh.contains(&n) || !visited.insert(n.clone()) {
                continue;
            }
            stack.push((n.clone(), true));
            let mut reads = Vec::new();
            linked_docs(&self.nodes[&n].def.args, &mut reads);
            for d in reads {
                if self.nodes.contains_key(&d) && !self.fresh.contains(&d) && !visited.contains(&d)
                {
                    stack.push((d, false));
                }
            }
        }
        for n in order {
            self.refresh_node(&n)?;
        }
        Ok(())
    }

    /// Runs one node whose upstream is already fresh, unless its inputs hash
    /// matches its last run.
    fn refresh_node(&mut self, id: &str) -> RuntimeResult<()> {
        if self.fresh.contains(id) {
            return Ok(());
        }
        // Mark first: a cycle through this node then reads its old value
        // instead of recursing forever.
        self.fresh.insert(id.to_string());
        let (args, fn_index) = {
            let n = &self.nodes[id];
            (n.def.args.clone(), n.def.fn_index)
        };
        let resolved = self.resolve_deep(args, 0)?;
        let hash = blake3::hash(resolved.to_string().as_bytes())
            .to_hex()
            .to_string();
        let has_output = self.doc(id)?.is_some();
        if has_output && self.action_hash.get(id) == Some(&hash) {
            self.counters.inc(Counter::DerivationsSkippedFresh);
            return Ok(());
        }
        let args = match resolved {
            Value::Array(a) => a,
            other => vec![other],
        };
        let call_args = [json!(fn_index), Value::Array(args)];
        self.meter_begin();
        let started = std::time::Instant::now();
        let ran = self
            .sandbox
            .call(self.entry.run_node, &call_args, &self.options_reactive());
        let piece = self
            .nodes
            .get(id)
            .map(|n| n.piece.clone())
            .unwrap_or_default();
        self.meter_action(id, &piece, "derivation", started.elapsed());
        // Its output may refer only to what its arguments referred to, or
        // to its own piece (checked only when it refers to anything).
        let ran = match ran {
            Ok(out) if graph::has_refs(&out.value) => {
                let reach = self.node_reach(id, &piece)?;
                Ok((reach.check_value(&out.value), out))
            }
            other => other.map(|out| (Ok(()), out)),
        };
        match ran {
            Ok((Err(reason), _)) => {
                self.refuse(id, "derivation", &format!("invalid output: {reason}"));
            }
            Ok((Ok(()), out)) => {
                if let Err(reason) = self.check_size(id, &out.value) {
                    self.refuse(id, "derivation", &format!("invalid output: {reason}"));
                    return Ok(());
                }
                if let Some(n) = self.nodes.get_mut(id) {
                    n.runs += 1;
                }
                self.counters.inc(Counter::DerivationRuns);
                self.report.derivation_runs += 1;
                self.write(id, &[], out.value)?;
                // Writing made readers stale, including possibly ourselves.
                self.fresh.insert(id.to_string());
                self.action_hash.insert(id.to_string(), hash.clone());
                self.hashes_to_store.insert(id.to_string(), hash);
            }
            Err(e) => self.record_failure(id, "derivation", &e),
        }
        Ok(())
    }

    /// What a derivation was given: the references and streams of its
    /// argument templates and of their current values.
    fn node_reach(&mut self, id: &str, piece: &str) -> RuntimeResult<Reach> {
        let template = self.nodes[id].def.args.clone();
        let mut reach = Reach::new(piece);
        reach.add_refs_in(&template);
        let resolved = self.resolve_deep(template, 0)?;
        reach.add_refs_in(&resolved);
        Ok(reach)
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

    fn push_failure(&mut self, f: ActionFailure) {
        self.report.failures.push(f.clone());
        self.failures.push(f);
        if self.failures.len() > 256 {
            self.failures.remove(0);
        }
    }

    // ----- handlers ------------------------------------------------------------

    /// Runs the handler bound to `event.stream`; its writes join the wave
    /// only if it returns normally.
    fn handle_event(&mut self, ev: &EventRecord) -> RuntimeResult<()> {
        let Some(binding) = self.streams.get(&ev.stream) else {
            self.counters.inc(Counter::EventsUnknownStream);
            return Ok(());
        };
        let def = binding.def.clone();
        let binding_piece = binding.piece.clone();
        let schema = def.schema.clone();
        let mut docs = serde_json::Map::new();
        // What this run is given: the only targets its writes and sends may
        // have, and the only references its values may hold.
        let mut reach = Reach::new(&binding_piece);
        let (ctx, shape) = match &def.context {
            Value::Object(fields) if as_link(&def.context).is_none() => {
                let mut ctx = serde_json::Map::new();
                for (k, tmpl) in fields {
                    let as_cell = field_flag(schema.as_ref(), k, "asCell");
                    reach.add_refs_in(tmpl);
                    let entry = if let Some(s) = as_stream(tmpl) {
                        json!({"stream": s})
                    } else if let (Some(l), true) = (as_link(tmpl), as_cell) {
                        let (doc, path) = self.cell_target(&l)?;
                        reach.add_cell(&doc, &path);
                        if !docs.contains_key(&doc) {
                            let v = self.value_at(&doc, &[], 0)?;
                            docs.insert(doc.clone(), v);
                        }
                        json!({"cell": {"doc": doc, "path": path}})
                    } else {
                        let v = self.resolve_deep(tmpl.clone(), 0)?;
                        reach.add_refs_in(&v);
                        match as_stream(&v) {
                            Some(s) if field_flag(schema.as_ref(), k, "asStream") => {
                                json!({"stream": s})
                            }
                            _ => json!({"value": v}),
                        }
                    };
                    ctx.insert(k.clone(), entry);
                }
                (Value::Object(ctx), "fields")
            }
            other => {
                reach.add_refs_in(other);
                let v = self.resolve_deep(other.clone(), 0)?;
                reach.add_refs_in(&v);
                (json!({"value": v}), "value")
            }
        };
        let seed = handler_seed(
            &self.cfg.entropy_key,
            self.space.id(),
            &binding_piece,
            &ev.event_id,
        );
        let mut opts = CallOptions::handler(ev.fired_at_ms, seed);
        if let Some(b) = self.cfg.action_budget {
            opts = opts.with_budget(b);
        }
        let args = [
            json!(def.fn_index),
            ev.payload.clone(),
            ctx,
            Value::Object(docs),
            json!(shape),
        ];
        self.counters.inc(Counter::HandlerRuns);
        self.report.handler_runs += 1;
        self.meter_begin();
        let started = std::time::Instant::now();
        let ran = self.sandbox.call(self.entry.run_handler, &args, &opts);
        self.meter_action(&ev.stream, &binding_piece, "handler", started.elapsed());
        let action = format!("{}:{}", binding_piece, ev.stream);
        let out = match ran {
            Ok(out) => out.value,
            Err(e) => {
                self.record_failure(&action, "handler", &e);
                return Ok(());
            }
        };
        // Everything is checked before anything applies: one write or send
        // the run was not given refuses the run as a whole.
        let mut out = out;
        let bytes_before = self.wave_bytes;
        let writes = match self.stage_writes(
            out.get_mut("writes").map(Value::take).unwrap_or_default(),
            &reach,
        ) {
            Ok(w) => w,
            Err(reason) => {
                self.wave_bytes = bytes_before;
                self.refuse(&action, "handler", &format!("invalid write: {reason}"));
                return Ok(());
            }
        };
        let mut sends = Vec::new();
        for (i, s) in out["sends"].as_array().into_iter().flatten().enumerate() {
            let target = match self.send_target(s, &reach) {
                Ok(t) => t,
                Err(reason) => {
                    self.wave_bytes = bytes_before;
                    self.refuse(&action, "handler", &format!("invalid send: {reason}"));
                    return Ok(());
                }
            };
            if let Some(stream) = target {
                if let Err(reason) = reach.check_value(&s["payload"]) {
                    self.wave_bytes = bytes_before;
                    self.refuse(&action, "handler", &format!("invalid send: {reason}"));
                    return Ok(());
                }
                sends.push(NewEvent {
                    event_id: derived_event_id(&ev.event_id, "send", i),
                    stream,
                    payload: s["payload"].clone(),
                    fired_by: ev.fired_by.clone(),
                });
            }
        }
        for (doc, value) in writes {
            self.put(&doc, value);
        }
        self.sends.extend(sends);
        Ok(())
    }

    /// Where one send of a handler goes: a stream it was given, or the
    /// stream at a cell it was given (`None` when that cell holds none).
    fn send_target(&mut self, s: &Value, reach: &Reach) -> Result<Option<String>, String> {
        if let Some(id) = as_stream_target(s) {
            reach.check_send_stream(&id)?;
            return Ok(Some(id));
        }
        let Some(l) = s.get("cell").and_then(|c| as_link(&json!({"$link": c}))) else {
            return Err("a send names neither a stream nor a cell".to_string());
        };
        reach.check_send_cell(&l.doc, &l.path)?;
        let v = self
            .value_at(&l.doc, &l.path, 0)
            .map_err(|e| e.to_string())?;
        Ok(as_stream(&v).map(str::to_string))
    }

    /// A run refused host-side: counted, reported like a failure, nothing
    /// of it applied.
    fn refuse(&mut self, action: &str, kind: &'static str, reason: &str) {
        self.counters.inc(Counter::ActionsRefused);
        tracing::warn!(action, kind, reason, "action refused");
        self.push_failure(ActionFailure {
            action: action.to_string(),
            kind,
            error: reason.to_string(),
        });
    }

    /// Checks a handler's writes against what the run was given and the
    /// limits, and applies them in order to a copy of each document they
    /// touch: the documents' final values, or why none of them can apply.
    /// Linear in the size of the documents and of what is written: each
    /// document is copied once, each write is applied in place.
    fn stage_writes(
        &mut self,
        writes: Value,
        reach: &Reach,
    ) -> Result<Vec<(String, Value)>, String> {
        let Value::Array(writes) = writes else {
            return Ok(Vec::new());
        };
        let limits = &self.cfg.limits;
        if writes.len() > limits.action_writes {
            return Err(format!(
                "{} writes in one run (the limit is {})",
                crate::human::thousands(writes.len() as u64),
                crate::human::thousands(limits.action_writes as u64)
            ));
        }
        let mut staged: Vec<(String, Value)> = Vec::new();
        let mut slot_of: HashMap<String, usize> = HashMap::new();
        for mut w in writes {
            let doc = w["doc"]
                .as_str()
                .ok_or("a write names no document")?
                .to_string();
            let path = crate::store::path::parse_path(&w["path"])?;
            let value = w.get_mut("value").map(Value::take).unwrap_or_default();
            reach.check_write(&doc, &path)?;
            reach.check_value(&value)?;
            let slot = match slot_of.get(&doc) {
                Some(i) => *i,
                None => {
                    let current = self.doc(&doc).map_err(|e| e.to_string())?;
                    staged.push((doc.clone(), current.unwrap_or(Value::Null)));
                    slot_of.insert(doc.clone(), staged.len() - 1);
                    staged.len() - 1
                }
            };
            let current = std::mem::take(&mut staged[slot].1);
            staged[slot].1 = crate::store::path::set_at_owned(current, &path, value)
                .map_err(|e| format!("{doc} {}: {e}", crate::store::path::display_path(&path)))?;
        }
        for (doc, v) in &staged {
            self.check_size(doc, v)?;
        }
        Ok(staged)
    }

    /// A document value within the size limit, and the wave within its
    /// budget of bytes written (counted as each action's values apply).
    fn check_size(&mut self, doc: &str, v: &Value) -> Result<(), String> {
        let bytes = graph::json_size(v);
        let limits = &self.cfg.limits;
        if bytes > limits.doc_bytes {
            return Err(format!(
                "{doc} would be {} (the limit of one document is {})",
                crate::human::bytes(bytes as u64),
                crate::human::bytes(limits.doc_bytes as u64)
            ));
        }
        if self.wave_bytes + bytes > limits.wave_write_bytes {
            return Err(format!(
                "the wave would write {} (the limit of one wave is {})",
                crate::human::bytes((self.wave_bytes + bytes) as u64),
                crate::human::bytes(limits.wave_write_bytes as u64)
            ));
        }
        self.wave_bytes += bytes;
        Ok(())
    }

    /// Puts a document's new value into the pending wave (like
    /// [`SpaceRuntime::write`] at the root, without another copy).
    fn put(&mut self, doc: &str, next: Value) {
        if matches!(self.docs.get(doc), Some(Some(cur)) if *cur == next) {
            return;
        }
        self.docs.insert(doc.to_string(), Some(next));
        if self.touched_set.insert(doc.to_string()) {
            self.touched.push(doc.to_string());
        }
        self.wave_writes.insert(doc.to_string());
        self.invalidate(doc);
    }

    /// Where a cell reference really points: follows links stored in
    /// documents so a handler writes the document that holds the value.
    fn cell_target(&mut self, l: &Link) -> RuntimeResult<(String, Vec<PathSeg>)> {
        let mut doc = l.doc.clone();
        let mut path = l.path.clone();
        for _ in 0..MAX_LINK_DEPTH {
            let cur = self.doc(&doc)?.unwrap_or(Value::Null);
            let mut hop = None;
            for i in 0..=path.len() {
                if let Some(inner) = get_at(&cur, &path[..i]).and_then(as_link) {
                    let mut next = inner.path.clone();
                    next.extend_from_slice(&path[i..]);
                    hop = Some((inner.doc, next));
                    break;
                }
            }
            match hop {
                Some((d, p)) => {
                    doc = d;
                    path = p;
                }
                None => break,
            }
        }
        Ok((doc, path))
    }

    // ----- waves ---------------------------------------------------------------

    /// One wave: consume undelivered events (up to the limit), run their
    /// handlers, pull the demanded derivations, commit once.
    pub fn run_wave(&mut self) -> RuntimeResult<WaveReport> {
        self.run_wave_skipping(&HashSet::new())
    }

    /// A wave in which the events named in `skip` are consumed without
    /// running their handlers (a wake whose earlier delivery died with the
    /// process is retried later rather than re-run at once).
    pub fn run_wave_skipping(&mut self, skip: &HashSet<String>) -> RuntimeResult<WaveReport> {
        self.run_wave_with(skip, &mut |_, _| Ok(()))
    }

    /// [`SpaceRuntime::run_wave_skipping`] with `settle` run inside the
    /// wave's own transaction, given the wave's report (what was delivered,
    /// failed, skipped, written): bookkeeping that must commit with the wave
    /// or not at all (the delivery state of wake events).
    pub fn run_wave_with(
        &mut self,
        skip: &HashSet<String>,
        settle: WaveSettle<'_>,
    ) -> RuntimeResult<WaveReport> {
        self.meter_begin();
        let mut events = self.space.undelivered_events(self.cfg.wave_event_limit)?;
        // An event that was in a wave that failed its tenure runs alone, so a
        // poison event fails nobody else; after its retries it is
        // dead-lettered instead of run.
        let mut dead = None;
        if let Some(first) = events.first() {
            if let Some((attempts, error)) = self.event_failures.get(&first.event_id) {
                events.truncate(1);
                if *attempts >= MAX_EVENT_ATTEMPTS {
                    dead = Some((*attempts, error.clone()));
                }
            }
        }
        self.wave_events = events
            .iter()
            .map(|e| (e.event_id.clone(), e.stream.clone(), e.seq))
            .collect();
        let ran = self.wave_body(&events, dead, skip, settle);
        if let Err(e) = &ran {
            self.note_failed_wave(e);
        }
        ran
    }

    fn wave_body(
        &mut self,
        events: &[EventRecord],
        dead: Option<(u32, String)>,
        skip: &HashSet<String>,
        settle: WaveSettle<'_>,
    ) -> RuntimeResult<WaveReport> {
        for ev in events {
            if let Some((attempts, error)) = &dead {
                self.report.dead_lettered.push(ev.event_id.clone());
                self.dead_lettering
                    .push((ev.clone(), *attempts, error.clone()));
            } else if skip.contains(&ev.event_id) {
                self.report.skipped_events.push(ev.event_id.clone());
            } else {
                let failures_before = self.report.failures.len();
                self.handle_event(ev)?;
                if self.report.failures.len() > failures_before {
                    self.report.failed_events.push(ev.event_id.clone());
                } else {
                    self.report.delivered.push(ev.event_id.clone());
                }
            }
            let wm = self.watermarks.entry(ev.stream.clone()).or_insert(0);
            *wm = (*wm).max(ev.seq);
            self.counters.inc(Counter::EventsProcessed);
        }
        self.report.events += events.len();
        let demanded: Vec<_> = self.demand.iter().cloned().collect();
        for (piece, path) in demanded {
            if self.pieces.contains_key(&piece) {
                self.value_at(&piece, &path, 0)?;
            }
        }
        self.flush_with(settle)
    }

    /// A wave that consumed events failed its tenure: each of its events
    /// gets one more attempt on record (best effort: a plane write needs no
    /// lease, but the file may be what failed).
    fn note_failed_wave(&mut self, error: &RuntimeError) {
        let events = std::mem::take(&mut self.wave_events);
        self.dead_lettering.clear();
        if events.is_empty() {
            return;
        }
        let now = self.clock.now_ms();
        let message = crate::human::truncate_message(&error.to_string(), 1024);
        let noted = self.space.plane(|p| {
            events
                .iter()
                .map(|(id, stream, seq)| {
                    p.note_event_failure(id, stream, *seq, &message, now)
                        .map(|n| (id.clone(), n))
                })
                .collect::<crate::store::StoreResult<Vec<_>>>()
        });
        match noted {
            Ok(rows) => {
                for (id, attempts) in rows {
                    self.failed_wave_attempts = self.failed_wave_attempts.max(attempts);
                    self.event_failures.insert(id, (attempts, message.clone()));
                }
                self.counters
                    .add(Counter::EventsInFailedWaves, events.len() as i64);
            }
            Err(e) => tracing::warn!(error = %e, "cannot record a failed wave's events"),
        }
    }

    /// The most attempts any event of this tenure's failed waves has had
    /// (0 when none failed): how long the host waits before retrying.
    pub fn failed_wave_attempts(&self) -> u32 {
        self.failed_wave_attempts
    }

    /// Runs waves until no undelivered events remain (at most `max` waves).
    pub fn settle(&mut self, max: usize) -> RuntimeResult<Vec<WaveReport>> {
        let mut out = Vec::new();
        for _ in 0..max {
            let r = self.run_wave()?;
            let idle = r.events == 0;
            out.push(r);
            if idle && !self.space.has_undelivered()? {
                break;
            }
        }
        Ok(out)
    }

    /// Commits what the pending wave wrote, once, with this tenure's lease.
    pub fn flush(&mut self) -> RuntimeResult<WaveReport> {
        self.flush_with(&mut |_, _| Ok(()))
    }

    fn flush_with(&mut self, settle: WaveSettle<'_>) -> RuntimeResult<WaveReport> {
        self.wave_bytes = 0;
        let mut report = std::mem::take(&mut self.report);
        report.written = std::mem::take(&mut self.wave_writes).into_iter().collect();
        if self.touched.is_empty()
            && self.sends.is_empty()
            && self.watermarks.is_empty()
            && self.hashes_to_store.is_empty()
        {
            // Nothing to commit: the compute (if any) is booked plane-only.
            let window =
                crate::accounting::window_start_ms(self.clock.now_ms(), self.cfg.ledger_window_ms);
            let bucket = self.bucket;
            let metered = self.meter_close(false).map(|(delta, costs)| {
                self.buffer_costs(window, costs);
                delta
            });
            report.metered = metered;
            let costs = self.take_costs(false);
            // A wave that consumed events always commits (their watermarks),
            // so `settle` has no delivery to record on this path.
            if metered.is_some() || !costs.is_empty() {
                self.space.plane(|p| {
                    if let Some(delta) = &metered {
                        p.add_ledger(bucket, window, delta)?;
                    }
                    write_costs(p, &costs)?;
                    settle(&report, p)
                })?;
            }
            return Ok(report);
        }
        self.ensure_lease()?;
        let mut req = CommitRequest::new(CommitClass::Derived, Author::server());
        self.touched_set.clear();
        let touched = std::mem::take(&mut self.touched);
        req.ops = touched
            .iter()
            .cloned()
            .map(|id| match self.docs.get(&id).cloned().flatten() {
                Some(value) => DocOp::Set { id, value },
                None => DocOp::Delete { id },
            })
            .collect();
        req.events = std::mem::take(&mut self.sends);
        req.watermarks = std::mem::take(&mut self.watermarks).into_iter().collect();
        req.lease = Some(self.lease.clone());
        let hashes = std::mem::take(&mut self.hashes_to_store);
        let window =
            crate::accounting::window_start_ms(self.clock.now_ms(), self.cfg.ledger_window_ms);
        let bucket = self.bucket;
        let metered = self.meter_close(true).map(|(d, costs)| {
            self.buffer_costs(window, costs);
            d
        });
        report.metered = metered;
        let costs = self.take_costs(false);
        let now = self.clock.now_ms();
        let dead_letters = std::mem::take(&mut self.dead_lettering);
        // Events consumed now that had failed waves on record.
        let recovered: Vec<String> = self
            .wave_events
            .iter()
            .map(|(id, _, _)| id)
            .filter(|id| self.event_failures.contains_key(*id))
            .cloned()
            .collect();
        let result = self.space.commit_with(req, |view, plane| {
            for (ev, attempts, error) in &dead_letters {
                plane
                    .dead_letter(ev, *attempts, error, now)
                    .map_err(|e| e.to_string())?;
            }
            for id in &recovered {
                plane.clear_event_failure(id).map_err(|e| e.to_string())?;
            }
            for (node, hash) in &hashes {
                plane
                    .set_action_state(node, hash, view.seq)
                    .map_err(|e| e.to_string())?;
            }
            // The ledger rides in the wave's own transaction.
            if let Some(delta) = &metered {
                plane
                    .add_ledger(bucket, window, delta)
                    .map_err(|e| e.to_string())?;
            }
            write_costs(plane, &costs).map_err(|e| e.to_string())?;
            settle(&report, plane).map_err(|e| e.to_string())
        });
        match result {
            Ok(outcome) => {
                if let Some(seq) = outcome.seq {
                    for id in touched {
                        self.doc_seq.insert(id, seq);
                    }
                }
                report.seq = outcome.seq;
                self.counters.inc(Counter::Waves);
                self.wave_events.clear();
                for id in recovered {
                    self.event_failures.remove(&id);
                }
                for (ev, attempts, _) in dead_letters {
                    self.event_failures.remove(&ev.event_id);
                    self.counters.inc(Counter::EventsDeadLettered);
                    tracing::warn!(event = %ev.event_id, stream = %ev.stream, attempts, "event dead-lettered");
                }
                Ok(report)
            }
            Err(e) => {
                // Nothing of the wave committed: forget what we believed.
                self.docs.clear();
                self.doc_seq.clear();
                self.fresh.clear();
                Err(e.into())
            }
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
    pub fn set_bucket(&mut self, bucket: crate::store::Bucket) {
        self.bucket = bucket;
    }

    fn meter_begin(&mut self) {
        if self.cfg.metering && self.meter.is_none() {
            self.meter = Some(Meter {
                cpu_start_us: crate::accounting::thread_cpu_us(),
                wall_start: std::time::Instant::now(),
                actions: BTreeMap::new(),
            });
        }
    }

    fn meter_action(
        &mut self,
        action: &str,
        piece: &str,
        kind: &'static str,
        took: std::time::Duration,
    ) {
        if let Some(m) = self.meter.as_mut() {
            if !m.actions.contains_key(action) {
                m.actions
                    .insert(action.to_string(), (piece.to_string(), kind, 0, 0));
            }
            let e = m.actions.get_mut(action).expect("inserted above");
            e.2 += took.as_nanos() as u64;
            e.3 += 1;
        }
    }

    /// Closes the meter: the ledger delta and each action's attributed cost.
    fn meter_close(
        &mut self,
        committed: bool,
    ) -> Option<(crate::store::LedgerDelta, Vec<CostRow>)> {
        let m = self.meter.take()?;
        let cpu_us = crate::accounting::thread_cpu_us().saturating_sub(m.cpu_start_us);
        let wall_us = m.wall_start.elapsed().as_micros() as u64;
        let total_action_ns: u64 = m.actions.values().map(|a| a.2).sum::<u64>().max(1);
        let runs: u64 = m.actions.values().map(|a| a.3).sum();
        if runs == 0 && !committed {
            return None; // an idle wave costs nothing worth booking
        }
        let costs = m
            .actions
            .into_iter()
            .map(|(action, (piece, kind, ns, n))| {
                let pattern = self
                    .pieces
                    .get(&piece)
                    .map(|(hash, export)| format!("{export}@{}", &hash[..hash.len().min(12)]))
                    .unwrap_or_default();
                // The wave's CPU split by each action's share of action time.
                let share = (cpu_us as u128 * ns as u128 / total_action_ns as u128) as u64;
                (piece, action, kind, pattern, share, ns / 1_000, n)
            })
            .collect();
        let delta = crate::store::LedgerDelta {
            cpu_us,
            wall_us,
            waves: 1,
            actions: runs,
            commits: committed as u64,
            budget_skips: 0,
        };
        let c = &self.counters;
        c.add(
            match self.bucket {
                crate::store::Bucket::Scheduled => Counter::LedgerCpuUsScheduled,
                crate::store::Bucket::Session => Counter::LedgerCpuUsSession,
            },
            cpu_us as i64,
        );
        let (wall, waves) = match self.bucket {
            crate::store::Bucket::Scheduled => (
                Counter::LedgerWallUsScheduled,
                Counter::LedgerWavesScheduled,
            ),
            crate::store::Bucket::Session => {
                (Counter::LedgerWallUsSession, Counter::LedgerWavesSession)
            }
        };
        c.add(wall, wall_us as i64);
        c.inc(waves);
        c.inc(Counter::LedgerWaves);
        c.add(Counter::LedgerActions, runs as i64);
        Some((delta, costs))
    }

    /// Adds a wave's attribution to the buffer.
    fn buffer_costs(&mut self, window: u64, costs: Vec<CostRow>) {
        for (piece, action, kind, pattern, cpu, wall, runs) in costs {
            let e = self
                .pending_costs
                .entry((window, piece, action))
                .or_insert((kind, pattern, 0, 0, 0));
            e.2 += cpu;
            e.3 += wall;
            e.4 += runs;
        }
        self.waves_since_costs += 1;
    }

    /// The buffered attribution, if it is due to be written (every
    /// [`COST_FLUSH_WAVES`] waves, or everything when `all`).
    fn take_costs(&mut self, all: bool) -> Vec<(u64, CostRow)> {
        // A scheduled tenure usually runs one wave: its costs ride in that
        // wave's transaction rather than in one of their own at park.
        let every_wave = self.bucket == crate::store::Bucket::Scheduled;
        if !all && !every_wave && self.waves_since_costs < COST_FLUSH_WAVES {
            return Vec::new();
        }
        self.waves_since_costs = 0;
        std::mem::take(&mut self.pending_costs)
            .into_iter()
            .map(|((w, piece, action), (kind, pattern, cpu, wall, runs))| {
                (w, (piece, action, kind, pattern, cpu, wall, runs))
            })
            .collect()
    }

    /// Renews the tenure's lease now; `LeaseLost` ends the tenure.
    pub fn renew_lease(&mut self) -> RuntimeResult<()> {
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
}

/// Whether a recorded result's `$SCHEDULE` (if any) is one the compiler
/// validated in the program: the same intervals, in the same order, as one
/// of its `[SCHEDULE]` declarations. The index re-checks the bounds itself.
fn declaration_was_validated(program: &CompiledProgram, result: &Value) -> bool {
    let Some(declared) = result.get(crate::schedule::SCHEDULE_KEY) else {
        return true;
    };
    let Some(list) = declared.as_array() else {
        return false;
    };
    let intervals: Vec<Option<u64>> = list
        .iter()
        .map(|e| e.get("intervalMinutes").and_then(Value::as_u64))
        .collect();
    program
        .modules
        .iter()
        .flat_map(|m| &m.patterns)
        .flat_map(|p| &p.schedules)
        .any(|d| {
            d.entries.len() == intervals.len()
                && d.entries
                    .iter()
                    .zip(&intervals)
                    .all(|(e, got)| *got == Some(u64::from(e.interval_minutes)))
        })
}

fn write_costs(
    p: &mut crate::store::PlaneTx<'_>,
    costs: &[(u64, CostRow)],
) -> crate::store::StoreResult<()> {
    for (w, (piece, action, kind, pattern, cpu, wall, runs)) in costs {
        p.add_action_cost(*w, piece, action, kind, pattern, *cpu, *wall, *runs)?;
    }
    Ok(())
}

fn as_stream_target(s: &Value) -> Option<String> {
    s.get("stream").and_then(|v| v.as_str()).map(str::to_string)
}
