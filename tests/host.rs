//! The serving loop in-process: activation by trigger, demand from tracked
//! paths and warm requests, updates in seq order, parking, boot discovery.

mod common;

use serde_json::json;
use spacewake::clock::SystemClock;
use spacewake::host::{Host, HostConfig, Request, Trigger, Update};
use spacewake::metrics::{Counter, Counters};
use spacewake::store::path::parse_dotted;
use spacewake::store::{Author, Store, StoreConfig};
use std::sync::Arc;
use std::time::{Duration, Instant};

const LAZY: &str = include_str!("../fixtures/runtime/lazy.tsx");

fn host_on(dir: &std::path::Path, idle_ms: u64) -> Host {
    host_with(
        dir,
        HostConfig {
            idle_park_ms: idle_ms,
            ..HostConfig::default()
        },
    )
}

fn host_with(dir: &std::path::Path, cfg: HostConfig) -> Host {
    let store = Store::open(
        StoreConfig::new(dir),
        Arc::new(SystemClock),
        Counters::new(),
    )
    .unwrap();
    Host::new(store, cfg)
}

fn deploy(host: &Host, space: &str) -> String {
    host.deploy_file_blocking(space, "lazy.tsx", LAZY, json!({"value": 1}))
        .unwrap()
}

/// Waits until the space has parked (its park is counted after the lease is
/// released and the runtime dropped).
fn parked(host: &Host, space: &str, times: i64) {
    wait_until("park", || {
        host.counters().space_value(space, Counter::Parks) >= times
    });
}

fn wait_until(what: &str, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn recv(rx: &mut tokio::sync::mpsc::UnboundedReceiver<Update>) -> Update {
    let t = Instant::now();
    loop {
        if let Ok(u) = rx.try_recv() {
            return u;
        }
        assert!(t.elapsed() < Duration::from_secs(10), "no update");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Appends an event to the piece's `bump` stream straight into the store,
/// with no host running: an event acknowledged just before a crash.
fn accept_while_down(dir: &std::path::Path, space: &str, piece: &str, event_id: &str) {
    common::append_while_down(dir, space, piece, "bump", event_id, json!({"by": 5}));
}

/// Session `session` tracks `path` of `piece` in `space`.
fn track(host: &Host, space: &str, session: u64, piece: &str, path: &str) {
    host.ask_blocking(
        space,
        Trigger::Session,
        Request::Track {
            session,
            piece: piece.to_string(),
            path: parse_dotted(path),
            since: None,
        },
    )
    .unwrap();
}

/// Sends `{}` to the piece's `bump` stream as its owner, from a session.
fn bump(host: &Host, space: &str, piece: &str, event_id: String) -> spacewake::host::Appended {
    host.ask_blocking(
        space,
        Trigger::Session,
        spacewake::host::SendEvent {
            author: Author::principal("did:key:owner"),
            piece: piece.to_string(),
            path: parse_dotted("bump"),
            event_id: Some(event_id),
            payload: json!({}),
        },
    )
    .unwrap()
}

#[test]
fn tracked_values_are_pushed_in_seq_order_and_the_space_parks_when_left() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_on(dir.path(), 50);
    host.store().create_space("s", "did:key:owner").unwrap();
    let piece = deploy(&host, "s");
    let mut rx = common::attach(&host, "s", 1);
    track(&host, "s", 1, &piece, "doubled");
    let first = recv(&mut rx);
    assert_eq!(first.value, json!(2));
    let mut last_seq = first.seq;
    for i in 0..5 {
        let r = bump(&host, "s", &piece, format!("e{i}"));
        assert!(!r.duplicate);
        let u = recv(&mut rx);
        assert!(u.seq > last_seq, "updates in seq order");
        last_seq = u.seq;
        assert_eq!(u.value, json!(2 * (i + 2)));
    }
    let c = host.counters();
    assert_eq!(c.space_value("s", Counter::ActivationsSession), 1);
    // The [UI] derivation was never demanded, so it never ran.
    assert_eq!(c.space_value("s", Counter::DerivationRuns), 6);
    assert_eq!(c.space_value("s", Counter::DemandedInstances), 1);

    host.ask_blocking("s", Trigger::Session, Request::Detach { session: 1 })
        .unwrap();
    wait_until("park", || c.space_value("s", Counter::Parks) == 1);
    assert!(host.active_spaces().is_empty());
    assert_eq!(c.space_value("s", Counter::ActiveSpaces), 0);
    assert_eq!(c.space_value("s", Counter::DemandedInstances), 0);
    assert!(host
        .store()
        .directory()
        .get("s")
        .unwrap()
        .unwrap()
        .next_wake_ms
        .is_none());
}

#[test]
fn an_event_for_a_parked_space_activates_it_and_is_processed() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_on(dir.path(), 20);
    host.store().create_space("s", "did:key:owner").unwrap();
    let piece = deploy(&host, "s");
    parked(&host, "s", 1);
    host.ask_blocking(
        "s",
        Trigger::Events,
        spacewake::host::SendEvent {
            author: Author::principal("did:key:webhook"),
            piece: piece.clone(),
            path: parse_dotted("bump"),
            event_id: Some("hook-1".into()),
            payload: json!({"by": 10}),
        },
    )
    .unwrap();
    parked(&host, "s", 2);
    let c = host.counters();
    assert_eq!(c.space_value("s", Counter::ActivationsEvents), 1);
    assert_eq!(c.space_value("s", Counter::EventsProcessed), 1);
    let read = host
        .ask_blocking(
            "s",
            Trigger::Session,
            spacewake::host::Read {
                piece: Some(piece),
                doc: None,
                path: parse_dotted("value"),
            },
        )
        .unwrap();
    assert_eq!(read.value, json!(11));
}

#[test]
fn a_warm_request_runs_only_the_warmed_instance_and_not_its_display() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_on(dir.path(), 20);
    host.store().create_space("s", "did:key:owner").unwrap();
    let a = deploy(&host, "s");
    let _b = deploy(&host, "s");
    parked(&host, "s", 1);
    let c = host.counters();
    assert_eq!(c.space_value("s", Counter::DerivationRuns), 0);
    host.ask_blocking("s", Trigger::Warm, Request::Warm { pieces: vec![a] })
        .unwrap();
    parked(&host, "s", 2);
    assert_eq!(c.space_value("s", Counter::ActivationsWarm), 1);
    // Piece a's `doubled` ran; its [UI] label and all of piece b did not.
    assert_eq!(c.space_value("s", Counter::DerivationRuns), 1);
}

