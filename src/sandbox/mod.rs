//! The pattern sandbox: one QuickJS runtime per space runtime, with
//! no ambient capabilities, a memory limit, a per-call interrupt budget, and
//! capability modes (reactive vs handler) switched per call.
//!
//! Invariants:
//! - One `Runtime` lives as long as the `Sandbox`, with one or more realms
//!   (contexts: each its own global object, intrinsics and module
//!   instances, each locked down; the space runtime uses one). A call
//!   never creates a context (per-call overhead is a few `Cell`
//!   stores, one engine lock, argument conversion and the JS call itself);
//!   it runs in the realm its handle came from.
//! - Every entry into JS (`call*`, `eval`, `import`, `get`, `to_json`) runs
//!   under a `Mode` and a budget, with host-side per-call state reset first
//!   (`state.rs`). A failed call leaves the sandbox usable: preemption and
//!   out-of-memory unwind the JS stack, leftover microtasks are flushed with
//!   effects refused, and garbage is collected after an out-of-memory.
//! - The budget is deterministic: it counts interrupt-handler invocations
//!   ("polls"; QuickJS polls once per 10,000 ticks, a tick being a call or a
//!   backward jump, and regex engine steps poll too). An optional CPU-time
//!   deadline (the calling thread's CPU, a `clock::CpuTimeout`, with a
//!   real-time backstop; never the host clock) is only a safety net and is
//!   checked at the same polls.
//! - JS values handed to the embedder are `JsHandle`s: indices into a table
//!   the `Sandbox` owns, so no engine reference can outlive the engine.
//! - `Sandbox` is `!Send`: create it on the thread that will run it.
//! - Host functions must not call back into the same `Sandbox` (such a call
//!   is refused with `SandboxError::Internal`), and must not panic.

mod bytecode;
mod convert;
mod error;
mod image;
mod lockdown;
mod meter;
mod modules;
mod reuse;
mod state;
#[cfg(test)]
mod tests;

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use rquickjs::context::intrinsic;
use rquickjs::function::{Args, Rest};
use rquickjs::{
    Context, Ctx, Error as JsError, Function, Module, Persistent, Promise, Runtime, Value,
};

pub use error::{HostError, PreemptCause, SandboxError};
pub use modules::{Builtins, COMMONFABRIC, HOST_MODULE, INTERNAL_MODULE};
pub use reuse::{TenureSandbox, DEFAULT_ENGINE_IMAGES};
pub use state::{LogLevel, LogLine, Mode};

use crate::human::truncate_message;
use convert::{js_to_json, json_to_js, ToJsonError};
use modules::{HostObject, Registered, Registry, SandboxLoader, SandboxResolver};
use state::State;

/// Limits for one sandbox. See README.md for how the defaults were chosen.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SandboxConfig {
    /// Heap limit of the whole runtime (all of a space's pieces), in bytes.
    pub memory_limit_bytes: usize,
    /// Maximum JS stack depth, in bytes of native stack. The thread running
    /// the sandbox needs this much stack plus headroom for the host.
    pub max_stack_bytes: usize,
    /// Budget of a call when `CallOptions::budget` is `None`, in interrupt
    /// polls (about 10,000 ticks each).
    pub default_budget: u64,
    /// Bytes a single call may allocate in total (not live: freed memory
    /// still counts). Checked on every allocation, so allocation-heavy loops
    /// that catch their own out-of-memory errors are stopped promptly.
    pub alloc_budget_bytes: u64,
    /// Safety net only: the CPU time one call may use on its thread, checked
    /// at the same polls as the budget, with a real-time backstop of
    /// `clock::CPU_TIMEOUT_REAL_FACTOR` times as long (a native call that
    /// blocks). CPU rather than real time, so a loaded host (three hosts
    /// and a database on two cores) does not stop calls an idle one would
    /// finish. Not deterministic; `None` disables it.
    pub cpu_limit: Option<Duration>,
}

impl Default for SandboxConfig {
    fn default() -> Self {
        SandboxConfig {
            memory_limit_bytes: 64 * 1024 * 1024,
            max_stack_bytes: 1024 * 1024,
            default_budget: DEFAULT_BUDGET_POLLS,
            alloc_budget_bytes: 1 << 30,
            cpu_limit: Some(Duration::from_secs(2)),
        }
    }
}

/// The names a pattern's code finds on the global object, once the sandbox
/// is locked down (no timers, no `eval`, no `WeakRef`). `check` reports a
/// reference to any other undeclared name; a test holds this list to the
/// engine's. Besides the language's own: `console` (lines for the embedder,
/// bounded), `URL` and `URLSearchParams` (pure string work, `url.js`),
/// `Intl` (pure formatting, `intl.js`), `btoa`/`atob` (base64 of byte
/// strings).
pub const GLOBALS: &[&str] = &[
    "AggregateError",
    "Array",
    "ArrayBuffer",
    "BigInt",
    "BigInt64Array",
    "BigUint64Array",
    "Boolean",
    "DataView",
    "Date",
    "Error",
    "EvalError",
    "Float16Array",
    "Float32Array",
    "Float64Array",
    "Function",
    "Infinity",
    "Int16Array",
    "Int32Array",
    "Int8Array",
    "InternalError",
    "Intl",
    "Iterator",
    "JSON",
    "Map",
    "Math",
    "NaN",
    "Number",
    "Object",
    "Promise",
    "Proxy",
    "RangeError",
    "ReferenceError",
    "Reflect",
    "RegExp",
    "Set",
    "String",
    "Symbol",
    "SyntaxError",
    "TypeError",
    "URIError",
    "URL",
    "URLSearchParams",
    "Uint16Array",
    "Uint32Array",
    "Uint8Array",
    "Uint8ClampedArray",
    "WeakMap",
    "WeakSet",
    "atob",
    "btoa",
    "console",
    "decodeURI",
    "decodeURIComponent",
    "encodeURI",
    "encodeURIComponent",
    "escape",
    "globalThis",
    "isFinite",
    "isNaN",
    "parseFloat",
    "parseInt",
    "queueMicrotask",
    "structuredClone",
    "undefined",
    "unescape",
];

