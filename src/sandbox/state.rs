//! Host-side per-call state shared by the interrupt handler, the native
//! capability functions, the module resolver and the host-call bridge.
//!
//! Invariants:
//! - Nothing here is reachable from JS: pattern code sees only native
//!   functions that *read* it, so it cannot flip its own mode, refill its
//!   budget or erase a capability denial.
//! - `begin` resets every per-call field, so nothing leaks from one call into
//!   the next. Switching mode is a handful of `Cell` stores (the mode switch
//!   happens per action and must be cheap).

use crate::clock::CpuTimeout;
use std::cell::{Cell, RefCell};

use super::error::PreemptCause;

/// The capability mode a call runs in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Pattern body, `lift`, `computed`, `derive`: no clock, no entropy. The
    /// output must be a function of the inputs alone, so that a derivation
    /// recomputed later (or never) gives the same answer.
    Reactive,
    /// An event handler / action. The clock is the triggering event's time,
    /// coarsened down to whole seconds; `Math.random()` is a PRNG seeded from
    /// `entropy_seed`, so a handler replayed with the same event is replayed
    /// exactly.
    Handler {
        /// The event's time in milliseconds since the Unix epoch.
        event_time_ms: u64,
        /// Seed for `Math.random()` during this call.
        entropy_seed: u64,
    },
}

/// A capability that some mode may deny.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Capability {
    DateNow,
    NewDate,
    DateCall,
    MathRandom,
    FunctionCtor,
    GeneratorFunctionCtor,
    AsyncFunctionCtor,
    AsyncGeneratorFunctionCtor,
}

impl Capability {
    /// Codes used by the lockdown script to name a capability to the native
    /// `nowFor` / `deny` helpers (kept tiny so the JS side stays trivial).
    pub(crate) fn from_code(code: i32) -> Option<Self> {
        Some(match code {
            0 => Capability::DateNow,
            1 => Capability::NewDate,
            2 => Capability::DateCall,
            3 => Capability::MathRandom,
            4 => Capability::FunctionCtor,
            5 => Capability::GeneratorFunctionCtor,
            6 => Capability::AsyncFunctionCtor,
            7 => Capability::AsyncGeneratorFunctionCtor,
            _ => return None,
        })
    }

    pub(crate) fn name(self) -> &'static str {
        match self {
            Capability::DateNow => "Date.now()",
            Capability::NewDate => "new Date()",
            Capability::DateCall => "Date()",
            Capability::MathRandom => "Math.random()",
            Capability::FunctionCtor => "Function constructor",
            Capability::GeneratorFunctionCtor => "GeneratorFunction constructor",
            Capability::AsyncFunctionCtor => "AsyncFunction constructor",
            Capability::AsyncGeneratorFunctionCtor => "AsyncGeneratorFunction constructor",
        }
    }

    pub(crate) fn denial_message(self) -> String {
        match self {
            Capability::DateNow | Capability::NewDate | Capability::DateCall => format!(
                "{} is not available in reactive code (pattern body, lift, computed, derive): \
                 a derivation must depend only on its inputs; read the time in a handler, \
                 which sees the triggering event's time",
                self.name()
            ),
            Capability::MathRandom => format!(
                "{} is not available in reactive code (pattern body, lift, computed, derive): \
                 a derivation must depend only on its inputs; draw randomness in a handler",
                self.name()
            ),
            _ => format!(
                "the {} is not available to patterns: code is compiled ahead of time, \
                 never generated at run time",
                self.name()
            ),
        }
    }
}

pub(crate) struct State {
    pub mode: Cell<Mode>,
    /// xorshift64* state for `Math.random()` in handler mode.
    pub rng: Cell<u64>,
    pub in_call: Cell<bool>,
    pub polls: Cell<u64>,
    pub budget: Cell<u64>,
    pub deadline: Cell<Option<CpuTimeout>>,
    /// Bytes allocated by the current call, and the most it may allocate.
    pub allocated: Cell<u64>,
    pub alloc_budget: Cell<u64>,
    /// Bytes the engine holds right now (usable sizes), kept by the
    /// allocator so reading it never walks the heap.
    pub live_bytes: Cell<i64>,
    /// The most `live_bytes` reached during the current call.
    pub peak_live_bytes: Cell<i64>,
    pub preempted: Cell<Option<PreemptCause>>,
    /// Set once a call has failed: every further poll interrupts and host
    /// calls are refused, so leftover microtasks of a failed call are flushed
    /// without effects.
    pub killing: Cell<bool>,
    /// First capability denial of the current call (sticky).
    pub denied: RefCell<Option<(Capability, String)>>,
    /// First resolution failure of the current call: (specifier, importer, why).
    pub resolve_error: RefCell<Option<(String, String, String)>>,
    /// What pattern code wrote with `console.*` since the embedder last
    /// took it ([`State::log`]), and the lines dropped past the bound.
    pub logs: RefCell<Vec<LogLine>>,
    pub logs_dropped: Cell<u64>,
}

/// One `console.*` call of pattern code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogLine {
    pub level: LogLevel,
    pub text: String,
}

/// A console method's level (`log` and `info` are `Info`; `debug` and
/// `trace` are `Debug`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogLevel {
    Debug,
    Info,
    Warn,
    Error,
}

impl LogLevel {
    fn from_code(code: i32) -> LogLevel {
        match code {
            0 => LogLevel::Debug,
            2 => LogLevel::Warn,
            3 => LogLevel::Error,
            _ => LogLevel::Info,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            LogLevel::Debug => "debug",
            LogLevel::Info => "info",
            LogLevel::Warn => "warn",
            LogLevel::Error => "error",
        }
    }
}