#[test]
fn boot_discovery_delivers_events_accepted_before_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let piece;
    {
        let host = host_on(dir.path(), 20);
        host.store().create_space("s", "did:key:owner").unwrap();
        piece = deploy(&host, "s");
        parked(&host, "s", 1);
    }
    // Accepted into the store while no host runs the space (as if the host
    // had crashed right after acknowledging it).
    accept_while_down(dir.path(), "s", &piece, "before-crash");
    let host = host_on(dir.path(), 20);
    assert_eq!(host.boot().unwrap(), 1);
    parked(&host, "s", 1);
    let c = host.counters();
    assert_eq!(c.space_value("s", Counter::BootDiscovered), 1);
    assert_eq!(c.space_value("s", Counter::EventsProcessed), 1);
    assert!(
        !host
            .store()
            .directory()
            .get("s")
            .unwrap()
            .unwrap()
            .undelivered
    );
}

#[test]
fn the_start_up_check_runs_a_scratch_tenure_and_refuses_impossible_limits() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_on(dir.path(), 30_000);
    host.check_start()
        .expect("the default limits build a sandbox and run a tenure");
    // The scratch store is gone and the real one never saw it: no space,
    // no activation, no park in the operator's counters.
    let left: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".startup-check"))
        .collect();
    assert!(left.is_empty(), "scratch left behind: {left:?}");
    assert!(host.store().directory().list(None, 10).unwrap().is_empty());
    let c = host.counters().host();
    for counter in [
        Counter::ActivationsSession,
        Counter::ActivationsEvents,
        Counter::Parks,
        Counter::Waves,
    ] {
        assert_eq!(c.get(counter), 0, "{counter:?}");
    }

    // A heap limit too small for the authoring API: the check fails with
    // the engine's reason, where every activation would otherwise fail.
    let mut cfg = HostConfig::default();
    cfg.runtime.sandbox.memory_limit_bytes = 64 * 1024;
    let err = host_with(&dir.path().join("tiny"), cfg)
        .check_start()
        .unwrap_err();
    assert_eq!(err.to_string(), "out of memory (runtime limit 65536 bytes)");
}

