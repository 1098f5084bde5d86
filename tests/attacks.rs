//! Issue 31, the pieces' side: a WRITE grantee deploys into the owner's
//! space (on a real `serve` process, over the wire) and tries to reach the
//! host's entry points, forge a frame, hook the engine's Error machinery,
//! patch a hidden intrinsic, create builders outside a run, nest a document
//! past what loads and spawn without bound. Each attempt fails in the
//! grantee's own action; the owner's piece computes, counts and keeps its
//! secret as before, before and after a restart; and a piece the host cannot
//! load is set aside while the space serves the rest.

mod common;

use common::server::{wait_for, Server};
use common::wire::{connect, deploy_runtime_fixture, dotted};
use serde_json::{json, Value};
use spacewake::protocol::{Identity, ServerMessage};
use std::path::Path;
use std::time::Duration;

const SPACE: &str = "shared";

async fn deploy(c: &mut spacewake::protocol::client::Client, name: &str) -> String {
    match deploy_runtime_fixture(c, name, json!({})).await {
        ServerMessage::Deployed(d) => d.piece,
        other => panic!("deploy {name}: {other:?}"),
    }
}

async fn send(
    c: &mut spacewake::protocol::client::Client,
    piece: &str,
    stream: &str,
    payload: Value,
) -> ServerMessage {
    use spacewake::protocol::messages::SendEvent;
    use spacewake::protocol::ClientMessage;
    let id = c.fresh_id();
    c.request(ClientMessage::Send(SendEvent {
        id,
        piece: piece.into(),
        stream: dotted(stream),
        payload,
        event_id: None,
    }))
    .await
    .unwrap()
}

async fn read(c: &mut spacewake::protocol::client::Client, piece: &str, path: &str) -> Value {
    use spacewake::protocol::messages::ReadValue;
    use spacewake::protocol::ClientMessage;
    let id = c.fresh_id();
    match c
        .request(ClientMessage::Read(ReadValue {
            id,
            piece: Some(piece.into()),
            doc: None,
            path: Some(dotted(path)),
        }))
        .await
        .unwrap()
    {
        ServerMessage::Value(v) => v.value,
        other => panic!("read {path}: {other:?}"),
    }
}

async fn ack(
    c: &mut spacewake::protocol::client::Client,
    piece: &str,
    stream: &str,
    payload: Value,
) {
    let r = send(c, piece, stream, payload).await;
    assert!(matches!(r, ServerMessage::Ack(_)), "send {stream}: {r:?}");
}

/// Lets `grantee` write into `SPACE` (the directory, as an operator would).
fn grant_write(data: &Path, grantee: &Identity) {
    let store = spacewake::store::Store::open(
        spacewake::store::StoreConfig::new(data),
        std::sync::Arc::new(spacewake::clock::SystemClock),
        spacewake::metrics::Counters::new(),
    )
    .unwrap();
    store
        .directory()
        .set_grant(SPACE, &grantee.did(), Some("write"))
        .unwrap();
}

fn stop(mut server: Server) {
    server.signal(15);
    assert!(
        server.wait_exit(Duration::from_secs(20)).is_some(),
        "the server stops"
    );
}

fn handler_runs(server: &Server) -> i64 {
    server.space_counter(SPACE, "actions", "handlerRuns")
}

