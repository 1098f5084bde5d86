//! Pieces can be deleted: by the space's owner over the protocol, by an
//! operator through the API, and with the CLI on a data directory. The
//! piece's schedule entries leave the index with it and its pending wakes
//! end, counted. A real `spacewake serve`, real WebSocket sessions.

mod common;

use common::server::{spacewake, wait_for, Server};
use common::wire::{connect, deploy, deploy_runtime_fixture};
use serde_json::{json, Value};
use spacewake::clock::{Clock, SystemClock};
use spacewake::protocol::messages::{DeletePiece, ErrorCode, ReadValue};
use spacewake::protocol::{ClientMessage, Identity, ServerMessage};

fn call(
    server: &Server,
    who: &Identity,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    // A distinct time per request: two identical requests in one
    // millisecond would carry one signature, refused as a replay.
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let time = SystemClock.now_ms() + N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    common::server::operator_call(server, who, time, method, path, body)
}

async fn delete(c: &mut spacewake::protocol::client::Client, piece: &str) -> ServerMessage {
    let id = c.fresh_id();
    c.request(ClientMessage::Delete(DeletePiece {
        id,
        piece: piece.into(),
    }))
    .await
    .unwrap()
}

fn entries_of(server: &Server, op: &Identity, piece: &str) -> usize {
    let (status, v) = call(
        server,
        op,
        "GET",
        "/api/operator/schedules?space=demo",
        None,
    );
    assert_eq!(status, 200, "{v}");
    v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["row"]["piece"] == piece || e["piece"] == piece)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_owner_and_an_operator_delete_pieces_and_their_wakes_end_counted() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let op = Identity::load(&server.data.join("host.key")).unwrap();
    let owner = Identity::generate();
    let (mut c, _) = connect(&server, &owner, "demo").await;

    // A piece whose wake fails, so a retry is pending when it is deleted.
    let failing =
        match deploy_runtime_fixture(&mut c, "failing-wake.tsx", json!({"fail": true})).await {
            ServerMessage::Deployed(d) => d.piece,
            other => panic!("deploy: {other:?}"),
        };
    let counter = deploy(&mut c, json!({"value": 1})).await;
    assert_eq!(entries_of(&server, &op, &failing), 1);
    assert_eq!(entries_of(&server, &op, &counter), 2);
    let (status, v) = call(
        &server,
        &op,
        "POST",
        &format!("/api/operator/spaces/demo/schedules/{failing}/0/trigger"),
        None,
    );
    assert_eq!(status, 200, "{v}");
    wait_for("the failed wake planned for retry", || {
        server.space_counter("demo", "schedule", "retried") == 1
    });
    let (_, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/demo/dead-letters",
        None,
    );
    assert_eq!(v["failing"].as_array().unwrap().len(), 1, "{v}");

    // A writer may not delete; the owner may.
    let writer = Identity::generate();
    let (status, v) = call(
        &server,
        &op,
        "POST",
        "/api/operator/spaces/demo/grants",
        Some(json!({"did": writer.did(), "access": "write"})),
    );
    assert_eq!(status, 200, "{v}");
    let (mut w, _) = connect(&server, &writer, "demo").await;
    match delete(&mut w, &failing).await {
        ServerMessage::Error(e) => {
            assert_eq!(e.code, ErrorCode::Forbidden);
            assert!(e.message.contains("OWNER"), "{}", e.message);
        }
        other => panic!("a writer's delete: {other:?}"),
    }
    assert_eq!(entries_of(&server, &op, &failing), 1, "nothing deleted");

    match delete(&mut c, &failing).await {
        ServerMessage::Ack(_) => {}
        other => panic!("the owner's delete: {other:?}"),
    }
    assert_eq!(server.space_counter("demo", "actions", "piecesDeleted"), 1);
    assert_eq!(
        server.space_counter("demo", "schedule", "endedByDeletion"),
        1,
        "the pending retry ended with the piece"
    );
    assert_eq!(entries_of(&server, &op, &failing), 0, "out of the index");
    assert_eq!(
        entries_of(&server, &op, &counter),
        2,
        "the other piece stays"
    );
    let (_, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/demo/dead-letters",
        None,
    );
    assert_eq!(v["failing"], json!([]), "{v}");
    let id = c.fresh_id();
    match c
        .request(ClientMessage::Read(ReadValue {
            id,
            piece: Some(failing.clone()),
            doc: None,
            path: None,
        }))
        .await
        .unwrap()
    {
        ServerMessage::Error(e) => assert_eq!(e.code, ErrorCode::UnknownPiece),
        other => panic!("reading a deleted piece: {other:?}"),
    }
    match delete(&mut c, &failing).await {
        ServerMessage::Error(e) => assert_eq!(e.code, ErrorCode::UnknownPiece),
        other => panic!("deleting it again: {other:?}"),
    }

    // An operator deletes the other through the API.
    let path = format!("/api/operator/spaces/demo/pieces/{counter}");
    let (status, v) = call(&server, &op, "DELETE", &path, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"space": "demo", "piece": counter, "endedWakes": 0})
    );
    let (status, v) = call(&server, &op, "DELETE", &path, None);
    assert_eq!(
        (status, v["error"]["code"].as_str()),
        (404, Some("unknownPiece")),
        "{v}"
    );
    let (status, v) = call(
        &server,
        &op,
        "DELETE",
        "/api/operator/spaces/nowhere/pieces/pc-1",
        None,
    );
    assert_eq!(status, 404, "{v}");
    let (_, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/demo/pieces",
        None,
    );
    assert_eq!(v["pieces"], json!([]), "{v}");
    assert_eq!(server.space_counter("demo", "actions", "piecesDeleted"), 2);

    // The deletions are durable: after a restart the space has no pieces
    // and no entries.
    drop(c);
    drop(w);
    server.kill();
    let server = Server::start(dir.path(), &[]);
    let (_, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/demo/pieces",
        None,
    );
    assert_eq!(v["pieces"], json!([]), "{v}");
    assert_eq!(entries_of(&server, &op, &counter), 0);
}

