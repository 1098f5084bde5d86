//! No event can wedge a space: an event whose wave fails its tenure is
//! retried alone, with back-off, then dead-lettered, and the space serves
//! again; an event id derived from a long client id stays within bounds.
//! A real host, store and engine on a manual clock.

mod common;

use serde_json::{json, Value};
use spacewake::clock::ManualClock;
use spacewake::host::{Host, HostConfig, Trigger};
use spacewake::metrics::{Counter, Counters};
use spacewake::store::path::parse_dotted;
use spacewake::store::{Author, Store, StoreConfig};
use std::sync::Arc;

const COUNTER: &str = r#"
import { pattern, handler, Cell, Default } from "commonfabric";
const add = handler<{}, { count: Cell<number> }>((_ev, { count }) => {
  count.set(count.get() + 1);
});
export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  count,
  add: add({ count }),
}));
"#;

fn host_refusing(dir: &std::path::Path, clock: Arc<ManualClock>, poison: &str) -> Host {
    let mut cfg = StoreConfig::new(dir);
    cfg.refuse_delivering = Some(poison.to_string());
    let store = Store::open(cfg, clock, Counters::new()).unwrap();
    let host = Host::new(
        store,
        HostConfig {
            idle_park_ms: 10,
            ..Default::default()
        },
    );
    host.start_waker();
    host
}

fn send(
    host: &Host,
    piece: &str,
    id: &str,
) -> Result<spacewake::host::Appended, spacewake::host::HostError> {
    host.ask_blocking(
        "s",
        Trigger::Session,
        spacewake::host::SendEvent {
            author: Author::principal("did:key:owner"),
            piece: piece.to_string(),
            path: parse_dotted("add"),
            event_id: Some(id.to_string()),
            payload: json!({}),
        },
    )
}

fn count(host: &Host, piece: &str) -> Value {
    host.ask_blocking(
        "s",
        Trigger::Session,
        spacewake::host::Read {
            piece: Some(piece.to_string()),
            doc: None,
            path: parse_dotted("count"),
        },
    )
    .unwrap()
    .value
}

#[test]
fn a_poison_event_is_retried_alone_then_dead_lettered_and_the_space_serves_again() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let host = host_refusing(dir.path(), clock.clone(), "poison");
    let piece = common::deploy_source(&host, "s", COUNTER);
    send(&host, &piece, "a").unwrap();
    common::wait("a delivered", || count(&host, &piece) == json!(1));

    // The poison's wave fails its tenure: the space backs off, then is
    // retried by itself, the poison alone, with a longer back-off each time.
    send(&host, &piece, "poison").unwrap();
    let c = host.counters();
    let retries = |n: i64| {
        common::wait(&format!("{n} tenure retries"), || {
            c.space_value("s", Counter::TenureRetries) == n && common::settled(&host, "s")
        })
    };
    retries(1);
    assert_eq!(c.space_value("s", Counter::EventsInFailedWaves), 1);
    // While it backs off, a session is told so (and for how long).
    match send(&host, &piece, "b") {
        Err(spacewake::host::HostError::BackingOff { retry_in_ms, .. }) => {
            assert_eq!(retry_in_ms, 1_000)
        }
        other => panic!("{other:?}"),
    }
    clock.advance_ms(1_000);
    retries(2);
    common::jump_and_let_the_waker_look(
        &host,
        &clock,
        spacewake::clock::Clock::now_ms(&*clock) + 1_999,
    );
    assert_eq!(
        c.space_value("s", Counter::TenureRetries),
        2,
        "backs off 2 s"
    );
    clock.advance_ms(1);
    retries(3);
    assert_eq!(c.space_value("s", Counter::EventsInFailedWaves), 3);
    clock.advance_ms(4_000);
    common::wait("dead-lettered", || {
        c.space_value("s", Counter::EventsDeadLettered) == 1
    });

    // The space serves again, at once.
    send(&host, &piece, "b").unwrap();
    common::wait("b delivered", || count(&host, &piece) == json!(2));
    assert_eq!(c.space_value("s", Counter::TenureRetries), 3);

    // On disk: the dead letter with its attempts and error, no failure left.
    host.shutdown();
    drop(host);
    let store = Store::open(StoreConfig::new(dir.path()), clock, Counters::new()).unwrap();
    let mut space = store.open_space("s").unwrap();
    let dead = space.dead_letters().unwrap();
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].event_id, "poison");
    assert_eq!(dead[0].attempts, 3);
    assert!(dead[0].error.contains("injected"), "{}", dead[0].error);
    assert!(space.event_failures().unwrap().is_empty());
    assert!(!space.has_undelivered().unwrap());
    drop(space);
    drop(store);

    // Operators see it.
    let out = common::server::spacewake()
        .args(["events", "dead-letters", "--space", "s", "--data"])
        .arg(dir.path())
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("poison"), "{text}");
    assert!(text.contains("injected"), "{text}");
}

