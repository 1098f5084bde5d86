//! Crash safety of scheduled wakes, by killing a real host process at each
//! step of firing, 30 times each: right after the write-first transaction,
//! mid-wave, and after the wave's commit. No occurrence is lost, none is
//! delivered twice, and a callback that always kills its wave is
//! dead-lettered after its retries instead of looping.
//!
//! Hosts run on the system clock shifted forward (`--clock-offset-ms`), so
//! each run sees the next period due without waiting an hour.

mod common;

use serde_json::Value;
use spacewake::clock::{Clock, SystemClock};
use spacewake::host::{Host, HostConfig};
use spacewake::metrics::Counters;
use spacewake::schedule::fire::FIRE_HISTORY;
use spacewake::schedule::EntryState;
use spacewake::store::{Store, StoreConfig};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

const MIN: u64 = 60_000;
const ROUNDS: u64 = 30;

const PATTERN: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";
const tick = handler<{ period?: number }, { count: Cell<number>; periods: Cell<number[]> }>(
  (ev, { count, periods }) => {
    count.set(count.get() + 1);
    periods.push(ev?.period ?? -1);
  },
);
export default pattern<{ count: Default<number, 0>; periods: Default<number[], []> }>(({ count, periods }) => ({
  [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ count, periods }) }],
  count,
  periods,
}));
"#;

/// Deploys the pattern in-process (no jitter, so period k is due at exactly
/// declared + k hours) and returns (piece, declared_at_ms).
fn setup(dir: &Path) -> (String, u64) {
    let store = Store::open(
        StoreConfig::new(dir),
        Arc::new(SystemClock),
        Counters::new(),
    )
    .unwrap();
    let mut cfg = HostConfig {
        idle_park_ms: 10,
        ..HostConfig::default()
    };
    cfg.schedule.jitter_window_ms = 0;
    let host = Host::new(store, cfg);
    let piece = common::deploy_source(&host, "s", PATTERN);
    let t = Instant::now();
    while !host.active_spaces().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    let row = host
        .store()
        .open_space("s")
        .unwrap()
        .schedule(None)
        .unwrap()[0]
        .clone();
    assert_eq!(row.next_due_ms, row.declared_at_ms + 60 * MIN);
    (piece, row.declared_at_ms)
}

/// The offset that puts a host's clock `after_ms` past period `k`'s due time.
fn offset_for(declared: u64, k: u64, after_ms: u64) -> u64 {
    (declared + k * 60 * MIN + after_ms).saturating_sub(SystemClock.now_ms())
}

fn spawn(dir: &Path, offset_ms: u64, crash: Option<&str>) -> Child {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spacewake"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--idle-park-ms",
        "20",
        "--lease-ttl-ms",
        "300",
        "--lease-renew-ms",
        "100",
        "--backoff",
        "off",
        "--jitter-window-minutes",
        "0",
    ])
    .arg("--clock-offset-ms")
    .arg(offset_ms.to_string())
    .arg("--data")
    .arg(dir)
    .env("SPACEWAKE_LOG", "error")
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    match crash {
        Some(at) => cmd.env("SPACEWAKE_CRASH_AT", at),
        None => cmd.env_remove("SPACEWAKE_CRASH_AT"),
    };
    cmd.spawn().unwrap()
}

