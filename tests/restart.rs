//! Restarts that lose nothing, end to end on real `spacewake serve`
//! processes: one host per data directory (its lock), a restarted host
//! taking over its own dead instance's leases at once, activations refused
//! by another host's live lease retried when it can expire, and graceful
//! shutdown on SIGTERM/SIGINT.

mod common;

use common::server::{wait_for, Server};
use common::wire::{connect, deploy, next_value, send, track};
use serde_json::json;
use spacewake::protocol::{Identity, ServerMessage};
use std::time::{Duration, Instant};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_serve_on_the_same_directory_exits_naming_the_first() {
    let dir = tempfile::tempdir().unwrap();
    let first = Server::start(dir.path(), &[]);
    let (code, log) = match Server::try_start(dir.path(), &[]) {
        Ok(_) => panic!("a second server started on the same data directory"),
        Err(e) => e,
    };
    assert_eq!(code, Some(1), "{log}");
    assert!(
        log.contains("is in use by another spacewake process"),
        "{log}"
    );
    assert!(log.contains(&format!("pid {}", first.pid())), "{log}");
    assert!(
        log.contains(&format!("listening on {}", first.addr)),
        "{log}"
    );
    assert!(log.contains(&dir.path().display().to_string()), "{log}");
    // The first one is untouched and still serves.
    let me = Identity::generate();
    let (mut c, _) = connect(&first, &me, "home").await;
    let piece = deploy(&mut c, json!({"value": 0})).await;
    assert!(matches!(
        send(&mut c, &piece, "increment", json!({})).await,
        ServerMessage::Ack(_)
    ));
}

/// SIGKILL leaves the dead process's lease live for its whole TTL (15 s by
/// default); the restarted host holds the directory's lock, so it knows
/// that process is dead and serves the space at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_host_takes_over_its_own_dead_instances_leases_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let me = Identity::generate();
    let first = Server::start(dir.path(), &[]);
    let (mut c, _) = connect(&first, &me, "home").await;
    let piece = deploy(&mut c, json!({"value": 0})).await;
    track(&mut c, &piece, "value", None).await;
    assert_eq!(next_value(&mut c).await.1, json!(0));
    send(&mut c, &piece, "increment", json!({})).await;
    assert_eq!(next_value(&mut c).await.1, json!(1));
    // The session holds the space active: its lease is live.
    first.kill();

    let restarted = Instant::now();
    let second = Server::start(dir.path(), &[]);
    let (mut c, _) = connect(&second, &me, "home").await;
    track(&mut c, &piece, "value", None).await;
    assert_eq!(next_value(&mut c).await.1, json!(1));
    send(&mut c, &piece, "increment", json!({})).await;
    assert_eq!(next_value(&mut c).await.1, json!(2));
    assert!(
        restarted.elapsed() < Duration::from_secs(5),
        "served after {:?}, not after the 15 s TTL",
        restarted.elapsed()
    );
    let addr = second.addr.clone();
    wait_for("the counters", || {
        second.space_counter("home", "lease", "takenOverFromOwnDeadInstance") == 1
    });
    assert_eq!(
        second.space_counter("home", "lease", "refused"),
        0,
        "{addr}"
    );
    assert_eq!(second.space_counter("home", "activation", "failures"), 0);
}

/// Gives `space`'s lease to another host until `expires_at_ms`.
fn foreign_lease(data: &std::path::Path, space: &str, expires_at_ms: u64) {
    let file = data.join("spaces").join(format!("{space}.sqlite"));
    let db = rusqlite::Connection::open(&file).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let n = db
        .execute(
            "UPDATE execution_lease SET holder = 'host-elsewhere/0123', expires_at_ms = ?1",
            [expires_at_ms as i64],
        )
        .unwrap();
    assert_eq!(n, 1, "the space has a lease row");
}

fn now_ms() -> u64 {
    use spacewake::clock::Clock;
    spacewake::clock::SystemClock.now_ms()
}