#[test]
fn the_cli_deletes_a_piece_on_a_data_directory() {
    let dir = tempfile::tempdir().unwrap();
    let clock = std::sync::Arc::new(spacewake::clock::ManualClock::default());
    let h = common::manual_host(dir.path(), clock.clone(), |_| {});
    let src = std::fs::read_to_string(
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/runtime/failing-wake.tsx"),
    )
    .unwrap();
    let piece = common::deploy_source(&h, "s", &src);
    common::park(&h, &clock, "s");
    h.shutdown();
    drop(h);

    let data = dir.path().to_str().unwrap();
    let out = spacewake()
        .args([
            "pieces", "delete", "--data", data, "--space", "s", "--piece", &piece,
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains(&format!("deleted piece {piece} of space s")),
        "{stdout}"
    );

    let store = spacewake::store::Store::open(
        spacewake::store::StoreConfig::new(dir.path()),
        clock,
        spacewake::metrics::Counters::new(),
    )
    .unwrap();
    let mut sp = store.open_space("s").unwrap();
    assert!(
        sp.schedule(None).unwrap().is_empty(),
        "its entry left the index"
    );
    assert!(sp.read(&piece).unwrap().is_none(), "its result is gone");
    assert!(sp.read(&format!("{piece}/argument")).unwrap().is_none());
    let listed = sp
        .read(spacewake::runtime::PIECES_DOC)
        .unwrap()
        .unwrap()
        .value;
    assert!(listed.get(&piece).is_none(), "{listed}");
    assert_eq!(
        store.directory().get("s").unwrap().unwrap().next_wake_ms,
        None
    );
    drop(sp);
    drop(store);

    // Errors in CLI words.
    let out = spacewake()
        .args([
            "pieces", "delete", "--data", data, "--space", "s", "--piece", &piece,
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(&piece), "{stderr}");
    let out = spacewake()
        .args(["pieces", "--data", data])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--space"));
}
