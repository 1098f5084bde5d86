//! The host on the PostgreSQL store: sessions, scheduled wakes and their
//! leases through the real host (its waker, write-first firing, delivery
//! with nobody connected) with the spaces in a fleet's shared database, and
//! a second host of the fleet seeing and continuing the first one's work.
//! Time is a manual clock for the host; lease expiry is the database's.

mod common;

use common::wait;
use serde_json::json;
use spacewake::clock::{Clock, ManualClock};
use spacewake::host::{Host, HostConfig, Trigger};
use spacewake::metrics::{Counter, Counters};
use spacewake::store::path::parse_dotted;
use spacewake::store::{Store, StoreConfig};
use std::sync::Arc;

const PATTERN: &str = r#"
import { pattern, handler, computed, SCHEDULE, Cell, Default } from "commonfabric";

const tick = handler<{ fireTime?: number }, { count: Cell<number>; next: number }>(
  (_ev, { count, next }) => { count.set(next); },
);
const bump = handler<{ by?: number }, { count: Cell<number> }>(
  (ev, { count }) => { count.set(count.get() + (ev?.by ?? 1)); },
);

export default pattern<{ count: Default<number, 0> }>(({ count }) => {
  const next = computed(() => count + 1);
  return {
    [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ count, next }) }],
    bump: bump({ count }),
    count,
  };
});
"#;