#[test]
fn an_event_in_a_failed_wave_with_a_poison_is_delivered_on_its_own_retry() {
    // Events behind the poison in the same failed wave are not punished:
    // each runs alone on the next tenure and is delivered.
    let t = common::store_with(|cfg| cfg.refuse_delivering = Some("poison".into()));
    let mut rt = t.runtime("s");
    let mut src = spacewake::compiler::MemorySource::new();
    src.insert("p.tsx", COUNTER);
    let program = spacewake::compiler::compile("p.tsx", &src).unwrap();
    let piece = rt.create_piece(&program, None, &json!({})).unwrap();
    rt.flush().unwrap();
    let owner = Author::principal("did:key:owner");
    for id in ["poison", "next"] {
        rt.send(&piece, &parse_dotted("add"), id, json!({}), &owner)
            .unwrap();
    }
    assert!(rt.run_wave().is_err());
    assert_eq!(rt.failed_wave_attempts(), 1);
    drop(rt);
    let mut rt = t.runtime("s");
    for attempt in 2..=3 {
        // The poison first, alone: it fails again.
        assert!(rt.run_wave().is_err(), "attempt {attempt}");
        drop(rt);
        rt = t.runtime("s");
    }
    let r = rt.run_wave().unwrap();
    assert_eq!(r.dead_lettered, vec!["poison".to_string()]);
    assert_eq!(r.events, 1);
    let r = rt.run_wave().unwrap();
    assert_eq!(r.delivered, vec!["next".to_string()]);
    assert_eq!(rt.read(&piece, &parse_dotted("count")).unwrap(), json!(1));
    assert_eq!(t.counters.host().get(Counter::EventsDeadLettered), 1);
}

#[test]
fn a_child_of_a_long_event_id_stays_within_the_limit() {
    // The fixture forwards with send(); a legal 510-character client id
    // used to make a 517-character child id and an invalid commit.
    let t = common::store();
    let mut rt = t.runtime("s");
    let path =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/stream-send.tsx");
    let program = spacewake::check::compile_file(&path).unwrap();
    let piece = rt.create_piece(&program, None, &json!({})).unwrap();
    rt.flush().unwrap();
    let long = "e".repeat(510);
    rt.send(
        &piece,
        &parse_dotted("addMany"),
        &long,
        json!({"times": 3, "by": 2}),
        &Author::principal("did:key:owner"),
    )
    .unwrap();
    let reports = rt.settle(4).unwrap();
    assert!(reports.iter().all(|r| r.failures.is_empty()), "{reports:?}");
    assert_eq!(rt.read(&piece, &parse_dotted("count")).unwrap(), json!(6));
    let child = spacewake::runtime::derived_event_id(&long, "send", 2);
    assert!(child.chars().count() <= 512, "{child}");
    assert_eq!(
        child,
        spacewake::runtime::derived_event_id(&long, "send", 2)
    );
    assert!(rt.space().event(&child).unwrap().is_some());
    // Short parents keep the readable form.
    assert_eq!(
        spacewake::runtime::derived_event_id("e1", "send", 0),
        "e1/send/0"
    );
}