/// Default per-call budget in polls. Measured on the 2-core dev machine
/// (README): `while(true){}` runs ~58,000 polls/s and a plain counting loop
/// ~5,000 iterations per poll, so 5,000 polls stop a runaway loop after about
/// 0.1 s of CPU while an ordinary handler or derivation (0-2 polls) keeps
/// three orders of magnitude of headroom. Polls are not uniform in time:
/// ticks that throw (stack-overflow storms) cost ~1 us each, which is what the
/// `cpu_limit` safety net is for.
pub const DEFAULT_BUDGET_POLLS: u64 = 5_000;

/// What pattern code throws is cut to these many characters (name,
/// message, stack) before it reaches a log, a client or the store: a thrown
/// 20 MB message costs one copy out of the engine, not 20 MB per log line.
pub const MAX_MESSAGE_CHARS: usize = 4_096;
const MAX_NAME_CHARS: usize = 256;
const MAX_STACK_CHARS: usize = 8_192;

/// How one entry into JS runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallOptions {
    /// The capability mode.
    pub mode: Mode,
    /// Budget in polls; `None` means `SandboxConfig::default_budget`.
    pub budget: Option<u64>,
}

impl CallOptions {
    /// Reactive mode with the default budget.
    pub fn reactive() -> Self {
        CallOptions {
            mode: Mode::Reactive,
            budget: None,
        }
    }

    /// Handler mode for an event at `event_time_ms`, with the default budget.
    pub fn handler(event_time_ms: u64, entropy_seed: u64) -> Self {
        CallOptions {
            mode: Mode::Handler {
                event_time_ms,
                entropy_seed,
            },
            budget: None,
        }
    }

    /// The same options with an explicit budget.
    pub fn with_budget(mut self, polls: u64) -> Self {
        self.budget = Some(polls);
        self
    }
}

/// A successful entry into JS: its value and how much budget it used.
#[derive(Clone, Debug, PartialEq)]
pub struct Called<T> {
    /// The result.
    pub value: T,
    /// Interrupt polls consumed (granularity: ~10,000 ticks; the engine's
    /// tick counter carries across calls, so a short call reads 0 or 1).
    pub polls: u64,
    /// Bytes the call allocated (in total, including memory freed again).
    pub allocated_bytes: u64,
}

/// What a host function receives.
#[derive(Debug)]
pub struct HostCall<'a> {
    /// The JS arguments as JSON (`undefined` becomes `null`).
    pub args: &'a [serde_json::Value],
    /// The mode of the call that is running.
    pub mode: Mode,
}

/// An opaque reference to a JS value held by a `Sandbox`. Valid until
/// `Sandbox::release` or the sandbox's drop; using it with another sandbox
/// or after release is an `Internal` error, never undefined behaviour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct JsHandle {
    sandbox: u64,
    slot: u32,
    generation: u32,
    /// The realm (context) the value was obtained in: calls through it run
    /// there, with arguments built from that realm's intrinsics.
    realm: u32,
}

/// One realm of a sandbox: its own context — global object, intrinsics,
/// module instances — on the sandbox's runtime (one heap, one memory
/// limit, one budget). Realm 0 exists from the start.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Realm(u32);

impl Realm {
    /// The realm every sandbox starts with.
    pub const FIRST: Realm = Realm(0);
}

/// Counters since the sandbox was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SandboxStats {
    /// Entries into JS.
    pub calls: u64,
    /// Of which succeeded.
    pub ok: u64,
    /// Of which were preempted.
    pub preempted: u64,
    /// Of which ran out of memory.
    pub out_of_memory: u64,
    /// Of which threw.
    pub threw: u64,
    /// Of which were denied a capability.
    pub capability_denied: u64,
    /// Of which failed to resolve a module.
    pub module_errors: u64,
    /// Of which failed inside the embedding.
    pub internal: u64,
    /// Interrupt polls consumed in total.
    pub polls: u64,
}

static NEXT_SANDBOX_ID: AtomicU64 = AtomicU64::new(1);

struct Slot {
    generation: u32,
    value: Option<Persistent<Value<'static>>>,
}

#[derive(Default)]
struct Handles {
    slots: Vec<Slot>,
    free: Vec<u32>,
}