/// A host on the fleet's database `url`, as holder `holder`.
fn pg_host(url: &str, holder: &str, clock: Arc<ManualClock>) -> Host {
    let mut cfg = StoreConfig::new(std::env::temp_dir());
    cfg.holder = Some(holder.into());
    let store = Store::open_postgres(url, cfg, clock, Counters::new()).unwrap();
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

fn c(h: &Host, space: &str, counter: Counter) -> i64 {
    h.counters().space_value(space, counter)
}

fn read(h: &Host, space: &str, piece: &str, path: &str) -> serde_json::Value {
    common::read(h, space, piece, path)
}

#[test]
fn a_host_on_postgres_serves_and_fires_and_another_host_carries_on() {
    let Some(url) = common::pg::database("host_on_postgres") else {
        return;
    };
    let clock = Arc::new(ManualClock::default());
    let a = pg_host(&url, "host-a/1", clock.clone());
    let piece = common::deploy_source(&a, "s", PATTERN);
    assert_eq!(read(&a, "s", &piece, "count"), json!(0));
    common::park(&a, &clock, "s");

    // The schedule is indexed in the database, and the directory knows.
    let row = a.store().open_space("s").unwrap().schedule(None).unwrap()[0].clone();
    let entry = a.store().directory().get("s").unwrap().unwrap();
    assert_eq!(entry.next_wake_ms, Some(row.next_due_ms));

    // At the due time the waker fires and the callback runs, nobody connected.
    clock.set_ms(row.next_due_ms);
    wait("fire and deliver", || {
        c(&a, "s", Counter::ScheduleDelivered) == 1
    });
    wait("park", || common::settled(&a, "s"));
    assert_eq!(c(&a, "s", Counter::ScheduleLeaseWithFiring), 1);
    // On a fleet's database the lease goes back when the tenure parks,
    // not with its last wave (another host may take the space at once).
    assert_eq!(c(&a, "s", Counter::LeaseReleasedWithWave), 0);
    assert!(c(&a, "s", Counter::LeaseReleased) >= 2);
    assert_eq!(read(&a, "s", &piece, "count"), json!(1));
    common::park(&a, &clock, "s");
    let after = a.store().open_space("s").unwrap().schedule(None).unwrap()[0].clone();
    assert_eq!((after.fired_count, after.nominal_period), (1, 2));
    assert_eq!(
        a.store()
            .directory()
            .get("s")
            .unwrap()
            .unwrap()
            .next_wake_ms,
        Some(after.next_due_ms),
        "the directory moved to the next occurrence in the firing's transaction"
    );
    a.shutdown();
    drop(a);

    // Another host of the fleet sees the space as the first one left it,
    // serves a session on it, and fires its next occurrence.
    let b = pg_host(&url, "host-b/1", clock.clone());
    assert_eq!(read(&b, "s", &piece, "count"), json!(1));
    let out = b.ask_blocking(
        "s",
        Trigger::Events,
        spacewake::host::SendEvent {
            author: spacewake::store::Author::principal("did:key:owner"),
            piece: piece.clone(),
            path: parse_dotted("bump"),
            event_id: Some("e1".into()),
            payload: json!({"by": 10}),
        },
    );
    assert!(out.is_ok(), "{out:?}");
    wait("the event processed", || {
        c(&b, "s", Counter::EventsProcessed) >= 1
    });
    assert_eq!(read(&b, "s", &piece, "count"), json!(11));
    common::park(&b, &clock, "s");
    clock.set_ms(after.next_due_ms.max(clock.now_ms()));
    wait("the second occurrence delivered", || {
        c(&b, "s", Counter::ScheduleDelivered) == 1
    });
    wait("park", || common::settled(&b, "s"));
    assert_eq!(read(&b, "s", &piece, "count"), json!(12));
    let mut s = b.store().open_space("s").unwrap();
    assert_eq!(s.schedule(None).unwrap()[0].fired_count, 2);
    let lease = s.current_lease().unwrap().unwrap();
    assert_eq!(lease.holder, "host-b/1");
    b.shutdown();
}

/// `serve --store postgres://…`: two host processes, each with its own data
/// directory, on one database. A client's space on the first is served by
/// the second after the first stops, from where it was; the operator's
/// `spaces --store` lists the fleet's spaces.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn serve_with_a_postgres_store_hands_spaces_between_hosts() {
    use common::server::{spacewake, Server};
    use common::wire::{connect, next_value, send, track};
    let Some(f) = FleetOfTwo::start("serve_store").await else {
        return;
    };
    let (url, me, a, piece) = (f.url, f.me, f.a, f.piece);
    let (dir_b, args) = (f.dir_b, f.args);
    f.on_a.close().await.unwrap();
    // A graceful stop parks the space and gives its lease back.
    a.signal(libc::SIGTERM);
    let mut a = a;
    let status = a
        .wait_exit(std::time::Duration::from_secs(20))
        .expect("a graceful stop");
    // Exit 0: the host's PostgreSQL clients are dropped off the async
    // runtime (dropped inside its shutdown they panicked the process).
    assert!(status.success(), "{status}: {}", a.log_text());

    let b = Server::start(
        dir_b.path(),
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let (mut c, opened) = connect(&b, &me, "home").await;
    assert!(
        opened.head_seq >= 2,
        "the space was found in the fleet's database"
    );
    track(&mut c, &piece, "value", None).await;
    assert_eq!(next_value(&mut c).await.1, json!(1));
    send(&mut c, &piece, "increment", json!({})).await;
    assert_eq!(next_value(&mut c).await.1, json!(2));
    assert_eq!(b.space_counter("home", "lease", "refused"), 0);

    // Operators see the fleet: each host's own counters plus the hosts the
    // database knows, on the health route and in /metrics.
    let fleet = b.stats()["fleet"].clone();
    let me_b = fleet["self"].as_str().unwrap().to_string();
    let hosts = fleet["hosts"].as_array().unwrap();
    assert_eq!(hosts.len(), 2, "{fleet}");
    let row_b = hosts.iter().find(|h| h["holder"] == me_b.as_str()).unwrap();
    assert_eq!(row_b["alive"], json!(true), "{fleet}");
    assert_eq!(row_b["spacesHeld"], json!(1), "B holds home: {fleet}");
    assert!(row_b["lastRenewalMs"].as_u64().unwrap() > 0, "{fleet}");
    let (_, metrics) = common::server::http(&b.addr, "GET", "/metrics", &[], b"");
    assert!(
        metrics.contains(&format!(
            "spacewake_fleet_host_spaces_held{{holder=\"{me_b}\",self=\"true\"}} 1"
        )),
        "{metrics}"
    );
    assert!(metrics.contains("spacewake_fleet_host_alive{"), "{metrics}");

    // The operator's listing reads the fleet's database.
    let out = spacewake()
        .args(["spaces", "--store", &url])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("home"), "{text}");
    assert!(text.contains("on the fleet's database"), "{text}");
    // A store that is not PostgreSQL is refused with a sentence.
    let out = spacewake()
        .args(["spaces", "--store", "mysql://x"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("must be a postgres:// URL"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Sessions on any host (`spec/fleet.md`, *Sessions on any host*): a space
/// is served by the host holding its lease. Another host answers requests
/// for it with `heldElsewhere` (who holds it, when to try again) and acts
/// on nothing — an event it did not acknowledge was not appended — until
/// the holder parks the space and gives its lease back; then it takes the
/// space over, and a session resuming from the last update it saw gets
/// each later update exactly once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_host_takes_a_space_over_once_its_holder_parks_it() {
    use common::server::Server;
    use common::wire::{next_value, send, track};
    use spacewake::protocol::{ErrorCode, ServerMessage};
    let Some(f) = FleetOfTwo::start("takeover_on_park").await else {
        return;
    };
    let (me, a, piece, on_a, seen_seq) = (f.me, f.a, f.piece, f.on_a, f.seen_seq);
    let b = Server::start(
        f.dir_b.path(),
        &f.args.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    // While A serves the space (a session is open there), B refuses to
    // open it and says who holds it and when to try again.
    let ws_b = common::wire::ws_url(&b);
    let refused = spacewake::protocol::client::Client::connect_creating(&ws_b, &me, "home").await;
    let Err(spacewake::protocol::client::ClientError::Refused(e)) = refused else {
        panic!("B opened a space A holds");
    };
    assert_eq!(e.code, ErrorCode::HeldElsewhere, "{e:?}");
    let details = e.details.clone().unwrap();
    assert!(details["holder"].as_str().is_some(), "{details}");
    assert!(details["retryInMs"].as_u64().is_some(), "{details}");

    // A's session ends; A parks the space and gives the lease back.
    on_a.close().await.unwrap();
    common::server::wait_for("A parks the space", || {
        a.space_counter("home", "activation", "parks") >= 1
    });
    // B takes it over.
    let mut on_b = None;
    for _ in 0..100 {
        match spacewake::protocol::client::Client::connect_creating(&ws_b, &me, "home").await {
            Ok((c, _)) => {
                on_b = Some(c);
                break;
            }
            Err(spacewake::protocol::client::ClientError::Refused(e))
                if e.code == ErrorCode::HeldElsewhere =>
            {
                tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            }
            Err(other) => panic!("{other:?}"),
        }
    }
    let mut on_b = on_b.expect("B never took the space over");
    assert!(matches!(
        send(&mut on_b, &piece, "increment", json!({})).await,
        ServerMessage::Ack(_)
    ));
    track(&mut on_b, &piece, "value", Some(seen_seq)).await;
    let (seq, v) = next_value(&mut on_b).await;
    assert_eq!(
        v,
        json!(2),
        "resumed after seq {seen_seq}: the next update, once"
    );
    assert!(seq > seen_seq);
    assert!(
        on_b.next_update(std::time::Duration::from_millis(300))
            .await
            .unwrap()
            .is_none(),
        "no update twice"
    );
}

/// Two hosts' worth of setup on a fresh database: host A serving space
/// `home` with a counter deployed, tracked and incremented to 1 by a
/// session still open on A (`on_a`, whose last update was `seen_seq`);
/// the arguments and data directory for a host B.
struct FleetOfTwo {
    url: String,
    me: spacewake::protocol::Identity,
    a: common::server::Server,
    on_a: spacewake::protocol::client::Client,
    piece: String,
    seen_seq: u64,
    args: Vec<String>,
    dir_b: tempfile::TempDir,
    _dir_a: tempfile::TempDir,
}

impl FleetOfTwo {
    async fn start(test: &'static str) -> Option<FleetOfTwo> {
        use common::wire::{connect, deploy, next_value, send, track};
        // The test's own PostgreSQL client may not block on this runtime's thread.
        let url = tokio::task::spawn_blocking(move || common::pg::database(test))
            .await
            .unwrap()?;
        let me = spacewake::protocol::Identity::generate();
        let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let args: Vec<String> = [
            "--store",
            &url,
            "--lease-ttl-ms",
            "3000",
            "--lease-renew-ms",
            "1000",
        ]
        .map(String::from)
        .to_vec();
        let arg_refs: Vec<&str> = args.iter().map(String::as_str).collect();
        let a = common::server::Server::start(dir_a.path(), &arg_refs);
        let (mut on_a, _) = connect(&a, &me, "home").await;
        let piece = deploy(&mut on_a, json!({"value": 0})).await;
        track(&mut on_a, &piece, "value", None).await;
        assert_eq!(next_value(&mut on_a).await.1, json!(0));
        send(&mut on_a, &piece, "increment", json!({})).await;
        let (seen_seq, v) = next_value(&mut on_a).await;
        assert_eq!(v, json!(1));
        Some(FleetOfTwo {
            url,
            me,
            a,
            on_a,
            piece,
            seen_seq,
            args,
            dir_b,
            _dir_a: dir_a,
        })
    }
}

const CALENDAR: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";

const note = handler<{ nominalTime: number }, { seen: Cell<number[]> }>((ev, { seen }) => {
  seen.push(ev.nominalTime);
});

export default pattern<{ seen: Default<number[], []> }>(({ seen }) => ({
  [SCHEDULE]: [{ cron: "0 9 * * FRI", timeZone: "Australia/Sydney", callback: note({ seen }) }],
  seen,
}));
"#;

#[test]
fn a_calendar_entry_fires_on_postgres_and_the_next_host_keeps_its_cadence() {
    let Some(url) = common::pg::database("calendar_on_postgres") else {
        return;
    };
    // 2026-01-01T00:00Z is Thursday 11:00 in Sydney (AEDT, +11): the first
    // Friday 09:00 is 2026-01-01T22:00Z, the next a week later.
    let (first, week) = (1_767_304_800_000_u64, 7 * 86_400_000_u64);
    let clock = Arc::new(ManualClock::default());
    let a = pg_host(&url, "host-a/1", clock.clone());
    let piece = common::deploy_source(&a, "s", CALENDAR);
    common::park(&a, &clock, "s");
    let row = a.store().open_space("s").unwrap().schedule(None).unwrap()[0].clone();
    assert!(row
        .cadence
        .as_deref()
        .is_some_and(|c| c.contains("Australia/Sydney")));
    assert!(row.next_due_ms >= first && row.next_due_ms <= first + 20 * 60_000);
    assert_eq!(
        a.store()
            .directory()
            .get("s")
            .unwrap()
            .unwrap()
            .next_wake_ms,
        Some(row.next_due_ms)
    );
    clock.set_ms(row.next_due_ms);
    wait("the first calendar wake", || {
        c(&a, "s", Counter::ScheduleDelivered) == 1
    });
    wait("park", || common::settled(&a, "s"));
    assert_eq!(read(&a, "s", &piece, "seen"), json!([first]));
    common::park(&a, &clock, "s");
    a.shutdown();
    drop(a);

    let b = pg_host(&url, "host-b/1", clock.clone());
    let after = b.store().open_space("s").unwrap().schedule(None).unwrap()[0].clone();
    assert!(after.next_due_ms >= first + week && after.next_due_ms <= first + week + 20 * 60_000);
    clock.set_ms(after.next_due_ms.max(clock.now_ms()));
    wait("the second calendar wake, on the other host", || {
        c(&b, "s", Counter::ScheduleDelivered) == 1
    });
    wait("park", || common::settled(&b, "s"));
    assert_eq!(read(&b, "s", &piece, "seen"), json!([first, first + week]));
    b.shutdown();
}

/// A one-off entry whose callback records the time it was set for and
/// moves its own field an hour on.
const ONE_OFF: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";

const ring = handler<{ setFor: number }, { seen: Cell<number[]>; next: Cell<number | null> }>(
  (ev, { seen, next }) => {
    seen.push(ev.setFor);
    next.set(ev.setFor + 3600000);
  },
);

export default pattern<{ seen: Default<number[], []>; next: Default<number | null, null> }>(
  ({ seen, next }) => ({
    [SCHEDULE]: [{ at: next, callback: ring({ seen, next }) }],
    seen,
    next,
  }),
);
"#;

#[test]
fn one_off_wakes_on_postgres_fire_once_each_across_two_hosts() {
    let Some(url) = common::pg::database("one_off_on_postgres") else {
        return;
    };
    const SPACES: usize = 6;
    const ROUNDS: u64 = 3;
    let hour = 60 * 60_000;
    let clock = Arc::new(ManualClock::default());
    let a = pg_host(&url, "host-a/1", clock.clone());
    let b = pg_host(&url, "host-b/1", clock.clone());
    let first = clock.now_ms() + hour;
    let mut pieces = Vec::new();
    for i in 0..SPACES {
        let space = format!("s{i}");
        a.store().create_space(&space, "did:key:owner").unwrap();
        let piece = a
            .deploy_file_blocking(&space, "p.tsx", ONE_OFF, json!({ "next": first }))
            .unwrap();
        common::park(&a, &clock, &space);
        pieces.push((space, piece));
    }
    let delivered = |h: &Host| h.counters().host().get(Counter::ScheduleDelivered);
    for k in 1..=ROUNDS {
        clock.set_ms(first + (k - 1) * hour);
        wait("every space's wake of this round", || {
            delivered(&a) + delivered(&b) == (k as usize * SPACES) as i64
        });
        for (space, _) in &pieces {
            wait("park", || {
                common::settled(&a, space) && common::settled(&b, space)
            });
        }
    }
    let fired = |h: &Host| h.counters().host().get(Counter::ScheduleFired);
    assert_eq!(fired(&a) + fired(&b), (ROUNDS as usize * SPACES) as i64);
    let expected: Vec<u64> = (0..ROUNDS).map(|i| first + i * hour).collect();
    for (space, piece) in &pieces {
        assert_eq!(read(&a, space, piece, "seen"), json!(expected), "{space}");
        let row = a.store().open_space(space).unwrap().schedule(None).unwrap()[0].clone();
        assert_eq!(
            row.next_due_ms,
            first + ROUNDS * hour,
            "{space}: the next hour is armed"
        );
        assert_eq!(row.fired_count, ROUNDS, "{space}");
    }
    a.shutdown();
    b.shutdown();
}
