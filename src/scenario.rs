//! `spacewake scenario FILE.json...`: runs pattern scenarios in-process
//! against a real store in a temporary directory, on a manual clock.
//!
//! A scenario instantiates one pattern export with an argument, then runs
//! its steps in order: send events to the streams at result paths, settle
//! (run waves until no undelivered events remain; an event to a path that
//! is not a stream sets the cell there, as the reference harness does), and
//! compare result paths
//! with expected values (structurally, ignoring `$`-reserved keys; numbers
//! compare by value, so `1` equals `1.0`).

use crate::clock::ManualClock;
use crate::metrics::Counters;
use crate::runtime::graph::strip_reserved;
use crate::runtime::{RuntimeConfig, SpaceRuntime};
use crate::schedule::{Jitter, ScheduleIndexHook};
use crate::store::path::parse_dotted;
use crate::store::{Author, Store, StoreConfig};
use serde::Deserialize;
use serde_json::Value;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Scenario {
    pub name: String,
    pub module: String,
    #[serde(default)]
    pub export_name: Option<String>,
    #[serde(default)]
    pub argument: Value,
    #[serde(default)]
    pub steps: Vec<Step>,
    #[serde(default)]
    pub description: Option<String>,
    /// Where the manual clock starts: an ISO-8601 time with an offset
    /// (`2026-03-27T09:00:00+01:00`). Default 2026-01-01T00:00:00Z
    /// (`ManualClock::DEFAULT_START_MS`).
    #[serde(default)]
    pub start_at: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Step {
    #[serde(default)]
    pub events: Vec<StepEvent>,
    #[serde(default)]
    pub expect: Vec<Expectation>,
    #[serde(default)]
    pub advance_minutes: Option<f64>,
    /// Moves the clock to this ISO-8601 time (with an offset), firing what
    /// falls due on the way, in order; never backwards.
    #[serde(default)]
    pub advance_to: Option<String>,
    /// spacewake extension: pause this [SCHEDULE] entry of the piece.
    #[serde(default)]
    pub pause_entry: Option<u32>,
    /// spacewake extension: resume this [SCHEDULE] entry of the piece.
    #[serde(default)]
    pub resume_entry: Option<u32>,
    /// spacewake extension: delete the piece (its schedule goes with it).
    #[serde(default)]
    pub delete_piece: bool,
    #[serde(default)]
    pub description: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StepEvent {
    pub stream: String,
    #[serde(default)]
    pub payload: Value,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Expectation {
    pub path: String,
    /// Absent or `null`: the path must be absent or null.
    #[serde(default)]
    pub value: Value,
}

/// The outcome of one scenario file.
#[derive(Debug, Clone, PartialEq)]
pub struct Outcome {
    pub file: PathBuf,
    pub name: String,
    /// Empty when the scenario passed.
    pub failures: Vec<String>,
    /// Actions that failed while it ran (a handler that threw, a write
    /// refused): printed either way, since a wrong value often starts there.
    pub notes: Vec<String>,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

pub fn run_files(files: &[PathBuf]) -> ExitCode {
    let (mut passed, mut failed) = (0, 0);
    for f in files {
        let o = run_file(f);
        if o.passed() {
            passed += 1;
            println!("PASS {} ({})", o.name, f.display());
            for n in &o.notes {
                println!("  note: {n}");
            }
        } else {
            failed += 1;
            println!("FAIL {} ({})", o.name, f.display());
            for msg in &o.failures {
                println!("  {msg}");
            }
            for n in &o.notes {
                println!("  note: {n}");
            }
        }
    }
    println!("{passed} passed, {failed} failed");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

pub fn run_file(file: &Path) -> Outcome {
    let mut outcome = Outcome {
        file: file.to_path_buf(),
        name: file.display().to_string(),
        failures: Vec::new(),
        notes: Vec::new(),
    };
    let scenario: Scenario = match std::fs::read_to_string(file)
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str(&t).map_err(|e| e.to_string()))
    {
        Ok(s) => s,
        Err(e) => {
            outcome.failures.push(format!("cannot read scenario: {e}"));
            return outcome;
        }
    };
    outcome.name = scenario.name.clone();
    if let Err(e) = run(file, &scenario, &mut outcome.failures, &mut outcome.notes) {
        outcome.failures.push(e);
    }
    outcome
}

fn run(
    file: &Path,
    sc: &Scenario,
    failures: &mut Vec<String>,
    notes: &mut Vec<String>,
) -> Result<(), String> {
    let base = file.parent().unwrap_or(Path::new("."));
    let module = base.join(&sc.module);
    let program = crate::check::compile_file(&module).map_err(|d| {
        format!(
            "{} does not compile:\n{}",
            module.display(),
            crate::compiler::render(&d)
        )
    })?;

    let start_ms = match &sc.start_at {
        Some(t) => Some(parse_time(t).map_err(|e| format!("startAt: {e}"))?),
        None => None,
    };
    with_scratch_runtime_at(
        "scenario",
        Default::default(),
        start_ms,
        |rt, clock, jitter, _effects| {
            let piece = rt
                .create_piece(&program, sc.export_name.as_deref(), &sc.argument)
                .map_err(|e| e.to_string())?;
            rt.flush().map_err(|e| e.to_string())?;
            let author = Author::principal("did:key:scenario");
            for (n, step) in sc.steps.iter().enumerate() {
                let n = n + 1;
                if let Some(e) = step.pause_entry {
                    crate::schedule::ops::pause(rt.space(), &piece, e)
                        .map_err(|e| format!("step {n}: {e}"))?;
                }
                if let Some(e) = step.resume_entry {
                    crate::schedule::ops::resume(rt.space(), &piece, e)
                        .map_err(|e| format!("step {n}: {e}"))?;
                }
                if step.delete_piece {
                    rt.delete_piece(&piece)
                        .map_err(|e| format!("step {n}: {e}"))?;
                    rt.flush().map_err(|e| format!("step {n}: {e}"))?;
                }
                if let Some(minutes) = step.advance_minutes {
                    if !(minutes.is_finite() && minutes >= 0.0) {
                        return Err(format!(
                        "step {n}: advanceMinutes must be a non-negative number (got {minutes})"
                    ));
                    }
                    advance(rt, clock, jitter, (minutes * 60_000.0).round() as u64)
                        .map_err(|e| format!("step {n}: advancing {minutes} minutes: {e}"))?;
                }
                if let Some(to) = &step.advance_to {
                    use crate::clock::Clock;
                    let target = parse_time(to).map_err(|e| format!("step {n}: advanceTo: {e}"))?;
                    let now = clock.now_ms();
                    if target < now {
                        return Err(format!(
                            "step {n}: advanceTo {to} is before the scenario's clock ({}); \
                             time only moves forward",
                            utc_text(now)
                        ));
                    }
                    advance(rt, clock, jitter, target - now)
                        .map_err(|e| format!("step {n}: advancing to {to}: {e}"))?;
                }
                for (i, ev) in step.events.iter().enumerate() {
                    let path = parse_dotted(&ev.stream);
                    let is_stream = rt
                        .stream_at(&piece, &path)
                        .map_err(|e| format!("step {n}: event to {:?}: {e}", ev.stream))?
                        .is_some();
                    let sent = if is_stream {
                        rt.send(
                            &piece,
                            &path,
                            &format!("scenario/step{n}/event{i}"),
                            ev.payload.clone(),
                            &author,
                        )
                        .map(|_| ())
                    } else {
                        // As the reference harness: sending to a cell sets it.
                        rt.set_path(&piece, &path, ev.payload.clone())
                    };
                    sent.map_err(|e| format!("step {n}: event to {:?}: {e}", ev.stream))?;
                }
                rt.settle(1_000).map_err(|e| format!("step {n}: {e}"))?;
                for exp in &step.expect {
                    let actual = rt
                        .read(&piece, &parse_dotted(&exp.path))
                        .map_err(|e| format!("step {n}: reading {:?}: {e}", exp.path))?;
                    let (a, e) = (strip_reserved(&actual), strip_reserved(&exp.value));
                    if !json_eq(&a, &e) {
                        failures.push(format!(
                            "step {n}: path {:?}: expected {e}, got {a}",
                            exp.path
                        ));
                    }
                }
                rt.flush().map_err(|e| format!("step {n}: {e}"))?;
            }
            notes.extend(
                rt.failures()
                    .iter()
                    .map(|f| format!("{} {} failed: {}", f.kind, f.action, f.error)),
            );
            Ok(())
        },
    )
}

/// Runs `f` on a fresh space named `space` of a real store in a temporary
/// directory, on a manual clock, with schedules on the nominal grid (no
/// jitter, so a 120-minute cadence fires at exactly 120, 240, ... minutes):
/// what `scenario` and `test` run patterns in. The runtime is stopped and
/// the directory removed after.
pub(crate) fn with_scratch_runtime<T>(
    space: &str,
    mocks: crate::effects::mock::Mocks,
    f: impl FnOnce(&mut SpaceRuntime, &Arc<ManualClock>, &Jitter, &ScratchEffects) -> Result<T, String>,
) -> Result<T, String> {
    with_scratch_runtime_at(space, mocks, None, f)
}

/// [`with_scratch_runtime`] with the manual clock starting at `start_ms`
/// (`None`: `ManualClock::DEFAULT_START_MS`).
pub(crate) fn with_scratch_runtime_at<T>(
    space: &str,
    mocks: crate::effects::mock::Mocks,
    start_ms: Option<u64>,
    f: impl FnOnce(&mut SpaceRuntime, &Arc<ManualClock>, &Jitter, &ScratchEffects) -> Result<T, String>,
) -> Result<T, String> {
    let dir = tempfile_dir()?;
    let result = (|| {
        let clock = Arc::new(ManualClock::new(
            start_ms.unwrap_or(ManualClock::DEFAULT_START_MS),
        ));
        let counters = Counters::new();
        let store = Store::open(StoreConfig::new(&dir), clock.clone(), counters.clone())
            .map_err(|e| e.to_string())?;
        let jitter = Jitter::none();
        store.add_hook(Arc::new(ScheduleIndexHook::new(jitter.clone())));
        store
            .create_space(space, &format!("did:key:{space}"))
            .map_err(|e| e.to_string())?;
        let opened = store.open_space(space).map_err(|e| e.to_string())?;
        let ttl = store.config().lease_ttl_ms;
        // Effects go through a broker of the runner's own, on the default
        // policy (loopback refused), answered from the test's mocks first.
        let mut cfg = RuntimeConfig::default();
        let origin = url::Url::parse(&cfg.public_origin).map_err(|e| e.to_string())?;
        let mut bcfg = crate::effects::BrokerConfig::new(origin);
        bcfg.mocks = mocks;
        cfg.effects = Some(crate::effects::Broker::new(bcfg, clock.clone(), counters)?);
        let mut rt =
            SpaceRuntime::start(opened, clock.clone(), ttl, cfg).map_err(|e| e.to_string())?;
        let (tx, rx) = std::sync::mpsc::channel();
        let tx = std::sync::Mutex::new(tx);
        rt.set_effect_sink(Arc::new(move |done| {
            let _ = tx.lock().unwrap_or_else(|p| p.into_inner()).send(done);
        }));
        let effects = ScratchEffects { rx };
        let out = f(&mut rt, &clock, &jitter, &effects)?;
        rt.stop().map_err(|e| e.to_string())?;
        Ok(out)
    })();
    let _ = std::fs::remove_dir_all(&dir);
    result
}

/// The outcomes of a scratch runtime's effects, as they come back.
pub(crate) struct ScratchEffects {
    rx: std::sync::mpsc::Receiver<crate::runtime::effects::EffectDone>,
}

/// How long a runner waits for one effect's outcome (the broker's own
/// total timeout is shorter, so an outcome always comes first).
const EFFECT_WAIT: std::time::Duration = std::time::Duration::from_secs(60);

impl ScratchEffects {
    /// Brings everything the piece's result reaches up to date and waits
    /// for the effects that sends, applying each outcome and settling again,
    /// until none is on its way (the reference runner's `{ settle: true }`).
    pub(crate) fn settle(
        &self,
        rt: &mut SpaceRuntime,
        piece: &str,
        max_waves: usize,
    ) -> Result<(), String> {
        for _ in 0..max_waves {
            rt.read(piece, &[]).map_err(|e| e.to_string())?;
            rt.settle(max_waves).map_err(|e| e.to_string())?;
            if rt.effects_in_flight() == 0 {
                return Ok(());
            }
            let done = self
                .rx
                .recv_timeout(EFFECT_WAIT)
                .map_err(|_| "an effect's outcome did not come back within 60 s".to_string())?;
            rt.apply_effect(done).map_err(|e| e.to_string())?;
            while let Ok(more) = self.rx.try_recv() {
                rt.apply_effect(more).map_err(|e| e.to_string())?;
            }
            rt.settle(max_waves).map_err(|e| e.to_string())?;
        }
        Err("effects kept starting effects past the step's bound".to_string())
    }
}

/// Moves the manual clock forward by `by_ms`, firing every wake that falls
/// due on the way at its own due time, in order, and delivering it before
/// the next — exactly as a host running for that long would.
pub fn advance(
    rt: &mut SpaceRuntime,
    clock: &ManualClock,
    jitter: &Jitter,
    by_ms: u64,
) -> Result<(), String> {
    use crate::clock::Clock;
    let target = clock.now_ms() + by_ms;
    loop {
        let next = crate::schedule::fire::next_wake(rt.space()).map_err(|e| e.to_string())?;
        let Some(due) = next.filter(|d| *d <= target) else {
            break;
        };
        clock.set_ms(due.max(clock.now_ms()));
        let now = clock.now_ms();
        rt.resume_tenure().map_err(|e| e.to_string())?;
        crate::schedule::fire::fire_due(rt.space(), now, jitter, true)
            .map_err(|e| e.to_string())?;
        for _ in 0..1_000 {
            let (wave, _) = crate::host::wave::run_wave_with(
                rt,
                now,
                256,
                &crate::schedule::backoff::BackoffPolicy::disabled(),
            )
            .map_err(|e| e.to_string())?;
            if wave.events == 0 && !rt.space().has_undelivered().map_err(|e| e.to_string())? {
                break;
            }
        }
    }
    clock.set_ms(target);
    rt.resume_tenure().map_err(|e| e.to_string())
}

/// An ISO-8601 time with an offset (`Z` or `+01:00`), in ms since the epoch.
pub fn parse_time(text: &str) -> Result<u64, String> {
    let t = chrono::DateTime::parse_from_rfc3339(text).map_err(|e| {
        format!(
            "{text:?} is not an ISO-8601 time with an offset, like 2026-03-27T09:00:00+01:00 ({e})"
        )
    })?;
    u64::try_from(t.timestamp_millis()).map_err(|_| format!("{text:?} is before 1970"))
}

/// `ms` as an ISO-8601 UTC time.
pub fn utc_text(ms: u64) -> String {
    chrono::DateTime::from_timestamp_millis(ms as i64)
        .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true))
        .unwrap_or_else(|| format!("{ms} ms"))
}

/// Structural equality where numbers compare by value.
pub fn json_eq(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x.as_f64() == y.as_f64(),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_eq(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_eq(v, w)))
        }
        _ => a == b,
    }
}

fn tempfile_dir() -> Result<PathBuf, String> {
    let d = std::env::temp_dir().join(format!(
        "spacewake-scratch-{}-{}",
        std::process::id(),
        rand::random::<u64>()
    ));
    std::fs::create_dir_all(&d).map_err(|e| e.to_string())?;
    Ok(d)
}