/// The nesting of `v` in arrays and objects.
fn depth(v: &Value) -> usize {
    spacewake::store::value_depth(v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_grantee_cannot_reach_the_host_the_realm_or_the_owners_piece() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let owner = Identity::generate();
    let grantee = Identity::generate();
    let (mut o, _) = connect(&server, &owner, SPACE).await;
    let recorder = deploy(&mut o, "owner.tsx").await;
    grant_write(dir.path(), &grantee);
    let (mut g, opened) = connect(&server, &grantee, SPACE).await;
    assert_eq!(opened.access.as_str(), "write");
    let probe = deploy(&mut g, "probe.tsx").await;

    // 1. The module namespace holds no host entry point, and a value shaped
    //    like a run's result stays a value.
    assert_eq!(read(&mut g, &probe, "hostOnly").await, json!([]));
    assert_eq!(
        read(&mut g, &probe, "forged").await,
        json!({"value": "v", "built": {"cells": [{"id": "program/x", "initial": "pwned"}]}})
    );

    // 2. The Error hook and the iterator helpers cannot be changed; the
    //    owner's run that throws feeds nothing to the grantee.
    let before = handler_runs(&server);
    ack(&mut g, &probe, "hookStack", json!({})).await;
    ack(&mut g, &probe, "patchHelpers", json!({})).await;
    ack(&mut o, &recorder, "fail", json!({})).await;
    ack(&mut g, &probe, "readStash", json!({})).await;
    // 3. A builder after an await throws in the grantee's own handler.
    ack(&mut g, &probe, "late", json!({})).await;
    // The realm walk from a handler, a spawned piece and a bound handler.
    ack(&mut g, &probe, "walk", json!({})).await;
    ack(&mut g, &probe, "spawnChild", json!({})).await;
    ack(&mut g, &probe, "bindWalk", json!({})).await;
    wait_for("the probes ran", || handler_runs(&server) >= before + 8);
    assert_eq!(
        read(&mut g, &probe, "hookOutcome").await,
        json!("TypeError")
    );
    assert_eq!(
        read(&mut g, &probe, "helperOutcome").await,
        json!("TypeError")
    );
    assert_eq!(read(&mut g, &probe, "stolen").await, json!([]));
    assert_eq!(read(&mut o, &recorder, "doubled").await, json!([2, 4, 6]));
    let late = read(&mut g, &probe, "lateOutcome").await;
    assert!(
        late.as_str()
            .unwrap_or("")
            .contains("pattern() can only be called"),
        "{late}"
    );
    assert_eq!(
        read(&mut g, &probe, "found").await,
        json!([]),
        "from a handler"
    );
    assert_eq!(
        read(&mut g, &probe, "walked").await,
        json!([]),
        "from a derivation"
    );
    let before = handler_runs(&server);
    ack(&mut g, &probe, "kids.0.walk", json!({})).await;
    ack(&mut g, &probe, "bound.0", json!({})).await;
    wait_for("the made pieces walked", || {
        handler_runs(&server) >= before + 2
    });
    assert_eq!(
        read(&mut g, &probe, "kids.0.found").await,
        json!([]),
        "from a spawned piece"
    );
    assert_eq!(
        read(&mut g, &probe, "boundFound").await,
        json!([]),
        "from a bound handler"
    );

    // 4. Nesting past what loads is refused when written, with a reason.
    let refused = server.space_counter(SPACE, "actions", "refused");
    for _ in 0..3 {
        ack(&mut g, &probe, "deepen", json!({"levels": 45})).await;
    }
    wait_for("the too-deep write refused", || {
        server.space_counter(SPACE, "actions", "refused") == refused + 1
    });
    let deep = read(&mut g, &probe, "deep").await;
    assert!(
        depth(&deep) <= spacewake::store::MAX_VALUE_DEPTH,
        "{}",
        depth(&deep)
    );
    assert!(
        depth(&deep) > 80,
        "the first two nestings applied: {}",
        depth(&deep)
    );

    // 5. One run may create a bounded number of pieces.
    let refused = server.space_counter(SPACE, "actions", "refused");
    ack(&mut g, &probe, "spawnMany", json!({"n": 1001})).await;
    wait_for("the spawn storm refused", || {
        server.space_counter(SPACE, "actions", "refused") == refused + 1
    });
    assert_eq!(read(&mut g, &probe, "many").await, json!([]));

    // 6. A reference in an event hands a piece nothing it was not given:
    //    the probe's handler sent a link to the owner's count cannot write it.
    let before = handler_runs(&server);
    ack(
        &mut g,
        &probe,
        "writeThrough",
        json!({"target": {"$link": {"doc": recorder, "path": ["count"]}}}),
    )
    .await;
    wait_for("the write-through attempt ran", || {
        handler_runs(&server) == before + 1
    });

    // The owner's recorder counts by one, before and after a restart (what
    // its program and documents hold is its own).
    let before = handler_runs(&server);
    ack(&mut o, &recorder, "record", json!({})).await;
    wait_for("the owner's event", || handler_runs(&server) == before + 1);
    drop(o);
    drop(g);
    stop(server);
    let server = Server::start(dir.path(), &[]);
    let (mut o, _) = connect(&server, &owner, SPACE).await;
    ack(&mut o, &recorder, "record", json!({})).await;
    wait_for("the owner's event after the restart", || {
        handler_runs(&server) == 1
    });
    assert_eq!(read(&mut o, &recorder, "count").await, json!(2));
    assert_eq!(read(&mut o, &recorder, "doubled").await, json!([2, 4, 6]));
    assert_eq!(server.space_counter(SPACE, "actions", "piecesSetAside"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_piece_that_cannot_load_is_set_aside_and_the_space_serves_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let owner = Identity::generate();
    let (mut o, _) = connect(&server, &owner, SPACE).await;
    let recorder = deploy(&mut o, "owner.tsx").await;
    let probe = deploy(&mut o, "probe.tsx").await;
    ack(&mut o, &probe, "spawnChild", json!({})).await;
    ack(&mut o, &recorder, "record", json!({})).await;
    wait_for("both ran", || handler_runs(&server) == 2);
    drop(o);
    stop(server);

    let child: String;
    // The probe's listing now names an export its program does not have
    // (what a program that no longer loads looks like to an activation).
    {
        use spacewake::store::{Author, CommitClass, CommitRequest, DocOp, PathSeg};
        let store = spacewake::store::Store::open(
            spacewake::store::StoreConfig::new(dir.path()),
            std::sync::Arc::new(spacewake::clock::SystemClock),
            spacewake::metrics::Counters::new(),
        )
        .unwrap();
        let mut space = store.open_space(SPACE).unwrap();
        let mut req = CommitRequest::new(CommitClass::Authored, Author::principal("test"));
        req.ops.push(DocOp::Patch {
            id: "space/pieces".into(),
            path: vec![PathSeg::Key(probe.clone()), PathSeg::Key("export".into())],
            value: json!("#99"),
        });
        space.commit(req).unwrap();
        let listed = space.read("space/pieces").unwrap().unwrap().value;
        child = listed
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, info)| info["parent"] == json!(probe))
            .map(|(id, _)| id.clone())
            .expect("the piece the probe made");
    }
    // An event for it, acknowledged before the host went down.
    common::append_while_down(dir.path(), SPACE, &probe, "walk", "ev-walk", json!({}));

    let server = Server::start(dir.path(), &[]);
    let (mut o, _) = connect(&server, &owner, SPACE).await;
    ack(&mut o, &recorder, "record", json!({})).await;
    wait_for("the owner's event", || handler_runs(&server) == 1);
    assert_eq!(read(&mut o, &recorder, "count").await, json!(2));
    // The probe is set aside (the piece it made loads, and serves); its
    // pending event is kept as a dead letter, not run and not lost, and a
    // new one is refused.
    assert_eq!(server.space_counter(SPACE, "actions", "piecesSetAside"), 1);
    wait_for("the event dead-lettered", || {
        server.space_counter(SPACE, "events", "deadLettered") == 1
    });
    match send(&mut o, &probe, "walk", json!({})).await {
        ServerMessage::Error(e) => {
            assert!(e.message.contains("is set aside"), "{}", e.message);
            assert!(e.details.unwrap()["setAside"].is_string());
        }
        other => panic!("a send to a set-aside piece: {other:?}"),
    }
    let before = handler_runs(&server);
    ack(&mut o, &child, "walk", json!({})).await;
    wait_for("the made piece still serves", || {
        handler_runs(&server) == before + 1
    });
    drop(o);
    stop(server);
    // Operators see which piece is set aside and why.
    let store = spacewake::store::Store::open(
        spacewake::store::StoreConfig::new(dir.path()),
        std::sync::Arc::new(spacewake::clock::SystemClock),
        spacewake::metrics::Counters::new(),
    )
    .unwrap();
    let pieces = spacewake::operator::pieces(&store, SPACE).unwrap();
    let shown = |id: &str| {
        pieces
            .iter()
            .find(|p| p.id == id)
            .unwrap()
            .set_aside
            .clone()
    };
    assert!(
        shown(&probe).is_some_and(|r| r.contains("#99")),
        "{:?}",
        shown(&probe)
    );
    assert_eq!(shown(&recorder), None);
    assert_eq!(shown(&child), None);
    drop(store);

    // The remedy for a piece that no longer loads: delete it.
    let out = common::server::spacewake()
        .args([
            "pieces", "delete", "--space", SPACE, "--piece", &probe, "--data",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let store = spacewake::store::Store::open(
        spacewake::store::StoreConfig::new(dir.path()),
        std::sync::Arc::new(spacewake::clock::SystemClock),
        spacewake::metrics::Counters::new(),
    )
    .unwrap();
    let pieces = spacewake::operator::pieces(&store, SPACE).unwrap();
    assert!(pieces.iter().all(|p| p.id != probe), "{pieces:?}");
    assert!(pieces.iter().all(|p| p.set_aside.is_none()), "{pieces:?}");
    assert_eq!(pieces.len(), 2, "the recorder and the made piece stay");
}

/// The server's resident memory, in bytes.
fn rss(server: &Server) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{}/status", server.pid())).unwrap();
    let kb: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap();
    kb * 1024
}

/// 11. Sorts that run the engine out of memory, one after another, leave
/// the host holding about the engine's limit, not a multiple of it (the
/// engine's freed large blocks hand their pages back): 93 MB more than at
/// rest before, against a 64 MiB limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_that_keeps_running_out_of_memory_holds_about_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let owner = Identity::generate();
    let (mut o, _) = connect(&server, &owner, SPACE).await;
    let hog = deploy(&mut o, "hog.tsx").await;
    ack(&mut o, &hog, "sortBomb", json!({"n": 1000})).await;
    wait_for("a small sort", || handler_runs(&server) == 1);
    let at_rest = rss(&server);
    for i in 0..4 {
        ack(&mut o, &hog, "sortBomb", json!({"n": 3_000_000})).await;
        wait_for("the sort ran", || handler_runs(&server) == 2 + i);
    }
    assert!(server.space_counter(SPACE, "actions", "outOfMemory") >= 3);
    let grown = rss(&server).saturating_sub(at_rest);
    let limit = spacewake::sandbox::SandboxConfig::default().memory_limit_bytes as u64;
    assert!(
        grown < limit + (16 << 20),
        "resident memory grew {} MiB over a {} MiB engine limit",
        grown >> 20,
        limit >> 20
    );
    // The space still serves.
    ack(&mut o, &hog, "sortBomb", json!({"n": 10})).await;
    wait_for("a small sort after", || handler_runs(&server) == 6);
    assert_eq!(read(&mut o, &hog, "runs").await, json!(10));
}