/// An event acknowledged before a crash, in a space whose lease another
/// host holds for 1.5 s more: boot discovery's activation is refused, and
/// retried at that lease's expiry (not polled, not left for a client).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn boot_discovery_refused_by_a_live_foreign_lease_is_retried_when_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let me = Identity::generate();
    let piece;
    {
        let first = Server::start(dir.path(), &[]);
        let (mut c, _) = connect(&first, &me, "held").await;
        piece = deploy(&mut c, json!({"value": 0})).await;
        c.close().await.unwrap();
        wait_for("park", || {
            first.space_counter("held", "activation", "parks") >= 1
        });
        first.kill();
    }
    common::append_while_down(
        dir.path(),
        "held",
        &piece,
        "increment",
        "pending-1",
        json!({"amount": 41}),
    );
    let expires = now_ms() + 1_500;
    foreign_lease(dir.path(), "held", expires);

    let second = Server::start(dir.path(), &[]);
    wait_for("the event, delivered by the retry", || {
        second.space_counter("held", "events", "processed") >= 1
    });
    let delivered = now_ms();
    assert!(
        delivered >= expires,
        "delivered {} ms before the lease expired",
        expires - delivered
    );
    assert!(
        delivered < expires + 2_000,
        "delivered {} ms after the lease expired",
        delivered - expires
    );
    assert_eq!(second.space_counter("held", "lease", "refused"), 1);
    assert_eq!(second.space_counter("held", "activation", "failures"), 1);
    assert_eq!(
        second.space_counter("held", "activation", "retriedAfterLease"),
        1
    );
    assert_eq!(second.space_counter("held", "lease", "takenOver"), 1);
    assert_eq!(
        second.space_counter("held", "lease", "takenOverFromOwnDeadInstance"),
        0,
        "another host's lease keeps the TTL rule"
    );
    // The directory no longer says undelivered, and the value moved.
    let store = spacewake::store::Store::open(
        spacewake::store::StoreConfig::new(dir.path()),
        std::sync::Arc::new(spacewake::clock::SystemClock),
        spacewake::metrics::Counters::new(),
    )
    .unwrap();
    wait_for("the undelivered flag to clear", || {
        !store.directory().get("held").unwrap().unwrap().undelivered
    });
    let (mut c, _) = connect(&second, &me, "held").await;
    track(&mut c, &piece, "value", None).await;
    assert_eq!(next_value(&mut c).await.1, json!(41));
}

/// A scheduled wake whose activation a live foreign lease refuses is
/// deferred until that lease can expire, then fired.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduled_wake_refused_by_a_live_foreign_lease_fires_when_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let me = Identity::generate();
    {
        let first = Server::start(dir.path(), &[]);
        let (mut c, _) = connect(&first, &me, "sched").await;
        // The counter declares 60- and 120-minute entries.
        deploy(&mut c, json!({"value": 0})).await;
        c.close().await.unwrap();
        wait_for("park", || {
            first.space_counter("sched", "activation", "parks") >= 1
        });
        first.kill();
    }
    // The next host runs three hours ahead: both entries are due at boot.
    let offset: u64 = 3 * 3_600_000;
    let expires = now_ms() + offset + 1_500;
    foreign_lease(dir.path(), "sched", expires);
    let second = Server::start(dir.path(), &["--clock-offset-ms", &offset.to_string()]);
    wait_for("the wakes, fired after the lease expired", || {
        second.space_counter("sched", "schedule", "fired") >= 2
    });
    let fired = now_ms() + offset;
    assert!(fired >= expires, "fired before the lease expired");
    assert!(
        fired < expires + 2_000,
        "fired {} ms after the lease expired",
        fired - expires
    );
    assert!(second.space_counter("sched", "lease", "refused") >= 1);
    assert_eq!(
        second.space_counter("sched", "activation", "retriedAfterLease"),
        1
    );
    assert_eq!(second.space_counter("sched", "activation", "failures"), 1);
}