/// A space with a session checkpoints its WAL when it goes quiet (50 ms
/// after its last wave) or every 256 waves while busy — not after every
/// wave, which put two fsyncs in each wave's path.
#[test]
fn a_busy_space_checkpoints_when_quiet_or_every_256_waves_not_per_wave() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_on(dir.path(), 30_000);
    host.store().create_space("s", "did:key:owner").unwrap();
    let piece = deploy(&host, "s");
    let mut rx = common::attach(&host, "s", 1);
    track(&host, "s", 1, &piece, "doubled");
    recv(&mut rx);
    let c = host.counters();
    // Quiet after the deploy's waves: one checkpoint, then none while idle.
    wait_until("the first quiet checkpoint", || {
        c.space_value("s", Counter::WalCheckpoints) >= 1
    });
    std::thread::sleep(Duration::from_millis(200));
    let before = c.space_value("s", Counter::WalCheckpoints);
    assert_eq!(before, 1, "an idle space checkpoints once, not repeatedly");

    let waves_before = c.space_value("s", Counter::Waves);
    for i in 0..600 {
        bump(&host, "s", &piece, format!("e{i}"));
        // Each send's wave is done before the next is sent.
        recv(&mut rx);
    }
    let during = c.space_value("s", Counter::WalCheckpoints) - before;
    let waves = c.space_value("s", Counter::Waves) - waves_before;
    assert!(waves >= 300, "{waves} waves for 600 sends");
    // A back-to-back burst is never quiet for 50 ms (short of a stalled
    // machine), so its checkpoints are the 256-wave ones: not one per wave.
    assert!(
        during <= waves / 16,
        "{during} checkpoints during {waves} busy waves"
    );
    // ...and never fewer than one per 256 waves.
    assert!(
        during >= waves / 256,
        "{during} checkpoints during {waves} busy waves"
    );
    // Then quiet again: the last waves get their checkpoint.
    wait_until("the checkpoint after the burst", || {
        c.space_value("s", Counter::WalCheckpoints) > before + during
    });
    assert_eq!(
        c.host().get(Counter::WalCheckpoints),
        c.space_value("s", Counter::WalCheckpoints)
    );
}

/// A space holding an idle session past its park time waits quietly: its
/// loop wakes for commands and timers only. (Until session 6 the past park
/// time became a zero wait, and such a space spun on a core.)
#[test]
fn an_idle_session_past_the_park_time_does_not_make_its_space_spin() {
    let dir = tempfile::tempdir().unwrap();
    let host = host_on(dir.path(), 20);
    host.store().create_space("s", "did:key:owner").unwrap();
    deploy(&host, "s");
    let _rx = common::attach(&host, "s", 1);
    let c = host.counters();
    // Past the park time (20 ms) and the first quiet checkpoint (50 ms).
    std::thread::sleep(Duration::from_millis(200));
    let before = c.space_value("s", Counter::ServerWakeups);
    std::thread::sleep(Duration::from_millis(500));
    let woke = c.space_value("s", Counter::ServerWakeups) - before;
    assert!(woke <= 2, "an idle space woke {woke} times in 500 ms");
    assert_eq!(
        host.active_spaces(),
        vec!["s".to_string()],
        "held by its session"
    );
    assert_eq!(c.space_value("s", Counter::Parks), 0);
}

