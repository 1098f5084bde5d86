//! Shared test fixtures: a real store in a temporary directory on a manual clock.
#![allow(dead_code)]

pub mod origin;
pub mod pg;
pub mod server;
pub mod webdriver;
pub mod wire;

use spacewake::clock::ManualClock;
use spacewake::metrics::Counters;
use spacewake::store::{Store, StoreConfig};
use std::sync::Arc;

pub struct TestStore {
    pub dir: tempfile::TempDir,
    pub clock: Arc<ManualClock>,
    pub counters: Arc<Counters>,
    pub store: Store,
}

pub fn store() -> TestStore {
    store_with(|_| {})
}

pub fn store_with(f: impl FnOnce(&mut StoreConfig)) -> TestStore {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let counters = Counters::new();
    let mut cfg = StoreConfig::new(dir.path());
    f(&mut cfg);
    let store = Store::open(cfg, clock.clone(), counters.clone()).unwrap();
    TestStore {
        dir,
        clock,
        counters,
        store,
    }
}

impl TestStore {
    /// A second store (another "host") on the same data directory and clock.
    pub fn reopen_with(&self, f: impl FnOnce(&mut StoreConfig)) -> Store {
        let mut cfg = StoreConfig::new(self.dir.path());
        f(&mut cfg);
        Store::open(cfg, self.clock.clone(), Counters::new()).unwrap()
    }
}

/// Polls `f` until it holds, failing the test after 20 s.
pub fn wait(what: &str, mut f: impl FnMut() -> bool) {
    let t = std::time::Instant::now();
    while !f() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
}

/// A host on a manual clock with a short idle time and its waker running;
/// `f` adjusts the configuration first.
pub fn manual_host(
    dir: &std::path::Path,
    clock: Arc<ManualClock>,
    f: impl FnOnce(&mut spacewake::host::HostConfig),
) -> spacewake::host::Host {
    let store = Store::open(StoreConfig::new(dir), clock, Counters::new()).unwrap();
    let mut cfg = spacewake::host::HostConfig {
        idle_park_ms: 10,
        ..Default::default()
    };
    f(&mut cfg);
    let host = spacewake::host::Host::new(store, cfg);
    host.start_waker();
    host
}

/// Waits until `space` parks, moving the manual clock on by the idle
/// time while its server is still there: park timers run on the host
/// clock, so a tenure a session or deploy started never parks by itself.
pub fn park(host: &spacewake::host::Host, clock: &ManualClock, space: &str) {
    let idle = host.config().idle_park_ms.max(1);
    let t = std::time::Instant::now();
    while !settled(host, space) {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "timed out waiting for {space} to park"
        );
        clock.advance_ms(idle);
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Sets the manual clock to `to_ms` and waits until a whole pass of the
/// waker has seen it, so a test can show that nothing happened at that
/// time without sleeping. (The first pass counted may have been under way
/// at the jump; a second jump to the same time makes sure.)
pub fn jump_and_let_the_waker_look(host: &spacewake::host::Host, clock: &ManualClock, to_ms: u64) {
    let passes = || {
        host.counters()
            .host()
            .get(spacewake::metrics::Counter::WakerPasses)
    };
    for _ in 0..2 {
        let before = passes();
        clock.set_ms(to_ms);
        wait("a waker pass", || passes() > before);
    }
}

/// A piece's value at a dotted `path`, read through the host as a session would.
pub fn read(
    host: &spacewake::host::Host,
    space: &str,
    piece: &str,
    path: &str,
) -> serde_json::Value {
    host.ask_blocking(
        space,
        spacewake::host::Trigger::Session,
        spacewake::host::Read {
            piece: Some(piece.into()),
            doc: None,
            path: spacewake::store::path::parse_dotted(path),
        },
    )
    .unwrap()
    .value
}

/// Creates `space` and deploys `source` (one file, `p.tsx`) into it.
pub fn deploy_source(host: &spacewake::host::Host, space: &str, source: &str) -> String {
    host.store().create_space(space, "did:key:owner").unwrap();
    host.deploy_file_blocking(space, "p.tsx", source, serde_json::json!({}))
        .expect("deploy")
}

/// True once `space` has no space server and no scheduled activation in flight.
pub fn settled(host: &spacewake::host::Host, space: &str) -> bool {
    !host.active_spaces().iter().any(|s| s == space)
        && host
            .counters()
            .space_value(space, spacewake::metrics::Counter::ScheduledInFlight)
            == 0
}

impl TestStore {
    /// Starts a runtime (a tenure) on `space`, creating the space if needed.
    pub fn runtime(&self, space: &str) -> spacewake::runtime::SpaceRuntime {
        self.runtime_with(space, spacewake::runtime::RuntimeConfig::default())
    }

    /// [`TestStore::runtime`] with `cfg`'s limits and keys.
    pub fn runtime_with(
        &self,
        space: &str,
        cfg: spacewake::runtime::RuntimeConfig,
    ) -> spacewake::runtime::SpaceRuntime {
        if self.store.directory().get(space).unwrap().is_none() {
            self.store.create_space(space, "did:key:owner").unwrap();
        }
        let sp = self.store.open_space(space).unwrap();
        spacewake::runtime::SpaceRuntime::start(
            sp,
            self.clock.clone(),
            self.store.config().lease_ttl_ms,
            cfg,
        )
        .unwrap()
    }
}

/// Attaches session `session` to `space` (activating it for a session);
/// returns the receiving end of its updates.
pub fn attach(
    host: &spacewake::host::Host,
    space: &str,
    session: spacewake::host::SessionId,
) -> tokio::sync::mpsc::UnboundedReceiver<spacewake::host::Update> {
    use spacewake::host::Trigger;
    let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
    host.ask_blocking(
        space,
        Trigger::Session,
        spacewake::host::Attach { session, sink: tx },
    )
    .unwrap();
    rx
}

/// Appends an event to the stream at `stream_key` of `piece`'s result
/// straight into `space`'s file, with no host serving it: an event
/// acknowledged just before a crash.
pub fn append_while_down(
    data: &std::path::Path,
    space: &str,
    piece: &str,
    stream_key: &str,
    event_id: &str,
    payload: serde_json::Value,
) {
    let store = Store::open(
        StoreConfig::new(data),
        Arc::new(spacewake::clock::SystemClock),
        Counters::new(),
    )
    .unwrap();
    let mut sp = store.open_space(space).unwrap();
    let stream = sp.read(piece).unwrap().unwrap().value[stream_key]["$stream"]
        .as_str()
        .unwrap()
        .to_string();
    sp.append_event(
        spacewake::store::Author::principal("did:key:owner"),
        spacewake::store::NewEvent {
            event_id: event_id.into(),
            stream,
            payload,
            fired_by: "did:key:owner".into(),
        },
    )
    .unwrap();
}

/// Compiles a pattern of `fixtures/runtime/`.
pub fn runtime_fixture(name: &str) -> spacewake::compiler::CompiledProgram {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/runtime")
        .join(name);
    spacewake::check::compile_file(&path)
        .unwrap_or_else(|d| panic!("{}", spacewake::compiler::render(&d)))
}

/// Sends `payload` to the stream at `path` of `piece` (as a user) and runs
/// one wave.
pub fn fire(
    rt: &mut spacewake::runtime::SpaceRuntime,
    piece: &str,
    path: &str,
    id: &str,
    payload: serde_json::Value,
) {
    rt.send(
        piece,
        &spacewake::store::path::parse_dotted(path),
        id,
        payload,
        &spacewake::store::Author::principal("did:key:user"),
    )
    .unwrap();
    rt.run_wave().unwrap();
}