/// The next frames of a session the server ends for shutdown: the
/// `internal` error saying so, then close 1011 with a reason saying so.
async fn told_shutting_down(c: &mut spacewake::protocol::client::Client) {
    let told = loop {
        match c.recv(Duration::from_secs(5)).await {
            Ok(Some(ServerMessage::Error(e))) => break e,
            Ok(Some(_)) => continue,
            other => panic!("expected the shutdown error frame, got {other:?}"),
        }
    };
    assert_eq!(told.code.as_str(), "internal");
    assert!(told.id.is_none());
    assert!(told.message.contains("shutting down"), "{told:?}");
    match c.recv(Duration::from_secs(5)).await {
        Err(spacewake::protocol::client::ClientError::Closed { code, reason }) => {
            assert_eq!(code, Some(1011));
            assert!(reason.contains("shutting down"), "{reason}");
        }
        other => panic!("expected close 1011, got {other:?}"),
    }
}

/// What a space's file says after a clean stop: the lease released (expiry
/// 0) and the WAL checkpointed away.
fn released_and_checkpointed(data: &std::path::Path, space: &str) {
    let file = data.join("spaces").join(format!("{space}.sqlite"));
    let wal = std::fs::metadata(format!("{}-wal", file.display()))
        .map(|m| m.len())
        .unwrap_or(0);
    assert_eq!(wal, 0, "{space}: the WAL was checkpointed and truncated");
    let db = rusqlite::Connection::open(&file).unwrap();
    let expires: i64 = db
        .query_row("SELECT expires_at_ms FROM execution_lease", [], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(expires, 0, "{space}: the lease was released");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_tells_every_session_releases_every_lease_and_a_new_process_serves_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let me = Identity::generate();
    // Spaces stay active for a minute after their last session.
    let mut server = Server::start(dir.path(), &["--idle-park-ms", "60000"]);
    let (mut a, _) = connect(&server, &me, "a").await;
    let pa = deploy(&mut a, json!({"value": 0})).await;
    track(&mut a, &pa, "value", None).await;
    assert_eq!(next_value(&mut a).await.1, json!(0));
    let (mut b, _) = connect(&server, &me, "b").await;
    let pb = deploy(&mut b, json!({"value": 5})).await;
    track(&mut b, &pb, "value", None).await;
    assert_eq!(next_value(&mut b).await.1, json!(5));
    send(&mut b, &pb, "increment", json!({})).await;
    assert_eq!(next_value(&mut b).await.1, json!(6));
    let (c, _) = connect(&server, &me, "c").await;
    c.close().await.unwrap();
    wait_for("three active spaces", || {
        server.stats()["activeSpaces"].as_array().map(|a| a.len()) == Some(3)
    });

    let t = Instant::now();
    server.signal(libc::SIGTERM);
    told_shutting_down(&mut a).await;
    told_shutting_down(&mut b).await;
    let status = server
        .wait_exit(Duration::from_secs(10))
        .expect("exits within the grace period");
    assert!(status.success(), "{status:?}\n{}", server.log_text());
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    let log = server.log_text();
    let line = log
        .lines()
        .find(|l| l.contains("shut down after SIGTERM"))
        .unwrap_or_else(|| panic!("no shutdown line in:\n{log}"));
    assert!(
        line.contains("2 sessions told and closed, 3 spaces stopped"),
        "{line}"
    );
    assert!(!line.contains("abandoned"), "{line}");
    for space in ["a", "b", "c"] {
        released_and_checkpointed(dir.path(), space);
    }

    // The next process serves the same spaces at once: nothing to take over.
    let second = Server::start(dir.path(), &[]);
    let (mut b, _) = connect(&second, &me, "b").await;
    track(&mut b, &pb, "value", None).await;
    assert_eq!(next_value(&mut b).await.1, json!(6));
    send(&mut b, &pb, "increment", json!({})).await;
    assert_eq!(next_value(&mut b).await.1, json!(7));
    assert_eq!(second.space_counter("b", "lease", "refused"), 0);
    assert_eq!(second.space_counter("b", "lease", "takenOver"), 0);
    assert_eq!(
        second.space_counter("b", "lease", "takenOverFromOwnDeadInstance"),
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigint_shuts_down_the_same_way() {
    let dir = tempfile::tempdir().unwrap();
    let me = Identity::generate();
    let mut server = Server::start(dir.path(), &[]);
    let (mut a, _) = connect(&server, &me, "a").await;
    let pa = deploy(&mut a, json!({"value": 0})).await;
    track(&mut a, &pa, "value", None).await;
    assert_eq!(next_value(&mut a).await.1, json!(0));
    server.signal(libc::SIGINT);
    told_shutting_down(&mut a).await;
    let status = server.wait_exit(Duration::from_secs(10)).expect("exits");
    assert_eq!(status.code(), Some(0), "{}", server.log_text());
    assert!(server.log_text().contains("shut down after SIGINT"));
    released_and_checkpointed(dir.path(), "a");
}

/// The tally's counts, straight from the space's file (no client opens it).
fn votes(
    data: &std::path::Path,
    space: &str,
    piece: &str,
) -> serde_json::Map<String, serde_json::Value> {
    let file = data.join("spaces").join(format!("{space}.sqlite"));
    let db = rusqlite::Connection::open_with_flags(
        &file,
        rusqlite::OpenFlags::SQLITE_OPEN_READ_WRITE | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )
    .unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    let text: Option<String> = db
        .query_row(
            "SELECT value FROM docs WHERE id = ?1",
            [format!("{piece}/argument")],
            |r| r.get(0),
        )
        .ok();
    let v: serde_json::Value = text
        .map(|t| serde_json::from_str(&t).unwrap())
        .unwrap_or(json!({}));
    v["votes"].as_object().cloned().unwrap_or_default()
}

/// Whether the host directory says `space` has undelivered events.
fn undelivered(data: &std::path::Path, space: &str) -> bool {
    let db = rusqlite::Connection::open(data.join("host.sqlite")).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.query_row(
        "SELECT undelivered FROM spaces WHERE id = ?1",
        [space],
        |r| r.get::<_, i64>(0),
    )
    .unwrap()
        != 0
}

/// Twenty rounds of: several clients send events (over the WebSocket and
/// HTTP ingest), the host is SIGKILLed at a random moment, and restarted at
/// once with no client connecting. Every acknowledged event must then be
/// processed, exactly once, within 2 s of the restart, and the directory's
/// undelivered flag cleared — no round waiting for the 15 s lease TTL.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_crashes_at_random_moments_lose_no_acknowledged_event_and_process_each_once() {
    use spacewake::protocol::messages::SendEvent;
    use spacewake::protocol::{ClientMessage, PathSegment};
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::{Arc, Mutex};

    const SPACES: [&str; 3] = ["c0", "c1", "c2"];
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().to_path_buf();
    let owner = Identity::generate();
    let tally = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/tally-record.tsx"),
    )
    .unwrap();
    let mut server = Server::start(&data, &[]);
    let mut total = 0usize;
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut slowest = Duration::ZERO;
    for round in 0..20 {
        // Fresh tally pieces each round: a handler's cost grows with the
        // document it writes, and the test is about restarts, not that.
        let mut pieces = Vec::new();
        for space in SPACES {
            let (mut c, _) = connect(&server, &owner, space).await;
            let id = c.fresh_id();
            let reply = c
                .request(ClientMessage::Deploy(
                    spacewake::protocol::messages::Deploy {
                        id,
                        entry: "tally.tsx".into(),
                        files: std::collections::BTreeMap::from([(
                            "tally.tsx".to_string(),
                            tally.clone(),
                        )]),
                        export: None,
                        argument: None,
                    },
                ))
                .await
                .unwrap();
            match reply {
                ServerMessage::Deployed(d) => pieces.push(d.piece),
                other => panic!("{other:?}"),
            }
        }
        let acked: Arc<Mutex<Vec<HashSet<String>>>> =
            Arc::new(Mutex::new(vec![HashSet::new(); SPACES.len()]));
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        // Two WebSocket clients per space.
        for (k, space) in SPACES.iter().enumerate() {
            for w in 0..2 {
                let url = server.ws_url();
                let (owner, piece, acked, stop) = (
                    owner.clone(),
                    pieces[k].clone(),
                    acked.clone(),
                    stop.clone(),
                );
                let space = space.to_string();
                tasks.push(tokio::spawn(async move {
                    let Ok((mut c, _)) =
                        spacewake::protocol::client::Client::connect(&url, &owner, &space).await
                    else {
                        return;
                    };
                    c.set_request_timeout(Duration::from_secs(5));
                    let mut n = 0;
                    while !stop.load(Ordering::Relaxed) {
                        let event = format!("r{round}-w{w}-{n}");
                        n += 1;
                        let id = c.fresh_id();
                        let send = ClientMessage::Send(SendEvent {
                            id,
                            piece: piece.clone(),
                            stream: vec![PathSegment::Key("vote".into())],
                            payload: json!({ "choice": event }),
                            event_id: Some(event.clone()),
                        });
                        match c.request(send).await {
                            Ok(ServerMessage::Ack(_)) => {
                                acked.lock().unwrap()[k].insert(event);
                            }
                            _ => return,
                        }
                    }
                }));
            }
        }
        // And one webhook-style ingester across the spaces.
        {
            let (addr, owner, pieces, acked, stop) = (
                server.addr.clone(),
                owner.clone(),
                pieces.clone(),
                acked.clone(),
                stop.clone(),
            );
            tasks.push(tokio::task::spawn_blocking(move || {
                let mut n = 0usize;
                while !stop.load(Ordering::Relaxed) {
                    let k = n % SPACES.len();
                    let event = format!("r{round}-h-{n}");
                    n += 1;
                    let body = json!({"piece": pieces[k], "stream": ["vote"],
                                      "payload": {"choice": event}, "eventId": event})
                    .to_string();
                    let headers = [
                        ("x-spacewake-did", owner.did()),
                        (
                            "x-spacewake-signature",
                            spacewake::protocol::sign_ingest(&owner, SPACES[k], body.as_bytes()),
                        ),
                    ];
                    let path = format!("/api/spaces/{}/events", SPACES[k]);
                    match common::server::try_http(&addr, "POST", &path, &headers, body.as_bytes())
                    {
                        Ok((200, _)) => {
                            acked.lock().unwrap()[k].insert(event);
                        }
                        _ => return,
                    }
                }
            }));
        }
        // A random moment, then SIGKILL.
        let after = Duration::from_millis(30 + next() % 370);
        tokio::time::sleep(after).await;
        server.signal(libc::SIGKILL);
        server.wait_exit(Duration::from_secs(10)).expect("killed");
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            let _ = tokio::time::timeout(Duration::from_secs(15), t).await;
        }

        let backlog: Vec<usize> = SPACES
            .iter()
            .enumerate()
            .map(|(k, space)| {
                let v = votes(&data, space, &pieces[k]);
                acked.lock().unwrap()[k]
                    .iter()
                    .filter(|e| !v.contains_key(*e))
                    .count()
            })
            .collect();
        // Restart at once; nobody connects.
        let restarted = Instant::now();
        server = Server::start(&data, &[]);
        let listening = restarted.elapsed();
        let expected = acked.lock().unwrap().clone();
        let deadline = restarted + Duration::from_secs(2);
        loop {
            let done = SPACES.iter().enumerate().all(|(k, space)| {
                let v = votes(&data, space, &pieces[k]);
                !undelivered(&data, space) && expected[k].iter().all(|e| v.contains_key(e))
            });
            if done {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "round {round} (killed after {after:?}): not delivered within 2 s of the restart"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        slowest = slowest.max(restarted.elapsed());
        eprintln!(
            "round {round}: killed after {after:?}, backlog {backlog:?}, delivered {:?} after the restart ({} ms to listen)",
            restarted.elapsed(),
            listening.as_millis()
        );
        for (k, space) in SPACES.iter().enumerate() {
            let v = votes(&data, space, &pieces[k]);
            for (event, count) in &v {
                assert_eq!(
                    count,
                    &json!(1),
                    "round {round}: {space} processed {event} {count} times"
                );
            }
            assert_eq!(
                server.space_counter(space, "lease", "refused"),
                0,
                "round {round}: {space} waited for a lease"
            );
        }
        total += expected.iter().map(HashSet::len).sum::<usize>();
    }
    assert!(
        total > 200,
        "only {total} events were acknowledged in 20 rounds"
    );
    eprintln!("{total} acknowledged events over 20 crashes; slowest delivery {slowest:?}");
}