/// Past `max_active_spaces`, a request that would activate another space is
/// refused as unavailable (the client retries), while boot discovery's wakes
/// wait for a slot: every space with undelivered events is still delivered.
#[test]
fn past_its_limit_of_active_spaces_the_host_refuses_requests_and_queues_boot_wakes() {
    let dir = tempfile::tempdir().unwrap();
    let spaces = ["s0", "s1", "s2", "s3"];
    let mut pieces = Vec::new();
    {
        let host = host_on(dir.path(), 20);
        for s in spaces {
            host.store().create_space(s, "did:key:owner").unwrap();
            pieces.push(deploy(&host, s));
            parked(&host, s, 1);
        }
    }
    // Events accepted while no host ran (as if it crashed after the acks).
    for (s, piece) in spaces.iter().zip(&pieces) {
        accept_while_down(dir.path(), s, piece, &format!("before-crash-{s}"));
    }
    let host = host_with(
        dir.path(),
        HostConfig {
            idle_park_ms: 20,
            max_active_spaces: 1,
            ..HostConfig::default()
        },
    );
    // A session holds the only slot.
    let _rx = common::attach(&host, "s0", 1);
    let refused = host
        .ask_blocking(
            "s1",
            Trigger::Session,
            spacewake::host::Attach {
                session: 2,
                sink: tokio::sync::mpsc::unbounded_channel().0,
            },
        )
        .unwrap_err();
    assert!(
        refused.to_string().contains("limit of 1 active spaces"),
        "{refused}"
    );
    let c = host.counters();
    assert_eq!(
        c.space_value("s1", Counter::ActivationsRefusedAtCapacity),
        1
    );

    // s0's own event is delivered by its session's tenure; boot then
    // finds the other three, and they wait for the slot.
    wait_until("s0's event delivered and settled", || {
        c.space_value("s0", Counter::EventsProcessed) == 1
            && !host
                .store()
                .directory()
                .get("s0")
                .unwrap()
                .unwrap()
                .undelivered
    });
    assert_eq!(host.boot().unwrap(), 3);
    assert_eq!(host.active_spaces(), vec!["s0".to_string()]);
    assert_eq!(c.host().get(Counter::ActivationsQueued), 3);
    // The session leaves: each parked space frees the slot for the next.
    host.ask_blocking("s0", Trigger::Session, Request::Detach { session: 1 })
        .unwrap();
    for s in spaces {
        wait_until("every event delivered", || {
            c.space_value(s, Counter::EventsProcessed) == 1 && c.space_value(s, Counter::Parks) >= 1
        });
    }
    wait_until("all parked", || host.active_spaces().is_empty());
    assert_eq!(c.host().get(Counter::ActivationsBoot), 3);
}

/// Boot discovery refused by another host's live lease is retried at that
/// lease's expiry on the host's clock, with nothing polling meanwhile: on
/// a manual clock, nothing happens until the clock gets there.
#[test]
fn an_activation_refused_by_a_foreign_lease_is_retried_at_its_expiry_on_the_host_clock() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(spacewake::clock::ManualClock::default());
    let piece;
    {
        let host = common::manual_host(dir.path(), clock.clone(), |_| {});
        host.store().create_space("s", "did:key:owner").unwrap();
        piece = deploy(&host, "s");
        common::park(&host, &clock, "s");
        host.shutdown();
    }
    accept_while_down(dir.path(), "s", &piece, "before-crash");
    use spacewake::clock::Clock;
    let expires = clock.now_ms() + 600_000;
    let db = rusqlite::Connection::open(dir.path().join("spaces/s.sqlite")).unwrap();
    db.execute(
        "UPDATE execution_lease SET holder = 'host-other/1', expires_at_ms = ?1",
        [expires as i64],
    )
    .unwrap();

    let host = common::manual_host(dir.path(), clock.clone(), |_| {});
    assert_eq!(host.boot().unwrap(), 1);
    let c = host.counters().clone();
    wait_until("the refusal", || {
        c.space_value("s", Counter::ActivationFailures) == 1
    });
    assert_eq!(c.space_value("s", Counter::LeaseRefused), 1);
    // A millisecond short of the expiry, once the waker has looked:
    // nothing was retried.
    common::jump_and_let_the_waker_look(&host, &clock, expires - 1);
    assert_eq!(c.space_value("s", Counter::EventsProcessed), 0);
    assert_eq!(c.space_value("s", Counter::ActivationRetriedAfterLease), 0);
    assert_eq!(
        c.space_value("s", Counter::ActivationFailures),
        1,
        "no polling"
    );
    clock.advance_ms(1);
    wait_until("the retried delivery", || {
        c.space_value("s", Counter::EventsProcessed) == 1
    });
    assert_eq!(c.space_value("s", Counter::ActivationRetriedAfterLease), 1);
    assert_eq!(c.space_value("s", Counter::LeaseTakenOver), 1);
    host.shutdown();
}

