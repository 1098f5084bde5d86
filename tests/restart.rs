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