/// Runs a host that is expected to abort at its crash point.
fn run_crashing(dir: &Path, offset_ms: u64, at: &str) {
    let mut child = spawn(dir, offset_ms, Some(at));
    let t = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(!status.success(), "the host was meant to die at {at}");
            return;
        }
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("the host never reached {at}");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Runs a healthy host until `done` holds on disk, then kills it.
fn run_until(dir: &Path, offset_ms: u64, what: &str, mut done: impl FnMut() -> bool) {
    let mut child = spawn(dir, offset_ms, None);
    let t = Instant::now();
    while !done() {
        if t.elapsed() > Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("timed out: {what}");
        }
        assert!(
            child.try_wait().unwrap().is_none(),
            "the healthy host exited"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    // Let the killed host's short lease lapse before the next one starts.
    std::thread::sleep(Duration::from_millis(350));
}

struct Disk {
    store: Store,
    piece: String,
}

impl Disk {
    fn open(dir: &Path, piece: &str) -> Disk {
        Disk {
            store: Store::open(
                StoreConfig::new(dir),
                Arc::new(SystemClock),
                Counters::new(),
            )
            .unwrap(),
            piece: piece.to_string(),
        }
    }
    fn arg(&self) -> Value {
        let mut sp = self.store.open_space("s").unwrap();
        sp.read(&format!("{}/argument", self.piece))
            .unwrap()
            .unwrap()
            .value
    }
    fn count(&self) -> u64 {
        self.arg()["count"].as_u64().unwrap()
    }
    fn wake_events(&self) -> Vec<String> {
        let path = self.store.space_path("s");
        let conn = rusqlite::Connection::open(path).unwrap();
        let mut st = conn
            .prepare("SELECT event_id FROM events WHERE event_id LIKE 'wake/%' ORDER BY seq")
            .unwrap();
        st.query_map([], |r| r.get(0))
            .unwrap()
            .map(|r| r.unwrap())
            .collect()
    }
    fn undelivered(&self) -> bool {
        self.store
            .open_space("s")
            .unwrap()
            .has_undelivered()
            .unwrap()
    }
    fn row(&self) -> spacewake::store::ScheduleRow {
        self.store.open_space("s").unwrap().schedule(None).unwrap()[0].clone()
    }
}

/// The periods (or times) the callback recorded, in order.
fn recorded_periods(disk: &Disk) -> Vec<u64> {
    disk.arg()["periods"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect()
}

fn check_exactly_once(disk: &Disk, rounds: u64) {
    assert_eq!(
        disk.count(),
        rounds,
        "every occurrence applied exactly once"
    );
    assert_eq!(
        recorded_periods(disk),
        (1..=rounds).collect::<Vec<_>>(),
        "in order, none lost, none twice"
    );
}

#[test]
fn killed_right_after_the_write_first_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let (piece, declared) = setup(dir.path());
    let disk = Disk::open(dir.path(), &piece);
    for k in 1..=ROUNDS {
        run_crashing(dir.path(), offset_for(declared, k, 1_000), "after-fire");
        // The occurrence is on disk and the entry already points at k + 1.
        assert!(
            disk.undelivered(),
            "round {k}: the wake event was written first"
        );
        assert_eq!(disk.row().nominal_period, k + 1, "round {k}");
        assert_eq!(disk.count(), k - 1, "round {k}: not yet delivered");
        std::thread::sleep(Duration::from_millis(350));
        run_until(
            dir.path(),
            offset_for(declared, k, 3_000),
            "delivery after restart",
            || disk.count() == k && !disk.undelivered(),
        );
    }
    check_exactly_once(&disk, ROUNDS);
    assert_eq!(
        disk.wake_events().len() as u64,
        ROUNDS,
        "one wake event per occurrence"
    );
    assert_eq!(disk.row().fired_count, ROUNDS);
}

#[test]
fn killed_mid_wave() {
    let dir = tempfile::tempdir().unwrap();
    let (piece, declared) = setup(dir.path());
    let disk = Disk::open(dir.path(), &piece);
    for k in 1..=ROUNDS {
        run_crashing(dir.path(), offset_for(declared, k, 1_000), "mid-wave");
        assert_eq!(
            disk.count(),
            k - 1,
            "round {k}: the dead wave wrote nothing"
        );
        let row = disk.row();
        assert!(
            row.inflight_event().is_some(),
            "round {k}: the attempt was recorded first"
        );
        std::thread::sleep(Duration::from_millis(350));
        // The next host sees the failed attempt and plans a retry a minute out...
        run_until(
            dir.path(),
            offset_for(declared, k, 2 * MIN),
            "retry planned",
            || disk.row().retry_due_ms().is_some() && !disk.undelivered(),
        );
        // ...which a host running past that minute delivers.
        run_until(
            dir.path(),
            offset_for(declared, k, 4 * MIN),
            "retry delivered",
            || disk.count() == k,
        );
    }
    check_exactly_once(&disk, ROUNDS);
}

#[test]
fn killed_after_the_wave_commit() {
    let dir = tempfile::tempdir().unwrap();
    let (piece, declared) = setup(dir.path());
    let disk = Disk::open(dir.path(), &piece);
    for k in 1..=ROUNDS {
        run_crashing(dir.path(), offset_for(declared, k, 1_000), "after-wave");
        assert_eq!(disk.count(), k, "round {k}: delivered before the kill");
        assert!(!disk.undelivered(), "round {k}: and not pending again");
        std::thread::sleep(Duration::from_millis(350));
    }
    // A healthy host afterwards re-delivers nothing.
    run_until(
        dir.path(),
        offset_for(declared, ROUNDS, 2_000),
        "a quiet restart",
        || true,
    );
    check_exactly_once(&disk, ROUNDS);
}

#[test]
fn a_callback_that_always_kills_its_wave_is_dead_lettered_not_looped() {
    let dir = tempfile::tempdir().unwrap();
    let (piece, declared) = setup(dir.path());
    let disk = Disk::open(dir.path(), &piece);
    let at = |m: u64| offset_for(declared, 1, m);
    // Attempt 1 (the fire) dies; each restart marks the failure and plans the
    // next retry (1, 5, 30 minutes); each retry dies again.
    let mut minute = 1;
    let mut restarts = 0;
    for backoff in [1u64, 5, 30] {
        run_crashing(dir.path(), at(minute * MIN), "mid-wave");
        let planned_at = minute + 1;
        run_until(dir.path(), at(planned_at * MIN), "failure noticed", || {
            disk.row().retry_due_ms().is_some()
        });
        restarts += 2;
        minute = planned_at + backoff + 1;
    }
    run_crashing(dir.path(), at(minute * MIN), "mid-wave");
    run_until(dir.path(), at((minute + 1) * MIN), "dead-lettered", || {
        disk.row().retry_due_ms().is_none() && !disk.undelivered()
    });
    restarts += 2;
    assert_eq!(
        restarts, 8,
        "four attempts, each costing one crash and one restart"
    );
    assert_eq!(disk.count(), 0);
    let fires = disk
        .store
        .open_space("s")
        .unwrap()
        .fires(&piece, 0, FIRE_HISTORY)
        .unwrap();
    let outcomes: Vec<&str> = fires.iter().map(|f| f.outcome.as_str()).collect();
    assert_eq!(
        outcomes.iter().filter(|o| **o == "failed").count(),
        3,
        "{outcomes:?}"
    );
    assert_eq!(outcomes.last(), Some(&"deadLettered"), "{outcomes:?}");
    // The cadence goes on: the next period is still planned.
    assert_eq!(disk.row().status, spacewake::store::ScheduleStatus::Active);
}

/// A one-off entry whose callback moves its own field an hour on: each
/// round is one armed time, fired once.
const ONE_OFF: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";
const ring = handler<{ setFor: number }, { count: Cell<number>; periods: Cell<number[]>; next: Cell<number | null> }>(
  (ev, { count, periods, next }) => {
    count.set(count.get() + 1);
    periods.push(ev.setFor);
    next.set(ev.setFor + 3600000);
  },
);
export default pattern<{ count: Default<number, 0>; periods: Default<number[], []>; next: Default<number | null, null> }>(
  ({ count, periods, next }) => ({
    [SCHEDULE]: [{ at: next, callback: ring({ count, periods, next }) }],
    count,
    periods,
    next,
  }),
);
"#;

const ONE_OFF_ROUNDS: u64 = 10;

#[test]
fn a_one_off_wake_killed_right_after_the_write_first_transaction_is_delivered_once() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(
        StoreConfig::new(dir.path()),
        Arc::new(SystemClock),
        Counters::new(),
    )
    .unwrap();
    let host = Host::new(
        store,
        HostConfig {
            idle_park_ms: 10,
            ..HostConfig::default()
        },
    );
    let first = (SystemClock.now_ms() + 60 * MIN) / 1000 * 1000;
    host.store().create_space("s", "did:key:owner").unwrap();
    let piece = host
        .deploy_file_blocking("s", "p.tsx", ONE_OFF, serde_json::json!({ "next": first }))
        .unwrap();
    let t = Instant::now();
    while !host.active_spaces().is_empty() {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(host);
    let disk = Disk::open(dir.path(), &piece);
    assert_eq!(disk.row().next_due_ms, first);
    let offset = |k: u64, after: u64| {
        (first + (k - 1) * 60 * MIN + after).saturating_sub(SystemClock.now_ms())
    };
    for k in 1..=ONE_OFF_ROUNDS {
        let set_for = first + (k - 1) * 60 * MIN;
        run_crashing(dir.path(), offset(k, 1_000), "after-fire");
        assert!(disk.undelivered(), "round {k}: the wake was written first");
        let row = disk.row();
        assert_eq!(row.next_wake_ms(), None, "round {k}: fired, waiting");
        assert_eq!(row.nominal_period, set_for, "round {k}");
        assert_eq!(disk.count(), k - 1, "round {k}: not yet delivered");
        std::thread::sleep(Duration::from_millis(350));
        run_until(
            dir.path(),
            offset(k, 3_000),
            "delivery after restart",
            || disk.count() == k && !disk.undelivered(),
        );
        // The callback moved the field: the next hour is armed.
        assert_eq!(disk.row().next_due_ms, set_for + 60 * MIN, "round {k}");
    }
    assert_eq!(
        recorded_periods(&disk),
        (0..ONE_OFF_ROUNDS)
            .map(|i| first + i * 60 * MIN)
            .collect::<Vec<_>>(),
        "each time once, in order"
    );
    assert_eq!(disk.wake_events().len() as u64, ONE_OFF_ROUNDS);
}