#[test]
fn an_event_whose_waves_keep_losing_the_lease_is_dead_lettered() {
    // Each time the event's wave runs, another host has taken the space
    // meanwhile (and given it back): the wave's commit is refused. After
    // three such waves the event is dead-lettered and the next one served.
    let t = common::store();
    let other = t.reopen_with(|c| c.holder = Some("host-b/1".into()));
    let mut src = spacewake::compiler::MemorySource::new();
    src.insert("p.tsx", COUNTER);
    let program = spacewake::compiler::compile("p.tsx", &src).unwrap();
    let mut rt = t.runtime("s");
    let piece = rt.create_piece(&program, None, &json!({})).unwrap();
    rt.flush().unwrap();
    let owner = Author::principal("did:key:owner");
    rt.send(&piece, &parse_dotted("add"), "unlucky", json!({}), &owner)
        .unwrap();
    let ttl = t.store.config().lease_ttl_ms;
    for attempt in 1..=3 {
        t.clock.advance_ms(ttl + 1);
        let mut b = other.open_space("s").unwrap();
        let lease = b.acquire_lease().unwrap().expect("expired: taken over");
        b.release_lease(&lease).unwrap();
        let err = rt.run_wave().unwrap_err();
        assert!(
            matches!(err, spacewake::runtime::RuntimeError::LeaseLost),
            "attempt {attempt}: {err}"
        );
        assert_eq!(rt.failed_wave_attempts(), attempt);
        drop(rt);
        rt = t.runtime("s");
    }
    rt.send(&piece, &parse_dotted("add"), "next", json!({}), &owner)
        .unwrap();
    let r = rt.run_wave().unwrap();
    assert_eq!(r.dead_lettered, vec!["unlucky".to_string()]);
    let r = rt.run_wave().unwrap();
    assert_eq!(r.delivered, vec!["next".to_string()]);
    assert_eq!(rt.read(&piece, &parse_dotted("count")).unwrap(), json!(1));
    let dead = rt.space().dead_letters().unwrap();
    assert!(dead[0].error.contains("lease"), "{}", dead[0].error);
}

#[test]
fn a_handler_the_cpu_time_safety_net_keeps_stopping_is_dead_lettered_and_the_space_serves_on() {
    // The CPU-time net fails the wave (a stalled host is no verdict on the
    // event), so a handler it stops every time is retried alone, then
    // dead-lettered like any event whose waves keep failing.
    let t = common::store();
    let cfg = || {
        let mut cfg = spacewake::runtime::RuntimeConfig {
            action_budget: Some(u64::MAX / 2),
            ..Default::default()
        };
        cfg.sandbox.cpu_limit = Some(std::time::Duration::from_millis(100));
        cfg
    };
    let mut rt = t.runtime_with("s", cfg());
    let src = r#"
import { pattern, handler, Cell, Default } from "commonfabric";
const spin = handler<{}, { count: Cell<number> }>((_ev, { count }) => {
  count.set(-1);
  while (true) {}
});
const add = handler<{}, { count: Cell<number> }>((_ev, { count }) => {
  count.set(count.get() + 1);
});
export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  count, spin: spin({ count }), add: add({ count }),
}));
"#;
    let mut m = spacewake::compiler::MemorySource::new();
    m.insert("p.tsx", src);
    let program = spacewake::compiler::compile("p.tsx", &m).unwrap();
    let piece = rt.create_piece(&program, None, &json!({})).unwrap();
    rt.flush().unwrap();
    let owner = Author::principal("did:key:owner");
    rt.send(&piece, &parse_dotted("spin"), "spin", json!({}), &owner)
        .unwrap();
    rt.send(&piece, &parse_dotted("add"), "add", json!({}), &owner)
        .unwrap();
    for attempt in 1..=spacewake::runtime::MAX_EVENT_ATTEMPTS {
        let started = std::time::Instant::now();
        let err = rt.run_wave().unwrap_err();
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(err.to_string().contains("CPU-time"), "{err}");
        assert_eq!(rt.failed_wave_attempts(), attempt);
        drop(rt);
        rt = t.runtime_with("s", cfg());
    }
    let r = rt.run_wave().unwrap();
    assert_eq!(r.dead_lettered, vec!["spin".to_string()]);
    let r = rt.run_wave().unwrap();
    assert_eq!(r.delivered, vec!["add".to_string()]);
    assert_eq!(rt.read(&piece, &parse_dotted("count")).unwrap(), json!(1));
    let c = t.counters.host();
    assert_eq!(
        c.get(Counter::ActionsPreempted),
        spacewake::runtime::MAX_EVENT_ATTEMPTS as i64
    );
    let dead = rt.space().dead_letters().unwrap();
    assert!(dead[0].error.contains("CPU-time"), "{}", dead[0].error);
}