/// The park timer runs on the host clock: on a manual clock a space nobody
/// holds stays active, however much real time passes, until the clock
/// reaches its park time; each jump wakes the server to look (counted),
/// without counting as activity that would postpone the park.
#[test]
fn on_a_manual_clock_a_space_parks_when_the_clock_reaches_its_idle_time() {
    use spacewake::clock::Clock;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(spacewake::clock::ManualClock::default());
    let host = common::manual_host(dir.path(), clock.clone(), |c| c.idle_park_ms = 30_000);
    host.store().create_space("s", "did:key:owner").unwrap();
    deploy(&host, "s");
    let c = host.counters().clone();
    let wakeups = || c.space_value("s", Counter::ServerWakeups);
    let start = clock.now_ms();
    for step in [10_000, 20_000, 29_000] {
        let before = wakeups();
        clock.set_ms(start + step);
        wait_until("the server looked at its timers", || wakeups() > before);
        assert_eq!(host.active_spaces(), vec!["s".to_string()], "+{step} ms");
    }
    assert_eq!(c.space_value("s", Counter::Parks), 0);
    // The deploy's last activity was at `start` (or within the wave right
    // after): its park time is 30 s on from there.
    clock.set_ms(start + 30_000);
    parked(&host, "s", 1);
    assert!(host.active_spaces().is_empty());
}

/// `wish("#now/60")` on the host clock: a session tracking it gets the new
/// minute when the clock passes a boundary; once nobody demands it, the
/// boundaries it passes run nothing and the space parks at its idle time,
/// exactly as without it.
#[test]
fn a_now_clock_ticks_for_a_tracking_session_and_never_keeps_its_space_awake() {
    use spacewake::clock::Clock;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(spacewake::clock::ManualClock::default());
    let host = common::manual_host(dir.path(), clock.clone(), |c| c.idle_park_ms = 90_000);
    host.store().create_space("s", "did:key:owner").unwrap();
    let piece = host
        .deploy_file_blocking(
            "s",
            "wish-now.tsx",
            include_str!("../fixtures/patterns/wish-now.tsx"),
            json!({}),
        )
        .unwrap();
    let c = host.counters().clone();
    let start = clock.now_ms() / 60_000 * 60_000;
    let mut rx = common::attach(&host, "s", 1);
    track(&host, "s", 1, &piece, "minute");
    assert_eq!(recv(&mut rx).value, json!(start));
    track(&host, "s", 1, &piece, "minutesSinceLoad");
    assert_eq!(recv(&mut rx).value, json!(0));

    // A boundary passes: both tracked values move, with no event sent.
    clock.set_ms(start + 60_000);
    let (mut minute, mut since) = (None, None);
    while minute.is_none() || since.is_none() {
        let u = recv(&mut rx);
        match u.path.first() {
            Some(spacewake::store::path::PathSeg::Key(k)) if k == "minute" => {
                minute = Some(u.value)
            }
            _ => since = Some(u.value),
        }
    }
    assert_eq!(minute, Some(json!(start + 60_000)));
    assert_eq!(since, Some(json!(1)));
    assert!(c.space_value("s", Counter::ClockTicks) >= 2);

    // Nobody demands it now: a boundary wakes the server, runs nothing,
    // and the park still comes at the idle time after the detach.
    host.ask_blocking("s", Trigger::Session, Request::Detach { session: 1 })
        .unwrap();
    let ticks = c.space_value("s", Counter::ClockTicks);
    let wakeups = c.space_value("s", Counter::ServerWakeups);
    clock.set_ms(start + 125_000);
    wait_until("the server looked at its timers", || {
        c.space_value("s", Counter::ServerWakeups) > wakeups
    });
    assert_eq!(host.active_spaces(), vec!["s".to_string()]);
    clock.set_ms(start + 149_000);
    wait_until("the server looked at its timers", || {
        c.space_value("s", Counter::ServerWakeups) > wakeups + 1
    });
    assert_eq!(
        host.active_spaces(),
        vec!["s".to_string()],
        "not parked early"
    );
    clock.set_ms(start + 150_000);
    parked(&host, "s", 1);
    assert_eq!(
        c.space_value("s", Counter::ClockTicks),
        ticks,
        "no tick undemanded"
    );
    assert!(host.active_spaces().is_empty());

    // An hour on, a read activates it again: `#now/60` is the new minute,
    // `#now` still the time the piece first loaded (kept with the piece).
    clock.set_ms(start + 3_600_000 + 1_000);
    let read = |path: &str| {
        host.ask_blocking(
            "s",
            Trigger::Session,
            spacewake::host::Read {
                piece: Some(piece.clone()),
                doc: None,
                path: parse_dotted(path),
            },
        )
        .unwrap()
        .value
    };
    assert_eq!(read("minute"), json!(start + 3_600_000));
    assert_eq!(read("loadedAt"), json!(start));
    assert_eq!(read("minutesSinceLoad"), json!(60));
    host.shutdown();
}
