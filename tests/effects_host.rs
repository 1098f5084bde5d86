//! The design's feed example end to end, through the real host on a manual
//! clock: a pattern declaring `[SCHEDULE]` every 120 minutes whose callback
//! refreshes a feed served by the test's own HTTP server. With no client
//! connected the parked space wakes, fetches, commits the new items and
//! parks; an unchanged feed commits no new item; a restart refetches
//! nothing; nobody reading the output backs the entry off as before.

mod common;

use common::origin;
use serde_json::json;
use spacewake::clock::ManualClock;
use spacewake::effects::policy::Allowlist;
use spacewake::effects::{Broker, BrokerConfig};
use spacewake::host::Host;
use spacewake::metrics::Counter;
use std::sync::Arc;

const FEED: &str = include_str!("../fixtures/patterns/feed.tsx");

fn host(dir: &std::path::Path, clock: Arc<ManualClock>, allow: &str) -> Host {
    host_counting(dir, clock, allow, spacewake::metrics::Counters::new())
}

/// A host (in a new directory, on a clock that stands still) whose broker
/// counts into counters of the test's, returned beside it.
fn counted_host(
    o: &origin::Origin,
) -> (tempfile::TempDir, Arc<spacewake::metrics::Counters>, Host) {
    let dir = tempfile::tempdir().unwrap();
    let counters = spacewake::metrics::Counters::new();
    let h = host_counting(
        dir.path(),
        Arc::new(ManualClock::default()),
        &o.allow(),
        counters.clone(),
    );
    (dir, counters, h)
}

/// A host whose broker counts into `counters` (held requests are counted
/// there).
fn host_counting(
    dir: &std::path::Path,
    clock: Arc<ManualClock>,
    allow: &str,
    counters: Arc<spacewake::metrics::Counters>,
) -> Host {
    common::manual_host(dir, clock.clone(), |cfg| {
        cfg.schedule.jitter_window_ms = 0;
        let mut b = BrokerConfig::new(url::Url::parse("http://127.0.0.1:1").unwrap());
        b.allow = Allowlist::new(vec![allow.parse().unwrap()]);
        cfg.runtime.effects = Some(Broker::new(b, clock, counters).unwrap());
    })
}

fn items(h: &Host, piece: &str) -> Vec<String> {
    let v = common::read(h, "s", piece, "items");
    v.as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect()
}

#[test]
fn a_parked_feed_wakes_fetches_commits_new_items_and_parks_and_a_restart_refetches_nothing() {
    let o = origin::start();
    o.seen.set_feed(
        "application/json",
        r#"{"items":[{"id":"a","title":"A"},{"id":"b","title":"B"}]}"#,
    );
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = host(dir.path(), clock.clone(), &o.allow());
    let c = |h: &Host, k: Counter| h.counters().space_value("s", k);
    h.store().create_space("s", "did:key:owner").unwrap();
    let piece = h
        .deploy_file_blocking("s", "feed.tsx", FEED, json!({"url": o.url("/feed")}))
        .expect("deploy");
    // The deploy's tenure fetches once (nothing else reads the merge, which
    // runs for what it writes) and holds the space until the answer lands.
    common::wait("the first fetch", || c(&h, Counter::EffectsCompleted) == 1);
    common::park(&h, &clock, "s");
    assert_eq!(o.seen.hits("/feed"), 1);

    // A wake with nobody connected: the callback moves the refresh counter,
    // the fetch goes again, the new item is committed, the space parks.
    o.seen.set_feed(
        "application/rss+xml",
        "<rss><channel><item><guid>a</guid><title>A</title></item>\
         <item><guid>c</guid><title><![CDATA[C & more]]></title></item></channel></rss>",
    );
    let row = || h.store().open_space("s").unwrap().schedule(None).unwrap()[0].clone();
    clock.set_ms(row().next_due_ms);
    common::wait("the wake's fetch", || c(&h, Counter::EffectsCompleted) == 2);
    common::wait("park", || common::settled(&h, "s"));
    assert_eq!(c(&h, Counter::ScheduleDelivered), 1);
    assert_eq!(o.seen.hits("/feed"), 2);

    // An unchanged feed: fetched, nothing new committed.
    clock.set_ms(row().next_due_ms);
    common::wait("the second wake's fetch", || {
        c(&h, Counter::EffectsCompleted) == 3
    });
    common::wait("park", || common::settled(&h, "s"));
    assert_eq!(o.seen.hits("/feed"), 3);
    // Nobody read the output across those wakes (the first judged is the
    // second): the entry is counting toward its back-off.
    assert!(row().unread_fires >= 1, "{:?}", row());
    assert_eq!(c(&h, Counter::EffectsRequested), 3);

    // A restart: the committed answer is served, nothing refetched.
    drop(h);
    let h = host(dir.path(), clock.clone(), &o.allow());
    assert_eq!(items(&h, &piece), ["a", "b", "c"]);
    assert_eq!(common::read(&h, "s", &piece, "status"), json!("ok"));
    assert_eq!(o.seen.hits("/feed"), 3, "a restart refetches nothing");
    assert_eq!(c(&h, Counter::EffectsRequested), 0);
    assert!(c(&h, Counter::EffectsReused) >= 1);
}