enum Op<'a> {
    Call {
        func: Persistent<Value<'static>>,
        this: Option<Persistent<Value<'static>>>,
        method: Option<&'a str>,
        args: &'a [serde_json::Value],
    },
    Eval(&'a str),
    Import(&'a str),
    Get(Persistent<Value<'static>>, &'a str),
    Value(Persistent<Value<'static>>),
}

#[derive(Clone, Copy)]
enum Want {
    Json,
    Handle,
    /// A run's `{value, built}`: each part converted on its own, so a
    /// scalar value keeps the conversion's fast path.
    Run,
}

enum Out {
    Json(serde_json::Value),
    Handle(JsHandle),
}

enum Step<'js> {
    Done(Out),
    Promise(Promise<'js>),
    Failed(SandboxError),
}

/// See the module documentation.
pub struct Sandbox {
    // Field order is drop order: persistent JS references must go before the
    // context and the runtime that own their memory.
    handles: RefCell<Handles>,
    /// Realm `i` is `realms[i]`; each has had the lockdown installed.
    realms: RefCell<Vec<Context>>,
    runtime: Runtime,
    state: Rc<State>,
    registry: Rc<Registry>,
    config: SandboxConfig,
    id: u64,
    stats: Cell<SandboxStats>,
    /// Set for a sandbox built on a region (`image.rs`): its start-up state,
    /// put back by [`Sandbox::restore_image`]. After `runtime`, which uses
    /// the region until it is freed.
    image: Option<reuse::Image>,
    /// Something outside the heap changed (a host function, a realm):
    /// restoring the heap alone would not give the start-up state back.
    tainted: Cell<bool>,
}

type Intrinsics = (
    intrinsic::Date,
    intrinsic::Eval,
    intrinsic::RegExpCompiler,
    intrinsic::RegExp,
    intrinsic::Json,
    intrinsic::Proxy,
    intrinsic::MapSet,
    intrinsic::TypedArrays,
    intrinsic::Promise,
    intrinsic::BigInt,
);

fn internal(what: &str, e: impl std::fmt::Display) -> SandboxError {
    SandboxError::Internal(format!("{what}: {e}"))
}

/// A fresh context on `runtime` with the lockdown installed and the host
/// object stored: one realm.
fn new_realm_context(
    runtime: &Runtime,
    state: &Rc<State>,
    config: &SandboxConfig,
) -> Result<Context, SandboxError> {
    // Only the pure-language intrinsics: no Performance, no WeakRef /
    // FinalizationRegistry. Eval stays in the engine (module compilation
    // needs it) but lockdown removes every way for JS to reach it.
    let context =
        Context::custom::<Intrinsics>(runtime).map_err(|e| internal("creating context", e))?;
    // Lockdown runs with a generous budget of its own: it is our code.
    state.begin(Mode::Reactive, u64::MAX, u64::MAX, None);
    let setup = context.with(|ctx| -> Result<(), SandboxError> {
        lockdown::install(&ctx, state).map_err(|e| {
            let caught = matches!(e, JsError::Exception).then(|| ctx.catch());
            // Lockdown never throws null: the engine does when it cannot
            // even allocate the error object, i.e. the heap limit is too
            // small for the sandbox itself.
            let starved = matches!(e, JsError::Allocation)
                || caught
                    .as_ref()
                    .is_some_and(|v| v.is_null() || v.type_of() == rquickjs::Type::Uninitialized);
            if starved {
                return SandboxError::OutOfMemory {
                    limit_bytes: config.memory_limit_bytes,
                };
            }
            let detail = match caught {
                Some(v) => format!("{v:?}"),
                None => e.to_string(),
            };
            internal("installing lockdown", detail)
        })?;
        let host = rquickjs::Object::new(ctx.clone()).map_err(|e| internal("host object", e))?;
        ctx.store_userdata(HostObject(host))
            .map_err(|_| SandboxError::Internal("storing host object".into()))?;
        Ok(())
    });
    state.end();
    setup?;
    Ok(context)
}

impl Sandbox {
    /// Build a sandbox. `builtins` holds the JS text of the built-in
    /// `"commonfabric"` module (the authoring API) and of the embedder's
    /// private module behind it; both are compiled lazily, on first import.
    pub fn new(config: SandboxConfig, builtins: &Builtins) -> Result<Sandbox, SandboxError> {
        let state = Rc::new(State::new());
        let runtime = Runtime::new_with_alloc(meter::MeteredAllocator {
            state: state.clone(),
            inner: rquickjs::allocator::RustAllocator,
        })
        .map_err(|e| internal("creating runtime", e))?;
        Sandbox::build(config, builtins, runtime, state)
    }

    fn build(
        config: SandboxConfig,
        builtins: &Builtins,
        runtime: Runtime,
        state: Rc<State>,
    ) -> Result<Sandbox, SandboxError> {
        let registry = Rc::new(Registry {
            modules: RefCell::new(Default::default()),
            commonfabric: Rc::from(builtins.api),
            internal: Rc::from(builtins.internal),
            subpaths: builtins.subpaths,
        });
        runtime.set_memory_limit(config.memory_limit_bytes);
        runtime.set_max_stack_size(config.max_stack_bytes);
        let st = state.clone();
        runtime.set_interrupt_handler(Some(Box::new(move || st.poll())));
        runtime.set_loader(
            SandboxResolver {
                registry: registry.clone(),
                state: state.clone(),
            },
            SandboxLoader {
                registry: registry.clone(),
            },
        );
        let context = new_realm_context(&runtime, &state, &config)?;
        Ok(Sandbox {
            handles: RefCell::new(Handles::default()),
            realms: RefCell::new(vec![context]),
            runtime,
            state,
            registry,
            config,
            id: NEXT_SANDBOX_ID.fetch_add(1, Ordering::Relaxed),
            stats: Cell::new(SandboxStats::default()),
            image: None,
            tainted: Cell::new(false),
        })
    }

    /// The limits this sandbox runs under.
    pub fn config(&self) -> &SandboxConfig {
        &self.config
    }

    /// Counters since creation.
    pub fn stats(&self) -> SandboxStats {
        self.stats.get()
    }

    /// What pattern code wrote with `console.*` since the last take, and
    /// how many lines were dropped past the bound meanwhile.
    pub fn take_logs(&self) -> (Vec<LogLine>, u64) {
        let lines = std::mem::take(&mut *self.state.logs.borrow_mut());
        (lines, self.state.logs_dropped.replace(0))
    }

    /// Bytes the engine currently has allocated (what the memory limit bounds).
    pub fn memory_used_bytes(&self) -> u64 {
        self.state.live_bytes.get().max(0) as u64
    }

    /// Number of live `JsHandle`s.
    pub fn live_handles(&self) -> usize {
        let h = self.handles.borrow();
        h.slots.len() - h.free.len()
    }

    /// Register modules by name. Names are resolved exactly, and relative
    /// specifiers (`./x.js`, `../x.js`) against the importer's name.
    /// Re-registering a name with the same source is a no-op; with different
    /// source it is an error (the engine caches modules by name).
    pub fn add_modules(&self, modules: &[(&str, &str)]) -> Result<(), SandboxError> {
        self.register(modules, false)
    }

    /// [`Sandbox::add_modules`] for the embedder's own glue modules: they
    /// alone (besides `"commonfabric"`) may import [`INTERNAL_MODULE`], and
    /// no other module may import them, so pattern code reaches neither.
    /// Only the embedder imports them ([`Sandbox::import`]).
    pub fn add_host_modules(&self, modules: &[(&str, &str)]) -> Result<(), SandboxError> {
        self.register(modules, true)
    }

    fn register(&self, modules: &[(&str, &str)], host: bool) -> Result<(), SandboxError> {
        let mut map = self.registry.modules.borrow_mut();
        for (name, source) in modules {
            if *name == COMMONFABRIC || *name == HOST_MODULE || *name == INTERNAL_MODULE {
                return Err(SandboxError::Module {
                    specifier: name.to_string(),
                    importer: String::new(),
                    message: "this name is reserved for a built-in module".into(),
                });
            }
            if let Some(existing) = map.get(*name) {
                if &*existing.source != *source {
                    return Err(SandboxError::Module {
                        specifier: name.to_string(),
                        importer: String::new(),
                        message: "a different module is already registered under this name; \
                                  use content-addressed names"
                            .into(),
                    });
                }
            }
        }
        for (name, source) in modules {
            map.entry(name.to_string()).or_insert_with(|| Registered {
                source: Rc::from(*source),
                template: None,
                host,
            });
        }
        Ok(())
    }

    /// Registers a second instance of every module registered under
    /// `template_prefix`: the same name with `instance_prefix` in its place
    /// (the two of the same length), the same source, evaluated apart on
    /// import (its own module records and top-level state; relative imports
    /// stay within the instance). Compiled once for all instances: the
    /// bytecode is renamed on load. Returns how many modules it registered.
    pub fn add_instance(
        &self,
        template_prefix: &str,
        instance_prefix: &str,
    ) -> Result<usize, SandboxError> {
        if template_prefix.len() != instance_prefix.len() || template_prefix == instance_prefix {
            return Err(SandboxError::Module {
                specifier: instance_prefix.to_string(),
                importer: String::new(),
                message: "an instance prefix must differ from its template's and be as long".into(),
            });
        }
        let mut map = self.registry.modules.borrow_mut();
        let instances: Vec<(String, Registered)> = map
            .range::<str, _>((
                std::ops::Bound::Included(template_prefix),
                std::ops::Bound::Unbounded,
            ))
            .take_while(|(name, _)| name.starts_with(template_prefix))
            .filter(|(_, r)| r.template.is_none())
            .map(|(name, r)| {
                let instance = format!("{instance_prefix}{}", &name[template_prefix.len()..]);
                let registered = Registered {
                    source: r.source.clone(),
                    template: Some(Rc::from(name.as_str())),
                    host: r.host,
                };
                (instance, registered)
            })
            .collect();
        let added = instances.len();
        for (name, registered) in instances {
            map.entry(name).or_insert(registered);
        }
        Ok(added)
    }

    /// Import `specifier` (evaluating it and its imports, module top-level
    /// code running under `opts`) and return a handle to its namespace.
    pub fn import(
        &self,
        specifier: &str,
        opts: &CallOptions,
    ) -> Result<Called<JsHandle>, SandboxError> {
        self.execute_handle(Op::Import(specifier), 0, opts)
    }

    /// A new realm: its own global object, intrinsics and module instances,
    /// locked down like the first, on the same heap and budget.
    pub fn new_realm(&self) -> Result<Realm, SandboxError> {
        self.tainted.set(true);
        let context = new_realm_context(&self.runtime, &self.state, &self.config)?;
        let mut realms = self.realms.borrow_mut();
        realms.push(context);
        Ok(Realm((realms.len() - 1) as u32))
    }

    /// [`Sandbox::import`] in `realm`: the module and its imports are
    /// instantiated there, apart from every other realm's instances.
    pub fn import_in(
        &self,
        realm: Realm,
        specifier: &str,
        opts: &CallOptions,
    ) -> Result<Called<JsHandle>, SandboxError> {
        self.execute_handle(Op::Import(specifier), realm.0, opts)
    }

    /// `add_modules` then `import(entry)`, in reactive mode with the default budget.
    pub fn load(&self, modules: &[(&str, &str)], entry: &str) -> Result<JsHandle, SandboxError> {
        self.add_modules(modules)?;
        Ok(self.import(entry, &CallOptions::reactive())?.value)
    }

    /// `obj[key]` as a handle (getters run in reactive mode, default budget).
    /// A missing key gives a handle to `undefined`.
    pub fn get(&self, obj: JsHandle, key: &str) -> Result<JsHandle, SandboxError> {
        let o = self.lookup(obj)?;
        Ok(self
            .execute_handle(Op::Get(o, key), obj.realm, &CallOptions::reactive())?
            .value)
    }

    /// Call the function `func` with JSON arguments, returning JSON.
    pub fn call(
        &self,
        func: JsHandle,
        args: &[serde_json::Value],
        opts: &CallOptions,
    ) -> Result<Called<serde_json::Value>, SandboxError> {
        self.call_json(func, args, opts, Want::Json)
    }

    /// [`Sandbox::call`] for the embedder's run entry points, whose result is
    /// always `{value, built}` (an object the embedder's own module makes):
    /// the two parts are converted one by one, so the common run (a scalar
    /// value, nothing built) costs no `JSON.stringify`. Any other result is
    /// converted whole, as by [`Sandbox::call`].
    pub fn call_run(
        &self,
        func: JsHandle,
        args: &[serde_json::Value],
        opts: &CallOptions,
    ) -> Result<Called<serde_json::Value>, SandboxError> {
        self.call_json(func, args, opts, Want::Run)
    }

    fn call_json(
        &self,
        func: JsHandle,
        args: &[serde_json::Value],
        opts: &CallOptions,
        want: Want,
    ) -> Result<Called<serde_json::Value>, SandboxError> {
        let realm = func.realm;
        let func = self.lookup(func)?;
        self.execute_json(
            Op::Call {
                func,
                this: None,
                method: None,
                args,
            },
            realm,
            opts,
            want,
        )
    }

    /// Call `func` with JSON arguments and keep the result as a handle (for
    /// results that are not JSON: closures, node graphs, ...).
    pub fn call_handle(
        &self,
        func: JsHandle,
        args: &[serde_json::Value],
        opts: &CallOptions,
    ) -> Result<Called<JsHandle>, SandboxError> {
        let realm = func.realm;
        let func = self.lookup(func)?;
        self.execute_handle(
            Op::Call {
                func,
                this: None,
                method: None,
                args,
            },
            realm,
            opts,
        )
    }

    /// Call `obj[method](...args)` with `this = obj`, returning JSON.
    pub fn call_method(
        &self,
        obj: JsHandle,
        method: &str,
        args: &[serde_json::Value],
        opts: &CallOptions,
    ) -> Result<Called<serde_json::Value>, SandboxError> {
        let o = self.lookup(obj)?;
        self.execute_json(
            Op::Call {
                func: o.clone(),
                this: Some(o),
                method: Some(method),
                args,
            },
            obj.realm,
            opts,
            Want::Json,
        )
    }

    /// The JSON form of a held value (`toJSON` runs in reactive mode).
    pub fn to_json(&self, value: JsHandle) -> Result<serde_json::Value, SandboxError> {
        let v = self.lookup(value)?;
        Ok(self
            .execute_json(
                Op::Value(v),
                value.realm,
                &CallOptions::reactive(),
                Want::Json,
            )?
            .value)
    }

    /// Evaluate a classic script in the global scope (an embedder tool: pattern
    /// code itself has no `eval`), returning its completion value as JSON.
    pub fn eval(
        &self,
        source: &str,
        opts: &CallOptions,
    ) -> Result<Called<serde_json::Value>, SandboxError> {
        self.execute_json(Op::Eval(source), 0, opts, Want::Json)
    }

    /// Drop a handle. Releasing twice, or a foreign handle, is a no-op.
    pub fn release(&self, handle: JsHandle) {
        if handle.sandbox != self.id {
            return;
        }
        let mut h = self.handles.borrow_mut();
        if let Some(slot) = h.slots.get_mut(handle.slot as usize) {
            if slot.generation == handle.generation && slot.value.is_some() {
                slot.value = None;
                slot.generation = slot.generation.wrapping_add(1);
                h.free.push(handle.slot);
            }
        }
    }

    /// Register a native function as `host[name]`, the default export of
    /// `"spacewake:host"` (importable only by `"commonfabric"`). Arguments
    /// and result cross as JSON; an `Err` is thrown into JS as an `Error`
    /// named `HostError::name`. Registering a name again replaces it.
    pub fn register_host_fn<F>(&self, name: &str, f: F) -> Result<(), SandboxError>
    where
        F: Fn(&HostCall<'_>) -> Result<serde_json::Value, HostError> + 'static,
    {
        // The function's closure lives on the Rust heap, owned by a JS object
        // a heap restore would forget.
        self.tainted.set(true);
        let f: Rc<HostFn> = Rc::new(f);
        for context in self.realms.borrow().iter() {
            let state = self.state.clone();
            context.with(|ctx| {
                let host = ctx
                    .userdata::<HostObject>()
                    .ok_or_else(|| SandboxError::Internal("host object missing".into()))?
                    .0
                    .clone();
                let func = make_host_fn(&ctx, name, f.clone(), state)
                    .map_err(|e| internal("creating host function", e))?;
                host.set(name, func)
                    .map_err(|e| internal("registering host function", e))
            })?;
        }
        Ok(())
    }

    // ---- internals -------------------------------------------------------

    fn lookup(&self, handle: JsHandle) -> Result<Persistent<Value<'static>>, SandboxError> {
        if handle.sandbox != self.id {
            return Err(SandboxError::Internal(
                "handle belongs to another sandbox".into(),
            ));
        }
        let h = self.handles.borrow();
        match h.slots.get(handle.slot as usize) {
            Some(Slot {
                generation,
                value: Some(v),
            }) if *generation == handle.generation => Ok(v.clone()),
            _ => Err(SandboxError::Internal(
                "stale handle (already released)".into(),
            )),
        }
    }

    fn insert(&self, value: Persistent<Value<'static>>, realm: u32) -> JsHandle {
        let mut h = self.handles.borrow_mut();
        let slot = match h.free.pop() {
            Some(i) => {
                h.slots[i as usize].value = Some(value);
                i
            }
            None => {
                h.slots.push(Slot {
                    generation: 0,
                    value: Some(value),
                });
                (h.slots.len() - 1) as u32
            }
        };
        JsHandle {
            sandbox: self.id,
            slot,
            generation: h.slots[slot as usize].generation,
            realm,
        }
    }

    fn execute_json(
        &self,
        op: Op<'_>,
        realm: u32,
        opts: &CallOptions,
        want: Want,
    ) -> Result<Called<serde_json::Value>, SandboxError> {
        let c = self.execute(op, realm, opts, want)?;
        match c.value {
            Out::Json(v) => Ok(Called {
                value: v,
                polls: c.polls,
                allocated_bytes: c.allocated_bytes,
            }),
            Out::Handle(_) => Err(SandboxError::Internal("expected JSON output".into())),
        }
    }

    fn execute_handle(
        &self,
        op: Op<'_>,
        realm: u32,
        opts: &CallOptions,
    ) -> Result<Called<JsHandle>, SandboxError> {
        let c = self.execute(op, realm, opts, Want::Handle)?;
        match c.value {
            Out::Handle(h) => Ok(Called {
                value: h,
                polls: c.polls,
                allocated_bytes: c.allocated_bytes,
            }),
            Out::Json(_) => Err(SandboxError::Internal("expected handle output".into())),
        }
    }

    fn execute(
        &self,
        op: Op<'_>,
        realm: u32,
        opts: &CallOptions,
        want: Want,
    ) -> Result<Called<Out>, SandboxError> {
        // Contexts are reference-counted handles: a clone, so no borrow is
        // held while JS runs (a host function may ask for a new realm).
        let context = self
            .realms
            .borrow()
            .get(realm as usize)
            .cloned()
            .ok_or_else(|| SandboxError::Internal(format!("no realm {realm}")))?;
        if self.state.in_call.get() {
            return Err(SandboxError::Internal(
                "re-entrant call: a host function called back into its own sandbox".into(),
            ));
        }
        let budget = opts.budget.unwrap_or(self.config.default_budget);
        let deadline = self.config.cpu_limit.map(crate::clock::CpuTimeout::after);
        self.state
            .begin(opts.mode, budget, self.config.alloc_budget_bytes, deadline);

        let result = context.with(|ctx| {
            // A plain value is converted at return time; a promise is settled
            // after the call's microtasks have run.
            let step = match self.perform(&ctx, op) {
                Ok(v) => match v.as_promise() {
                    Some(p) => Ok(Step::Promise(p.clone())),
                    None => Err(v),
                },
                Err(e) => Ok(Step::Failed(self.classify(&ctx, e))),
            };
            let step = match step {
                Ok(s) => s,
                Err(v) => match self.output(&ctx, v, want, realm) {
                    Ok(out) => Step::Done(out),
                    Err(e) => Step::Failed(e),
                },
            };
            // Microtasks belong to the call that queued them: run them now,
            // under the same mode and budget (flushed without effects if the
            // call already failed).
            let job_err = self.drain_jobs(&ctx, matches!(step, Step::Failed(_)));
            match (step, job_err) {
                (Step::Failed(e), _) => Err(e),
                (_, Some(e)) => Err(e),
                (Step::Done(out), None) => Ok(out),
                (Step::Promise(p), None) => self.settle(&ctx, p, want, realm),
            }
        });
        // Sticky denial: a caught CapabilityError still fails the call, so a
        // derivation cannot quietly depend on whether the clock was readable.
        let result = match (result, self.state.denied.borrow().clone()) {
            (Ok(_), Some((cap, message))) => Err(SandboxError::Capability {
                capability: cap.name().to_string(),
                message,
            }),
            (r, _) => r,
        };
        let polls = self.state.polls.get();
        let allocated_bytes = self.state.allocated.get();
        self.state.end();
        self.count(&result, polls);
        if matches!(result, Err(SandboxError::OutOfMemory { .. })) {
            // The failed call's garbage is unreachable now; reclaim it so the
            // next call starts with the memory it had before.
            self.runtime.run_gc();
        }
        result.map(|value| Called {
            value,
            polls,
            allocated_bytes,
        })
    }

    fn perform<'js>(&self, ctx: &Ctx<'js>, op: Op<'_>) -> rquickjs::Result<Value<'js>> {
        match op {
            Op::Call {
                func,
                this,
                method,
                args,
            } => {
                let target = func.restore(ctx)?;
                let f: Value<'js> = match method {
                    Some(name) => match target.as_object() {
                        Some(o) => o.get(name)?,
                        None => {
                            return Err(rquickjs::Exception::throw_type(
                                ctx,
                                "method call on a non-object",
                            ))
                        }
                    },
                    None => target,
                };
                let Some(f) = f.into_function() else {
                    return Err(rquickjs::Exception::throw_type(
                        ctx,
                        "value is not a function",
                    ));
                };
                let mut a = Args::new(ctx.clone(), args.len());
                if let Some(t) = this {
                    a.this(t.restore(ctx)?)?;
                }
                for v in args {
                    a.push_arg(json_to_js(ctx, v)?)?;
                }
                f.call_arg(a)
            }
            Op::Eval(src) => ctx.eval::<Value, _>(src),
            Op::Import(spec) => Module::import(ctx, spec).map(|p| p.into_value()),
            Op::Get(obj, key) => {
                let o = obj.restore(ctx)?;
                match o.as_object() {
                    Some(o) => o.get(key),
                    None => Err(rquickjs::Exception::throw_type(
                        ctx,
                        "property read on a non-object",
                    )),
                }
            }
            Op::Value(v) => v.restore(ctx),
        }
    }

    fn output<'js>(
        &self,
        ctx: &Ctx<'js>,
        v: Value<'js>,
        want: Want,
        realm: u32,
    ) -> Result<Out, SandboxError> {
        match want {
            Want::Handle => Ok(Out::Handle(self.insert(Persistent::save(ctx, v), realm))),
            Want::Json => self.convert_out(ctx, v).map(Out::Json),
            Want::Run => {
                let parts = v.as_object().and_then(|o| {
                    if !o.contains_key("built").ok()? {
                        return None;
                    }
                    let value = o.get::<_, Value>("value").ok()?;
                    let built = o.get::<_, Value>("built").ok()?;
                    Some((value, built))
                });
                match parts {
                    Some((value, built)) => {
                        let value = self.convert_out(ctx, value)?;
                        let built = self.convert_out(ctx, built)?;
                        Ok(Out::Json(
                            serde_json::json!({"value": value, "built": built}),
                        ))
                    }
                    None => self.convert_out(ctx, v).map(Out::Json),
                }
            }
        }
    }

    fn convert_out<'js>(
        &self,
        ctx: &Ctx<'js>,
        v: Value<'js>,
    ) -> Result<serde_json::Value, SandboxError> {
        match js_to_json(ctx, v) {
            Ok(j) => Ok(j),
            Err(ToJsonError::Js(e)) => Err(self.classify(ctx, e)),
            Err(ToJsonError::Parse(m)) => Err(internal("parsing result JSON", m)),
        }
    }

    fn settle<'js>(
        &self,
        ctx: &Ctx<'js>,
        p: Promise<'js>,
        want: Want,
        realm: u32,
    ) -> Result<Out, SandboxError> {
        match p.result::<Value>() {
            None => {
                self.state.killing.set(true);
                Err(SandboxError::Threw {
                    name: "Error".into(),
                    message: "the returned promise never settled (patterns have no timers or I/O to wait for)".into(),
                    stack: None,
                })
            }
            Some(Ok(v)) => self.output(ctx, v, want, realm),
            Some(Err(e)) => Err(self.classify(ctx, e)),
        }
    }

    /// Run queued jobs until none is left. Uses `Ctx::execute_pending_job`
    /// and reads a failed job's exception from the context: rquickjs 0.10's
    /// `Runtime::execute_pending_job` wraps the failing job's context in a
    /// `JobException` whose drop frees a context reference it never took
    /// (QuickJS does not dup it), corrupting the refcount.
    fn drain_jobs<'js>(&self, ctx: &Ctx<'js>, failed: bool) -> Option<SandboxError> {
        if failed {
            self.state.killing.set(true);
        }
        let mut first = None;
        while ctx.execute_pending_job() {
            let exc = ctx.catch();
            if exc.type_of() != rquickjs::Type::Uninitialized {
                let err = self.classify_value(ctx, exc);
                first.get_or_insert(err);
                self.state.killing.set(true);
            }
        }
        first
    }

    /// Host-side facts that decide a failure's class before the JS value does.
    fn host_fact(&self) -> Option<SandboxError> {
        if let Some(cause) = self.state.preempted.get() {
            return Some(SandboxError::Preempted {
                budget: self.state.budget.get(),
                polls: self.state.polls.get(),
                cause,
            });
        }
        if let Some((cap, message)) = self.state.denied.borrow().clone() {
            return Some(SandboxError::Capability {
                capability: cap.name().to_string(),
                message,
            });
        }
        if let Some((specifier, importer, message)) = self.state.resolve_error.borrow().clone() {
            return Some(SandboxError::Module {
                specifier,
                importer,
                message,
            });
        }
        None
    }

    /// The running call took the heap to within a tenth of its limit.
    fn reached_memory_limit(&self) -> bool {
        let peak = self.state.peak_live_bytes.get().max(0) as u128;
        peak * 10 >= self.config.memory_limit_bytes as u128 * 9
    }

    fn classify<'js>(&self, ctx: &Ctx<'js>, err: JsError) -> SandboxError {
        match err {
            JsError::Exception => {
                let v = ctx.catch();
                self.classify_value(ctx, v)
            }
            JsError::Allocation => self.host_fact().unwrap_or(SandboxError::OutOfMemory {
                limit_bytes: self.config.memory_limit_bytes,
            }),
            other => self
                .host_fact()
                .unwrap_or_else(|| internal("engine", other)),
        }
    }

    fn classify_value<'js>(&self, ctx: &Ctx<'js>, v: Value<'js>) -> SandboxError {
        // From here on the call has failed: reading the error's properties
        // may run pattern getters, which must not get a fresh budget.
        self.state.killing.set(true);
        if let Some(fact) = self.host_fact() {
            return fact;
        }
        let read = |o: &rquickjs::Object<'js>, key: &str| -> Option<String> {
            match o.get::<_, Value>(key) {
                Ok(v) => v.as_string().and_then(|s| s.to_string().ok()),
                Err(_) => {
                    let _ = ctx.catch();
                    None
                }
            }
        };
        match v.as_object() {
            Some(o) => {
                let name = read(o, "name").unwrap_or_default();
                let message = read(o, "message").unwrap_or_default();
                if name == "InternalError" && message == "out of memory" {
                    return SandboxError::OutOfMemory {
                        limit_bytes: self.config.memory_limit_bytes,
                    };
                }
                let stack = read(o, "stack").filter(|s| !s.is_empty());
                SandboxError::Threw {
                    name: truncate_message(&name, MAX_NAME_CHARS),
                    message: truncate_message(&message, MAX_MESSAGE_CHARS),
                    stack: stack.map(|s| truncate_message(&s, MAX_STACK_CHARS)),
                }
            }
            None => {
                // The engine failed to even allocate the error object: it
                // throws nothing, or null (what depends on how close to the
                // limit the failed allocation left the heap).
                let starved = v.type_of() == rquickjs::Type::Uninitialized
                    || (v.is_null() && self.reached_memory_limit());
                if starved {
                    return SandboxError::OutOfMemory {
                        limit_bytes: self.config.memory_limit_bytes,
                    };
                }
                let message = match v.as_string() {
                    Some(s) => s.to_string().unwrap_or_default(),
                    None => match js_to_json(ctx, v) {
                        Ok(j) => j.to_string(),
                        Err(_) => {
                            let _ = ctx.catch();
                            String::from("<unprintable value>")
                        }
                    },
                };
                SandboxError::Threw {
                    name: String::new(),
                    message: truncate_message(&message, MAX_MESSAGE_CHARS),
                    stack: None,
                }
            }
        }
    }

    fn count(&self, result: &Result<Out, SandboxError>, polls: u64) {
        let mut s = self.stats.get();
        s.calls += 1;
        s.polls += polls;
        match result {
            Ok(_) => s.ok += 1,
            Err(SandboxError::Preempted { .. }) => s.preempted += 1,
            Err(SandboxError::OutOfMemory { .. }) => s.out_of_memory += 1,
            Err(SandboxError::Threw { .. }) => s.threw += 1,
            Err(SandboxError::Capability { .. }) => s.capability_denied += 1,
            Err(SandboxError::Module { .. }) => s.module_errors += 1,
            Err(SandboxError::Internal(_)) => s.internal += 1,
        }
        self.stats.set(s);
    }
}