#[test]
fn a_long_wave_keeps_its_lease_while_another_host_waits_for_it() {
    // Real time: a 0.6 s lease renewed every 0.2 s, and a handler that
    // computes for longer than that. The keeper renews the lease from its
    // own thread, so another host trying all along never gets the space.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = StoreConfig::new(dir.path());
    cfg.lease_ttl_ms = 600;
    cfg.lease_renew_ms = 200;
    let clock: Arc<dyn spacewake::clock::Clock> = Arc::new(spacewake::clock::SystemClock);
    let store = Store::open(cfg, clock.clone(), Counters::new()).unwrap();
    let mut host_cfg = HostConfig {
        idle_park_ms: 10,
        ..Default::default()
    };
    host_cfg.runtime.action_budget = Some(u64::MAX / 2);
    host_cfg.runtime.sandbox.cpu_limit = Some(std::time::Duration::from_secs(20));
    let host = Host::new(store, host_cfg);
    let src = r#"
import { pattern, handler, Cell, Default } from "commonfabric";
const crunch = handler<{ n: number }, { count: Cell<number> }>((ev, { count }) => {
  let x = 0;
  for (let i = 0; i < ev.n; i++) x = (x + i) % 1000003;
  count.set(count.get() + 1 + (x < 0 ? 1 : 0));
});
export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  count, crunch: crunch({ count }),
}));
"#;
    let piece = common::deploy_source(&host, "s", src);
    let mut other_cfg = StoreConfig::new(dir.path());
    other_cfg.holder = Some("host-b/1".into());
    other_cfg.lease_ttl_ms = 600;
    let other = Store::open(other_cfg, clock, Counters::new()).unwrap();
    let started = std::time::Instant::now();
    host.notify(
        "s",
        Trigger::Session,
        spacewake::host::SendEvent {
            author: Author::principal("did:key:owner"),
            piece: piece.clone(),
            path: parse_dotted("crunch"),
            event_id: Some("long".into()),
            payload: json!({"n": 120_000_000}),
        },
    )
    .unwrap();
    // The other host tries every 50 ms, on a thread of its own (a read on
    // this host waits for the wave).
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let contender = {
        let done = done.clone();
        std::thread::spawn(move || {
            let (mut tries, mut took) = (0u32, None);
            while !done.load(std::sync::atomic::Ordering::SeqCst) {
                let mut b = other.open_space("s").unwrap();
                if b.acquire_lease().unwrap().is_some() {
                    took = Some(started.elapsed());
                    break;
                }
                tries += 1;
                std::thread::sleep(std::time::Duration::from_millis(50));
            }
            (tries, took)
        })
    };
    common::wait("the long event delivered", || {
        count(&host, &piece) == json!(1)
    });
    let took = started.elapsed();
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let (tries, taken) = contender.join().unwrap();
    assert_eq!(taken, None, "another host took the space during the wave");
    assert!(
        took > std::time::Duration::from_millis(1_200),
        "the wave took {took:?}, not long enough to outlive its lease: raise n"
    );
    assert!(tries > 10, "{tries} tries");
    assert!(
        host.counters()
            .space_value("s", Counter::LeaseRenewedByKeeper)
            >= 1
    );
}
