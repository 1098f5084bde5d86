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
    // A serving host opens and warms its connections as it starts: the
    // cap's 8, the waker's and the lease keeper's.
    wait("connections warmed", || {
        a.counters().host().get(Counter::PgConnectionsWarmed) >= 9
    });
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
    // The waker's claim read what opening the space reads: the activation
    // opened it with no statement of its own.
    assert_eq!(a.counters().host().get(Counter::PgOpenedWithClaim), 1);
    // The lease goes back with the brief tenure's last wave, as on SQLite
    // (taken again only if nobody wrote meanwhile: `tests/fleet.rs`).
    assert_eq!(c(&a, "s", Counter::LeaseReleasedWithWave), 1);
    assert_eq!(c(&a, "s", Counter::LeaseRetakeRefused), 0);
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

/// When a host cannot reach the holder (`spec/fleet.md`, *The relay*:
/// here the holder advertises an address nobody listens on), it answers
/// `heldElsewhere` (who holds the space, when to try again) and acts on
/// nothing; the client library waits that out and tries again, and once
/// the holder parks the space the host takes it over, and a session
/// resuming from the last update it saw gets each later update once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_that_cannot_reach_the_holder_says_held_elsewhere_and_takes_over_later() {
    use common::server::Server;
    use common::wire::{next_value, send, track};
    use spacewake::protocol::client::{Client, ClientError, OpenOptions};
    use spacewake::protocol::{ErrorCode, ServerMessage};
    let Some(f) = FleetOfTwo::start_with("takeover_on_park", &["--advertise", "127.0.0.1:1"]).await
    else {
        return;
    };
    let (me, a, piece, on_a, seen_seq) = (f.me, f.a, f.piece, f.on_a, f.seen_seq);
    let b = Server::start(
        f.dir_b.path(),
        &f.args.iter().map(String::as_str).collect::<Vec<_>>(),
    );

    // While A serves the space, B cannot relay to it: it refuses, saying
    // who holds the space and when to try again.
    let ws_b = common::wire::ws_url(&b);
    let once = OpenOptions {
        create: true,
        once: true,
        ..OpenOptions::default()
    };
    let refused = Client::connect_with(&ws_b, &me, "home", once).await;
    let Err(ClientError::Refused(e)) = refused else {
        panic!("B opened a space A holds without reaching A");
    };
    assert_eq!(e.code, ErrorCode::HeldElsewhere, "{e:?}");
    let details = e.details.clone().unwrap();
    assert!(details["holder"].as_str().is_some(), "{details}");
    assert!(details["retryInMs"].as_u64().is_some(), "{details}");
    assert!(b.host_counter("relay", "unreachable") >= 1);

    // A client that waits (the library's default) gets in once A's session
    // ends and A parks the space.
    let waiting = tokio::spawn(async move {
        let opts = OpenOptions {
            create: true,
            ..OpenOptions::default()
        };
        Client::connect_with(&ws_b, &me, "home", opts).await
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    on_a.close().await.unwrap();
    common::server::wait_for("A parks the space", || {
        a.space_counter("home", "activation", "parks") >= 1
    });
    let (mut on_b, _) = waiting.await.unwrap().expect("B took the space over");
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

/// Any host answers for any space (`spec/fleet.md`, *The relay*): three
/// `serve` processes on one database. Two clients on two hosts use one
/// space at once, each seeing the other's updates; webhooks through all
/// three hosts are acknowledged and processed once; when the holder is
/// SIGKILLed both clients resume on the survivors within the TTL plus one
/// second, and when the relaying host is SIGKILLed its client resumes
/// likewise — nothing lost, nothing doubled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn any_host_answers_for_any_space_and_clients_resume_when_hosts_die() {
    use common::server::Server;
    use common::wire::{deploy, next_value, send, track};
    use spacewake::protocol::client::{Client, ClientError, OpenOptions};
    use spacewake::protocol::ServerMessage;
    let Some(url) = tokio::task::spawn_blocking(|| common::pg::database("relay_three"))
        .await
        .unwrap()
    else {
        return;
    };
    const TTL_MS: u64 = 2_000;
    let ttl = TTL_MS.to_string();
    let args = [
        "--store",
        &url,
        "--lease-ttl-ms",
        &ttl,
        "--lease-renew-ms",
        "500",
    ];
    let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
    let mut hosts: Vec<Option<Server>> = dirs
        .iter()
        .map(|d| Some(Server::start(d.path(), &args)))
        .collect();
    let host = |hosts: &[Option<Server>], i: usize| -> String {
        hosts[i].as_ref().expect("alive").addr.clone()
    };
    let counter = |hosts: &[Option<Server>], i: usize, name: &str| -> i64 {
        hosts[i]
            .as_ref()
            .expect("alive")
            .host_counter("relay", name)
    };
    let me = spacewake::protocol::Identity::generate();
    let once = |resume: Option<u64>| OpenOptions {
        once: true,
        resume,
        ..OpenOptions::default()
    };

    // X on host 0, which takes the space; Y on host 1, relayed to host 0.
    let (mut x, _) = Client::connect_creating(&format!("ws://{}/ws", host(&hosts, 0)), &me, "home")
        .await
        .unwrap();
    let piece = deploy(&mut x, json!({"value": 0})).await;
    track(&mut x, &piece, "value", None).await;
    assert_eq!(next_value(&mut x).await.1, json!(0));
    let (mut y, _) = Client::connect_with(
        &format!("ws://{}/ws", host(&hosts, 1)),
        &me,
        "home",
        once(None),
    )
    .await
    .expect("host 1 serves the space host 0 holds");
    assert_eq!(counter(&hosts, 1, "sessions"), 1, "relayed, not taken over");
    assert!(counter(&hosts, 0, "served") >= 1);
    track(&mut y, &piece, "value", None).await;
    assert_eq!(next_value(&mut y).await.1, json!(0));

    // Each sees the other's updates, under the same seqs.
    assert!(matches!(
        send(&mut x, &piece, "increment", json!({})).await,
        ServerMessage::Ack(_)
    ));
    let (sx, vx) = next_value(&mut x).await;
    let (sy, vy) = next_value(&mut y).await;
    assert_eq!((sx, vx), (sy, vy.clone()));
    assert_eq!(vy, json!(1));
    assert!(matches!(
        send(&mut y, &piece, "increment", json!({})).await,
        ServerMessage::Ack(_)
    ));
    assert_eq!(next_value(&mut x).await.1, json!(2));
    assert_eq!(next_value(&mut y).await.1, json!(2));

    // Webhooks through all three hosts: acknowledged once each, a repeat
    // through another host a duplicate.
    let ingest = |addr: &str, event: &str| {
        let body =
            json!({"piece": piece, "stream": ["increment"], "payload": {}, "eventId": event})
                .to_string();
        let headers = [
            ("x-spacewake-did", me.did()),
            (
                "x-spacewake-signature",
                spacewake::protocol::sign_ingest(&me, "home", body.as_bytes()),
            ),
        ];
        let (status, answer) = common::server::http(
            addr,
            "POST",
            "/api/spaces/home/events",
            &headers,
            body.as_bytes(),
        );
        assert_eq!(status, 200, "{answer}");
        serde_json::from_str::<serde_json::Value>(&answer).unwrap()
    };
    const HOOKS: usize = 30;
    for i in 0..HOOKS {
        let a = ingest(&host(&hosts, i % 3), &format!("w{i}"));
        assert_eq!(a["duplicate"], json!(false), "{a}");
    }
    let again = ingest(&host(&hosts, 2), "w0");
    assert_eq!(again["duplicate"], json!(true), "{again}");
    assert!(counter(&hosts, 1, "requests") >= 10);
    assert!(counter(&hosts, 2, "requests") >= 11);
    let total = 2 + HOOKS as i64;
    // Both reach the total, each seq once and in order.
    async fn drain_to(c: &mut Client, total: i64) -> u64 {
        let mut last = 0;
        loop {
            let (seq, v) = next_value(c).await;
            assert!(seq > last, "seq {seq} after {last}: an update twice");
            last = seq;
            if v == json!(total) {
                return seq;
            }
            assert!(v.as_i64().unwrap() < total, "{v} past {total}");
        }
    }
    let last_x = drain_to(&mut x, total).await;
    let last_y = drain_to(&mut y, total).await;
    assert_eq!(last_x, last_y);

    // The holder dies. The relayed session is told to reconnect (1012);
    // both clients resume on the survivors within TTL + 1 s.
    let killed = std::time::Instant::now();
    hosts[0].take().unwrap().kill();
    match y.next_update(std::time::Duration::from_secs(10)).await {
        Err(ClientError::Closed { code, .. }) => assert_eq!(code, Some(1012)),
        other => panic!("the relayed session did not end with 1012: {other:?}"),
    }
    assert!(x
        .next_update(std::time::Duration::from_secs(10))
        .await
        .is_err());
    assert_eq!(counter(&hosts, 1, "holderLost"), 1);
    let me = &me;
    let resume = |addr: String, since: u64| async move {
        let opts = OpenOptions {
            resume: Some(since),
            ..OpenOptions::default()
        };
        Client::connect_with(&format!("ws://{addr}/ws"), me, "home", opts).await
    };
    let (x2, y2) = tokio::join!(
        resume(host(&hosts, 2), last_x),
        resume(host(&hosts, 1), last_y)
    );
    let (mut x, mut y) = (x2.unwrap().0, y2.unwrap().0);
    let took = killed.elapsed();
    assert!(
        took <= std::time::Duration::from_millis(TTL_MS + 1_000),
        "resumed {took:?} after the kill"
    );
    track(&mut x, &piece, "value", Some(last_x)).await;
    track(&mut y, &piece, "value", Some(last_y)).await;
    assert!(matches!(
        send(&mut y, &piece, "increment", json!({})).await,
        ServerMessage::Ack(_)
    ));
    let (sx, vx) = next_value(&mut x).await;
    let (sy, vy) = next_value(&mut y).await;
    assert_eq!((sx, &vx), (sy, &vy));
    assert_eq!(vx, json!(total + 1), "nothing lost, nothing doubled");
    assert!(sx > last_x);
    for c in [&mut x, &mut y] {
        assert!(
            c.next_update(std::time::Duration::from_millis(300))
                .await
                .unwrap()
                .is_none(),
            "no update twice"
        );
    }

    // The relaying host dies: its client resumes on the holder.
    let (relayer, holder) = if counter(&hosts, 2, "sessions") >= 1 {
        (2, 1)
    } else {
        (1, 2)
    };
    assert_eq!(
        counter(&hosts, 1, "sessions") + counter(&hosts, 2, "sessions"),
        2
    );
    let (mut on_relayer, mut on_holder) = if relayer == 2 { (x, y) } else { (y, x) };
    hosts[relayer].take().unwrap().kill();
    assert!(on_relayer
        .next_update(std::time::Duration::from_secs(10))
        .await
        .is_err());
    let (mut back, _) = resume(host(&hosts, holder), sx).await.unwrap();
    track(&mut back, &piece, "value", Some(sx)).await;
    assert!(matches!(
        send(&mut on_holder, &piece, "increment", json!({})).await,
        ServerMessage::Ack(_)
    ));
    assert_eq!(next_value(&mut back).await.1, json!(total + 2));
    assert_eq!(next_value(&mut on_holder).await.1, json!(total + 2));
    assert!(
        back.next_update(std::time::Duration::from_millis(300))
            .await
            .unwrap()
            .is_none(),
        "no update twice"
    );
}

/// The relay's checks (`spec/fleet.md`, *Why a host cannot act as a
/// client it is not*): a relay request must be signed by the key the
/// registry holds for its sender, for this host, now; a session's
/// challenge is taken once; and even a real host's relayed open is opened
/// only with the client's own signature over that challenge. An operator
/// action sent to a host that does not hold the space is done by the
/// holder, vouched for by the host that checked the operator.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relay_requests_are_checked_and_operator_actions_are_relayed() {
    use common::server::Server;
    use spacewake::protocol::{Identity, RelayRequest};
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let Some(f) = FleetOfTwo::start("relay_checks").await else {
        return;
    };
    let b = Server::start(
        f.dir_b.path(),
        &f.args.iter().map(String::as_str).collect::<Vec<_>>(),
    );
    let b_key = Identity::load(&f.dir_b.path().join("host.key")).unwrap();
    let b_name = b.stats()["fleet"]["self"].as_str().unwrap().to_string();
    let a_name = f.a.stats()["fleet"]["self"].as_str().unwrap().to_string();
    let now = || {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64
    };
    // A relayed WebSocket upgrade to A, signed by `key` as B at `time`.
    let upgrade = |key: &Identity, time_ms: u64, nonce: &str| {
        let signature = RelayRequest {
            time_ms,
            from: &b_name,
            to: &a_name,
            method: "GET",
            path_and_query: "/ws",
            extra: nonce,
            body: b"",
        }
        .sign(key);
        let mut r = format!("ws://{}/ws", f.a.addr)
            .into_client_request()
            .unwrap();
        for (name, value) in [
            (spacewake::relay::FROM, b_name.clone()),
            (spacewake::relay::TIME, time_ms.to_string()),
            (spacewake::relay::EXTRA, nonce.to_string()),
            (spacewake::relay::SIGNATURE, signature),
        ] {
            r.headers_mut().insert(name, value.parse().unwrap());
        }
        tokio_tungstenite::connect_async(r)
    };
    let status = |e: tokio_tungstenite::tungstenite::Error| match e {
        tokio_tungstenite::tungstenite::Error::Http(r) => r.status().as_u16(),
        other => panic!("{other}"),
    };
    let refused_before = f.a.host_counter("relay", "refused");
    // Not B's key.
    let e = upgrade(&Identity::generate(), now(), "n1")
        .await
        .unwrap_err();
    assert_eq!(status(e), 401);
    // B's key, but stale.
    let e = upgrade(&b_key, now() - 120_000, "n1").await.unwrap_err();
    assert_eq!(status(e), 401);
    assert_eq!(f.a.host_counter("relay", "refused"), refused_before + 2);

    // B's key, now: accepted, with no challenge sent. An open signed over
    // another challenge is refused by A itself.
    use futures_util::{SinkExt, StreamExt};
    let nonce = spacewake::protocol::new_nonce();
    let (mut ws, _) = upgrade(&b_key, now(), &nonce).await.unwrap();
    let forged = json!({"type": "open", "space": "home", "did": f.me.did(),
        "signature": spacewake::protocol::sign_open(&f.me, "another-nonce", "home")});
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        forged.to_string(),
    ))
    .await
    .unwrap();
    let answer = ws.next().await.unwrap().unwrap().into_text().unwrap();
    assert!(answer.contains("badSignature"), "{answer}");
    // The same challenge again, even freshly signed: refused; and so is
    // anything that is not a challenge as hosts issue them.
    let e = upgrade(&b_key, now(), &nonce).await.unwrap_err();
    assert_eq!(status(e), 401);
    let e = upgrade(&b_key, now(), "n1").await.unwrap_err();
    assert_eq!(status(e), 401);
    assert_eq!(f.a.host_counter("relay", "refused"), refused_before + 4);
    // With the client's own signature over it, a fresh challenge opens —
    // also after more than a TTL in which B did nothing (and holds no
    // lease): its heartbeat keeps it a live host of the registry.
    tokio::time::sleep(std::time::Duration::from_millis(3_500)).await;
    let nonce = spacewake::protocol::new_nonce();
    let (mut ws, _) = upgrade(&b_key, now(), &nonce).await.unwrap();
    let open = json!({"type": "open", "space": "home", "did": f.me.did(),
        "signature": spacewake::protocol::sign_open(&f.me, &nonce, "home")});
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        open.to_string(),
    ))
    .await
    .unwrap();
    let answer = ws.next().await.unwrap().unwrap().into_text().unwrap();
    assert!(answer.contains("\"opened\""), "{answer}");

    // An operator action through B, signed by B's own key (an operator of
    // B, not of A): done on A, which holds the space.
    let relayed_before = b.host_counter("relay", "requests");
    let (code, body) = common::server::operator_call(
        &b,
        &b_key,
        now(),
        "PUT",
        "/api/operator/spaces/home/ledger/budget",
        Some(json!({"budgetMs": 5000})),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(
        b.host_counter("relay", "requests"),
        relayed_before + 1,
        "{body}"
    );

    // The same from B's console, signed in with B's token: done on A too,
    // and the console goes back to the space's page.
    let form = |addr: &str, path: &str, cookie: Option<&str>, body: &str| {
        use std::io::{Read, Write};
        let mut s = std::net::TcpStream::connect(addr).unwrap();
        let cookie = cookie.map_or(String::new(), |c| format!("Cookie: {c}\r\n"));
        let req = format!(
            "POST {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\
             Content-Type: application/x-www-form-urlencoded\r\nContent-Length: {}\r\n{cookie}\r\n{body}",
            body.len()
        );
        s.write_all(req.as_bytes()).unwrap();
        let mut raw = String::new();
        let _ = s.read_to_string(&mut raw);
        raw
    };
    let token = std::fs::read_to_string(f.dir_b.path().join("console.token")).unwrap();
    let signed_in = form(
        &b.addr,
        "/console/sign-in",
        None,
        &format!("token={}", token.trim()),
    );
    let cookie = signed_in
        .lines()
        .find_map(|l| {
            l.strip_prefix("set-cookie: ")
                .or_else(|| l.strip_prefix("Set-Cookie: "))
        })
        .and_then(|c| c.split(';').next())
        .unwrap_or_else(|| panic!("no session cookie: {signed_in}"))
        .to_string();
    let (relayed_before, served_before) = (
        b.host_counter("relay", "requests"),
        f.a.host_counter("relay", "served"),
    );
    let answer = form(
        &b.addr,
        "/console/spaces/home/budget",
        Some(&cookie),
        "budget=7000",
    );
    assert!(answer.starts_with("HTTP/1.1 303"), "{answer}");
    assert!(answer.contains("/console/spaces/home"), "{answer}");
    assert_eq!(b.host_counter("relay", "requests"), relayed_before + 1);
    assert_eq!(f.a.host_counter("relay", "served"), served_before + 1);
    let a_key = Identity::load(&f._dir_a.path().join("host.key")).unwrap();
    let (code, ledger) = common::server::operator_call(
        &f.a,
        &a_key,
        now(),
        "GET",
        "/api/operator/spaces/home/ledger",
        None,
    );
    assert_eq!(code, 200, "{ledger}");
    assert!(ledger.to_string().contains("7000"), "{ledger}");
    // A refusal from the holder is the console's refusal, with its message.
    let answer = form(
        &b.addr,
        "/console/spaces/home/entries/no-such-piece/0/pause",
        Some(&cookie),
        "",
    );
    assert!(answer.starts_with("HTTP/1.1 404"), "{answer}");
    assert_eq!(b.host_counter("relay", "requests"), relayed_before + 2);
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
        Self::start_with(test, &[]).await
    }

    /// With `a_args` given to host A only.
    async fn start_with(test: &'static str, a_args: &[&str]) -> Option<FleetOfTwo> {
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
        let arg_refs: Vec<&str> = args
            .iter()
            .map(String::as_str)
            .chain(a_args.iter().copied())
            .collect();
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