type HostFn = dyn Fn(&HostCall<'_>) -> Result<serde_json::Value, HostError>;

fn make_host_fn<'js>(
    ctx: &Ctx<'js>,
    name: &str,
    f: Rc<HostFn>,
    state: Rc<State>,
) -> rquickjs::Result<Function<'js>> {
    Function::new(
        ctx.clone(),
        move |ctx: Ctx<'js>, args: Rest<Value<'js>>| -> rquickjs::Result<Value<'js>> {
            if state.killing.get() {
                return Err(rquickjs::Exception::throw_internal(
                    &ctx,
                    "host call refused: the calling action already failed",
                ));
            }
            let mut json = Vec::with_capacity(args.0.len());
            for a in args.0 {
                match js_to_json(&ctx, a) {
                    Ok(j) => json.push(j),
                    Err(ToJsonError::Js(e)) => return Err(e),
                    Err(ToJsonError::Parse(m)) => {
                        return Err(rquickjs::Exception::throw_internal(&ctx, &m))
                    }
                }
            }
            let call = HostCall {
                args: &json,
                mode: state.mode.get(),
            };
            match f(&call) {
                Ok(v) => json_to_js(&ctx, &v),
                Err(e) => {
                    let exc = rquickjs::Exception::from_message(ctx.clone(), &e.message)?;
                    let obj = exc.into_object();
                    obj.set("name", e.name.as_str())?;
                    Err(ctx.throw(obj.into_value()))
                }
            }
        },
    )?
    .with_name(name)
}
