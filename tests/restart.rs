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

/// Appends an event to `space`'s stream `stream_key` of `piece` straight
/// into the file, as if accepted just before a crash.
fn append_while_down(data: &std::path::Path, space: &str, piece: &str, event_id: &str) {
    let store = spacewake::store::Store::open(
        spacewake::store::StoreConfig::new(data),
        std::sync::Arc::new(spacewake::clock::SystemClock),
        spacewake::metrics::Counters::new(),
    )
    .unwrap();
    let mut sp = store.open_space(space).unwrap();
    let stream = sp.read(piece).unwrap().unwrap().value["increment"]["$stream"]
        .as_str()
        .unwrap()
        .to_string();
    sp.append_event(
        spacewake::store::Author::principal("did:key:test"),
        spacewake::store::NewEvent {
            event_id: event_id.into(),
            stream,
            payload: json!({"amount": 41}),
            fired_by: "did:key:test".into(),
        },
    )
    .unwrap();
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
    append_while_down(dir.path(), "held", &piece, "pending-1");
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