/// Lines kept between two takes; more are counted as dropped.
pub const MAX_LOG_LINES: usize = 64;
/// A line's text is cut past this many characters (and says how many).
pub const MAX_LOG_LINE_CHARS: usize = 1024;

impl State {
    pub fn new() -> Self {
        State {
            mode: Cell::new(Mode::Reactive),
            live_bytes: Cell::new(0),
            peak_live_bytes: Cell::new(0),
            rng: Cell::new(1),
            in_call: Cell::new(false),
            polls: Cell::new(0),
            budget: Cell::new(0),
            deadline: Cell::new(None),
            allocated: Cell::new(0),
            alloc_budget: Cell::new(u64::MAX),
            preempted: Cell::new(None),
            killing: Cell::new(false),
            denied: RefCell::new(None),
            resolve_error: RefCell::new(None),
            logs: RefCell::new(Vec::new()),
            logs_dropped: Cell::new(0),
        }
    }

    /// Keeps one `console.*` line, within the bounds.
    pub fn log(&self, code: i32, text: String) {
        let mut logs = self.logs.borrow_mut();
        if logs.len() >= MAX_LOG_LINES || self.killing.get() {
            self.logs_dropped.set(self.logs_dropped.get() + 1);
            return;
        }
        logs.push(LogLine {
            level: LogLevel::from_code(code),
            text: crate::human::truncate_message(&text, MAX_LOG_LINE_CHARS),
        });
    }

    pub fn begin(&self, mode: Mode, budget: u64, alloc_budget: u64, deadline: Option<CpuTimeout>) {
        self.mode.set(mode);
        if let Mode::Handler { entropy_seed, .. } = mode {
            self.rng.set(seed_state(entropy_seed));
        }
        self.in_call.set(true);
        self.polls.set(0);
        self.budget.set(budget);
        self.deadline.set(deadline);
        self.allocated.set(0);
        self.peak_live_bytes.set(self.live_bytes.get());
        self.alloc_budget.set(alloc_budget);
        self.preempted.set(None);
        self.killing.set(false);
        self.denied.replace(None);
        self.resolve_error.replace(None);
    }

    pub fn end(&self) {
        self.in_call.set(false);
        // Back to the strictest mode so that anything that might run between
        // calls (nothing should) gets no clock and no entropy.
        self.mode.set(Mode::Reactive);
        self.killing.set(false);
    }

    /// The interrupt handler's body: count one poll, decide whether to stop.
    #[inline]
    pub fn poll(&self) -> bool {
        let polls = self.polls.get().saturating_add(1);
        self.polls.set(polls);
        if self.killing.get() || self.preempted.get().is_some() {
            return true;
        }
        if polls > self.budget.get() {
            if self.preempted.get().is_none() {
                self.preempted.set(Some(PreemptCause::Budget));
            }
            return true;
        }
        if let Some(deadline) = self.deadline.get() {
            if deadline.passed() {
                if self.preempted.get().is_none() {
                    self.preempted.set(Some(PreemptCause::CpuDeadline));
                }
                return true;
            }
        }
        false
    }

    /// Charge an allocation of `bytes` to the running call; `false` means
    /// refuse it (the call is over its allocation budget and now preempted).
    #[inline]
    pub fn charge(&self, bytes: usize) -> bool {
        if !self.in_call.get() {
            return true;
        }
        let total = self.allocated.get().saturating_add(bytes as u64);
        self.allocated.set(total);
        if total > self.alloc_budget.get() {
            if self.preempted.get().is_none() {
                self.preempted.set(Some(PreemptCause::AllocationBudget));
            }
            return false;
        }
        true
    }

    /// Adds `n` (negative: freed) to the live-bytes gauge.
    #[inline]
    pub fn add_live(&self, n: i64) {
        let live = self.live_bytes.get() + n;
        self.live_bytes.set(live);
        if live > self.peak_live_bytes.get() {
            self.peak_live_bytes.set(live);
        }
    }

    /// Record a denial (first one wins) and return its message.
    pub fn deny(&self, cap: Capability) -> String {
        let message = cap.denial_message();
        let mut denied = self.denied.borrow_mut();
        if denied.is_none() {
            *denied = Some((cap, message.clone()));
        }
        message
    }

    /// The coarsened clock, or the denial.
    pub fn now_ms(&self, cap: Capability) -> Result<f64, String> {
        match self.mode.get() {
            Mode::Handler { event_time_ms, .. } => Ok(((event_time_ms / 1000) * 1000) as f64),
            Mode::Reactive => Err(self.deny(cap)),
        }
    }

    /// Next `Math.random()` value in [0, 1), or the denial.
    pub fn random(&self) -> Result<f64, String> {
        match self.mode.get() {
            Mode::Handler { .. } => {
                // xorshift64*: tiny, fast, good enough for non-cryptographic
                // `Math.random()` semantics (which promise nothing stronger).
                let mut x = self.rng.get();
                x ^= x >> 12;
                x ^= x << 25;
                x ^= x >> 27;
                self.rng.set(x);
                let out = x.wrapping_mul(0x2545_F491_4F6C_DD1D);
                Ok((out >> 11) as f64 * (1.0 / (1u64 << 53) as f64))
            }
            Mode::Reactive => Err(self.deny(Capability::MathRandom)),
        }
    }
}

/// splitmix64 of the seed, so that nearby seeds give unrelated streams and
/// the xorshift state is never zero.
fn seed_state(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    if z == 0 {
        0x9E37_79B9_7F4A_7C15
    } else {
        z
    }
}