#[test]
fn a_refused_fetch_is_the_pieces_error_state_not_a_failed_wave() {
    let o = origin::start();
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    // The server is not on the allowlist: loopback is refused.
    let h = host(dir.path(), clock.clone(), "127.0.0.1:1");
    h.store().create_space("s", "did:key:owner").unwrap();
    let piece = h
        .deploy_file_blocking("s", "feed.tsx", FEED, json!({"url": o.url("/feed")}))
        .expect("deploy");
    common::wait("the refusal", || {
        h.counters().space_value("s", Counter::EffectsRefused) == 1
    });
    let status = common::read(&h, "s", &piece, "status");
    assert!(
        status
            .as_str()
            .unwrap()
            .starts_with("egressRefused: 127.0.0.1 is a loopback address"),
        "{status}"
    );
    assert_eq!(o.seen.total_hits(), 0);
    assert_eq!(h.counters().space_value("s", Counter::ActionsFailed), 0);
}

const CHAINED: &str = include_str!("../fixtures/patterns/chained-fetch.tsx");

#[test]
fn a_spent_scheduled_budget_stops_a_wakes_effects_and_a_sessions_go_through_booked_per_bucket() {
    let o = origin::start();
    let index = |v: u32| format!(r#"{{"next":"{}?v={v}"}}"#, o.url("/json"));
    o.seen.set_feed("application/json", &index(1));
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(ManualClock::default());
    let h = host(dir.path(), clock.clone(), &o.allow());
    let c = |h: &Host, k: Counter| h.counters().space_value("s", k);
    h.store().create_space("s", "did:key:owner").unwrap();
    let piece = h
        .deploy_file_blocking(
            "s",
            "chained-fetch.tsx",
            CHAINED,
            json!({"url": o.url("/feed")}),
        )
        .expect("deploy");
    common::wait("the chain at deploy", || {
        c(&h, Counter::EffectsCompleted) == 2
    });
    common::park(&h, &clock, "s");
    assert_eq!((o.seen.hits("/feed"), o.seen.hits("/json")), (1, 1));

    // A scheduled budget of 1 µs: the wake is admitted (nothing spent in
    // this window yet), its first wave spends it; the index it fetched then
    // names a new document, which that activation does not fetch.
    {
        let mut sp = h.store().open_space("s").unwrap();
        sp.plane(|p| p.set_policy(spacewake::accounting::POLICY_SCHEDULED_BUDGET_US, Some("1")))
            .unwrap();
    }
    o.seen.set_feed("application/json", &index(2));
    let row = || h.store().open_space("s").unwrap().schedule(None).unwrap()[0].clone();
    clock.set_ms(row().next_due_ms);
    common::wait("the wake's index", || c(&h, Counter::EffectsCompleted) == 3);
    common::wait("the detail skipped", || {
        c(&h, Counter::EffectsSkippedBudget) == 1
    });
    common::wait("park", || common::settled(&h, "s"));
    assert_eq!((o.seen.hits("/feed"), o.seen.hits("/json")), (2, 1));

    // A session reads the piece: its fetch of the new document goes through.
    common::read(&h, "s", &piece, "label");
    common::wait("the session's detail", || {
        c(&h, Counter::EffectsCompleted) == 4
    });
    assert_eq!(o.seen.hits("/json"), 2);
    assert_eq!(common::read(&h, "s", &piece, "label"), json!("real"));

    // The ledger books them per bucket.
    let ledger = h.store().open_space("s").unwrap().ledger().unwrap();
    let sum = |b: spacewake::store::Bucket, f: fn(&spacewake::store::LedgerDelta) -> u64| {
        ledger
            .iter()
            .filter(|r| r.bucket == b)
            .map(|r| f(&r.totals))
            .sum::<u64>()
    };
    use spacewake::store::Bucket::{Scheduled, Session};
    assert_eq!(sum(Scheduled, |t| t.effects_requested), 1, "{ledger:?}");
    assert_eq!(sum(Scheduled, |t| t.effects_completed), 1, "{ledger:?}");
    assert!(sum(Scheduled, |t| t.effect_bytes) > 0, "{ledger:?}");
    assert_eq!(sum(Session, |t| t.effects_requested), 3, "{ledger:?}");
    assert_eq!(sum(Session, |t| t.effects_completed), 3, "{ledger:?}");
    let answer = r#"{"answer":42,"label":"real"}"#.len();
    assert_eq!(
        sum(Session, |t| t.effect_bytes) + sum(Scheduled, |t| t.effect_bytes),
        (index(1).len() + index(2).len() + 2 * answer) as u64,
        "{ledger:?}"
    );
}

const LOOP: &str = include_str!("../fixtures/patterns/fetch-loop.tsx");

/// Reads the loop's answer again and again (each answer asks the next
/// request) until the space's budget holds one.
fn drive_until_held(
    h: &Host,
    broker_counters: &spacewake::metrics::Counters,
    space: &str,
    piece: &str,
) {
    let held = || broker_counters.space_value(space, Counter::EffectsHeld);
    let completed = || h.counters().space_value(space, Counter::EffectsCompleted);
    for i in 1..=40 {
        if held() >= 1 {
            break;
        }
        // Read until the next answer lands: a read before the last answer
        // moved the counter asks nothing new.
        common::wait("an answer, or the loop held", || {
            common::read(h, space, piece, "answer");
            completed() >= i || held() >= 1
        });
    }
    common::wait("the loop held", || held() >= 1);
}

#[test]
fn a_pattern_that_retriggers_its_own_fetch_is_paced_by_its_bucket_and_other_spaces_are_not() {
    let o = origin::start();
    let (_dir, broker_counters, h) = counted_host(&o);
    let held = |space: &str| broker_counters.space_value(space, Counter::EffectsHeld);
    h.store().create_space("loop", "did:key:owner").unwrap();
    h.store().create_space("s", "did:key:owner").unwrap();
    let lp = h
        .deploy_file_blocking(
            "loop",
            "fetch-loop.tsx",
            LOOP,
            json!({"url": o.url("/json")}),
        )
        .expect("deploy");
    // The clock stands still: the bucket's burst (20) goes, the next
    // request is held, counted, not dropped.
    // A reader keeps asking for the answer: each answer asks again.
    drive_until_held(&h, &broker_counters, "loop", &lp);
    common::wait("the burst answered", || o.seen.hits("/json") == 20);
    assert_eq!(held("loop"), 1, "one request waits; the loop waits on it");
    assert_eq!(
        h.counters().space_value("loop", Counter::EffectsRequested),
        21
    );
    assert_eq!(
        h.counters().space_value("loop", Counter::EffectsCompleted),
        20
    );
    // Another space is not slowed: its fetch goes at once.
    let piece = h
        .deploy_file_blocking("s", "feed.tsx", FEED, json!({"url": o.url("/feed")}))
        .expect("deploy");
    common::wait("the other space's fetch", || {
        h.counters().space_value("s", Counter::EffectsCompleted) == 1
    });
    assert_eq!(held("s"), 0);
    assert_eq!(common::read(&h, "s", &piece, "status"), json!("ok"));
    assert_eq!(o.seen.hits("/json"), 20, "the loop is still held");
}

#[test]
fn a_spaces_own_effect_knobs_reach_the_broker_at_activation() {
    let o = origin::start();
    let (_dir, broker_counters, h) = counted_host(&o);
    h.store().create_space("slow", "did:key:owner").unwrap();
    // A quarter of the host's pace: its burst is 5, not 20.
    {
        let mut sp = h.store().open_space("slow").unwrap();
        let mut setting = spacewake::operator::EffectsSetting {
            in_flight: spacewake::operator::Knob::Keep,
            per_second: spacewake::operator::Knob::Set(0.5),
            bytes_per_second: spacewake::operator::Knob::Keep,
        };
        let v = spacewake::operator::set_effects(&mut sp, setting, None).unwrap();
        assert_eq!(v.own.per_second, Some(0.5));
        setting.per_second = spacewake::operator::Knob::Keep;
        setting.in_flight = spacewake::operator::Knob::Set(3);
        let v = spacewake::operator::set_effects(&mut sp, setting, None).unwrap();
        assert_eq!((v.own.in_flight, v.own.per_second), (Some(3), Some(0.5)));
    }
    let lp = h
        .deploy_file_blocking(
            "slow",
            "fetch-loop.tsx",
            LOOP,
            json!({"url": o.url("/json")}),
        )
        .expect("deploy");
    drive_until_held(&h, &broker_counters, "slow", &lp);
    common::wait("its burst answered", || o.seen.hits("/json") == 5);
}

const MANY: &str = include_str!("../fixtures/patterns/fetch-many.tsx");

#[test]
fn a_thousand_fetches_started_by_one_handler_are_held_by_the_budget_not_dropped() {
    let o = origin::start();
    let (_dir, broker_counters, h) = counted_host(&o);
    h.store().create_space("many", "did:key:owner").unwrap();
    let piece = h
        .deploy_file_blocking("many", "fetch-many.tsx", MANY, json!({"urls": []}))
        .expect("deploy");
    h.ask_blocking(
        "many",
        spacewake::host::Trigger::Session,
        spacewake::host::SendEvent {
            author: spacewake::store::Author::principal("did:key:owner"),
            piece: piece.clone(),
            path: spacewake::store::path::parse_dotted("fill"),
            event_id: Some("fill".into()),
            payload: json!({"base": o.url("/json"), "n": 1000}),
        },
    )
    .unwrap();
    // A reader demands every answer: all 1,000 are asked for.
    common::wait("the list filled", || {
        common::read(&h, "many", &piece, "count") == json!(1000)
    });
    common::read(&h, "many", &piece, "answered");
    let requested = || h.counters().space_value("many", Counter::EffectsRequested);
    common::wait("all asked", || requested() == 1000);
    // The clock stands still: the burst of 20 goes (at most 8 at once),
    // the other 980 are held, counted, none dropped.
    common::wait("the burst answered", || o.seen.hits("/json") == 20);
    // Held: the 980 the bucket stops, and any the cap of 8 in flight held
    // for a moment before the bucket ran dry.
    let held = broker_counters.space_value("many", Counter::EffectsHeld);
    assert!((980..1000).contains(&held), "{held}");
    assert!(
        o.seen
            .most_at_once
            .load(std::sync::atomic::Ordering::SeqCst)
            <= 8
    );
    assert_eq!(
        broker_counters.space_value("many", Counter::EffectsInFlight),
        980,
        "held requests count as in flight until they are sent"
    );
}
