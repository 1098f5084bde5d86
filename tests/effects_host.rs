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
    common::manual_host(dir, clock.clone(), |cfg| {
        cfg.schedule.jitter_window_ms = 0;
        let mut b = BrokerConfig::new(url::Url::parse("http://127.0.0.1:1").unwrap());
        b.allow = Allowlist::new(vec![allow.parse().unwrap()]);
        cfg.runtime.effects =
            Some(Broker::new(b, clock, spacewake::metrics::Counters::new()).unwrap());
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
