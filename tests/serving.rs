//! End to end: a real `spacewake serve` process, real WebSocket clients with
//! real ed25519 identities, and the counters on the health route.

mod common;

use common::server::{http, wait_for, Server};
use common::wire::{connect, deploy, key, next_value, send, track, ws_url};
use serde_json::{json, Value};
use spacewake::protocol::client::Client;
use spacewake::protocol::messages::{Ping, ReadValue};
use spacewake::protocol::{sign_ingest, ClientMessage, Identity, RequestId, ServerMessage};
use std::path::Path;
use std::process::Command;
use std::time::Duration;

fn serve(data: &Path) -> Server {
    Server::start(data, &[])
}

fn serve_with(data: &Path, extra: &[&str]) -> Server {
    Server::start(data, extra)
}

fn stats(addr: &str) -> Value {
    serde_json::from_str(&http(addr, "GET", "/api/health/stats", &[], b"").1).unwrap()
}

fn space_counter(addr: &str, space: &str, block: &str, name: &str) -> i64 {
    stats(addr)["servingLoop"]["spaces"][space][block][name]
        .as_i64()
        .unwrap_or(0)
}

/// `spacewake grant` on the data directory, as an operator runs it.
fn grant(data: &Path, who: &Identity, access: &str) {
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args([
            "grant",
            "--space",
            "home",
            "--did",
            &who.did(),
            "--access",
            access,
            "--data",
        ])
        .arg(data)
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    // The server notices grant changes within its re-check interval.
    std::thread::sleep(spacewake::host::GRANTS_RECHECK * 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_see_every_update_in_order_and_a_reader_cannot_send() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let owner = Identity::generate();
    let reader = Identity::generate();
    let (mut a, opened) = connect(&server, &owner, "home").await;
    assert_eq!(opened.access.as_str(), "owner");
    let piece = deploy(&mut a, json!({"value": 0})).await;

    // Grant read access from the operator side (same data directory).
    {
        let store = spacewake::store::Store::open(
            spacewake::store::StoreConfig::new(dir.path()),
            std::sync::Arc::new(spacewake::clock::SystemClock),
            spacewake::metrics::Counters::new(),
        )
        .unwrap();
        store
            .directory()
            .set_grant("home", &reader.did(), Some("read"))
            .unwrap();
    }
    let (mut b, opened_b) = connect(&server, &reader, "home").await;
    assert_eq!(opened_b.access.as_str(), "read");

    track(&mut a, &piece, "value", None).await;
    track(&mut b, &piece, "value", None).await;
    assert_eq!(next_value(&mut a).await.1, json!(0));
    assert_eq!(next_value(&mut b).await.1, json!(0));
    for i in 1..=5 {
        let r = send(&mut a, &piece, "increment", json!({})).await;
        assert!(matches!(r, ServerMessage::Ack(_)), "{r:?}");
        let (sa, va) = next_value(&mut a).await;
        let (sb, vb) = next_value(&mut b).await;
        assert_eq!((va, vb), (json!(i), json!(i)));
        assert_eq!(sa, sb, "both saw the same commit");
    }
    // A READ session may not send.
    match send(&mut b, &piece, "increment", json!({})).await {
        ServerMessage::Error(e) => {
            assert_eq!(e.code.as_str(), "forbidden");
            assert!(e.message.to_lowercase().contains("write"), "{}", e.message);
        }
        other => panic!("{other:?}"),
    }
    assert!(space_counter(&server.addr, "home", "activation", "runtimeMemoryBytes") > 0);
    // Laziness over the wire: only `value` is tracked, so `doubled` never
    // ran; the one run is the piece's `[NAME]`, which a deploy computes.
    assert_eq!(
        space_counter(&server.addr, "home", "actions", "derivationRuns"),
        1
    );

    a.close().await.unwrap();
    b.close().await.unwrap();
    wait_for("the space to park", || {
        space_counter(&server.addr, "home", "activation", "parks") >= 1
    });
    assert_eq!(
        space_counter(&server.addr, "home", "activation", "activeSpaces"),
        0
    );
    assert_eq!(stats(&server.addr)["activeSpaces"], json!([]));

    // An event appended while parked (webhook ingest) activates the space.
    let body = json!({"piece": piece, "stream": ["increment"], "payload": {}, "eventId": "hook-1"})
        .to_string();
    let headers = [
        ("x-spacewake-did", owner.did()),
        (
            "x-spacewake-signature",
            sign_ingest(&owner, "home", body.as_bytes()),
        ),
    ];
    let (status, resp) = http(
        &server.addr,
        "POST",
        "/api/spaces/home/events",
        &headers,
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{resp}");
    wait_for("the event to be processed", || {
        space_counter(&server.addr, "home", "events", "processed") >= 6
    });
    assert_eq!(
        space_counter(&server.addr, "home", "activation", "byEvents"),
        1
    );
    // A forged ingest is refused.
    let forged = [
        ("x-spacewake-did", reader.did()),
        (
            "x-spacewake-signature",
            sign_ingest(&owner, "home", body.as_bytes()),
        ),
    ];
    assert_eq!(
        http(
            &server.addr,
            "POST",
            "/api/spaces/home/events",
            &forged,
            body.as_bytes()
        )
        .0,
        401
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_signature_never_opens_a_session() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let me = Identity::generate();
    let (mut ws, _) = tokio_tungstenite::connect_async(ws_url(&server))
        .await
        .unwrap();
    use futures_util::{SinkExt, StreamExt};
    let challenge: Value = match ws.next().await.unwrap().unwrap() {
        tokio_tungstenite::tungstenite::Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("{other:?}"),
    };
    let nonce = challenge["nonce"].as_str().unwrap();
    // Signed for another space: must not open "target".
    let sig = spacewake::protocol::sign_open(&me, nonce, "elsewhere");
    let open = json!({"type": "open", "space": "target", "did": me.did(), "signature": sig});
    ws.send(tokio_tungstenite::tungstenite::Message::text(
        open.to_string(),
    ))
    .await
    .unwrap();
    let reply: Value = match ws.next().await.unwrap().unwrap() {
        tokio_tungstenite::tungstenite::Message::Text(t) => serde_json::from_str(&t).unwrap(),
        other => panic!("{other:?}"),
    };
    assert_eq!(reply["type"], "error");
    assert_eq!(reply["code"], "badSignature");
    let s = stats(&server.addr);
    assert_eq!(s["servingLoop"]["sessions"]["rejected"], 1);
    assert_eq!(s["servingLoop"]["sessions"]["opened"], 0);
    assert_eq!(
        s["spacesRegistered"], 0,
        "nothing was created for a forged open"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_frames_get_error_frames_and_lose_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let me = Identity::generate();
    let (mut a, _) = connect(&server, &me, "fuzz").await;
    let (mut bystander, _) = connect(&server, &me, "fuzz").await;
    let piece = deploy(&mut a, json!({"value": 0})).await;
    track(&mut bystander, &piece, "value", None).await;
    assert_eq!(next_value(&mut bystander).await.1, json!(0));

    let cases: Vec<(Vec<u8>, bool, &str)> = vec![
        (b"{not json".to_vec(), false, "badJson"),
        (br#"{"type":"teleport","id":1}"#.to_vec(), false, "unknownType"),
        (br#"{"type":"track","id":1,"piece":7}"#.to_vec(), false, "badMessage"),
        (vec![1, 2, 3], true, "binaryFrame"),
        (format!("{{\"type\":\"ping\",\"id\":\"{}\"}}", "x".repeat(2 << 20)).into_bytes(), false, "frameTooLarge"),
        (serde_json::to_vec(&json!({"type":"send","id":2,"piece":piece,"stream":["nope"],"payload":{}})).unwrap(), false, "unknownStream"),
        (serde_json::to_vec(&json!({"type":"send","id":3,"piece":"pc-missing","stream":["increment"],"payload":{}})).unwrap(), false, "unknownPiece"),
        (serde_json::to_vec(&json!({"type":"deploy","id":4,"entry":"bad.tsx","files":{"bad.tsx":"import { pattern, SCHEDULE } from \"commonfabric\";\nexport default pattern(() => ({ [SCHEDULE]: [{ intervalMinutes: 30, callback: 1 }] }));\n"}})).unwrap(), false, "invalidPattern"),
        (serde_json::to_vec(&json!({"type":"open","space":"fuzz","did":"did:key:x","signature":"y"})).unwrap(), false, "alreadyOpen"),
    ];
    for (bytes, binary, code) in cases {
        if binary {
            a.send_binary(bytes).await.unwrap();
        } else {
            a.send_text(String::from_utf8(bytes).unwrap())
                .await
                .unwrap();
        }
        match a.recv(Duration::from_secs(10)).await.unwrap() {
            Some(ServerMessage::Error(e)) => assert_eq!(e.code.as_str(), code, "{}", e.message),
            other => panic!("expected {code}, got {other:?}"),
        }
    }
    // 10,000 random frames: the session keeps answering, the server keeps serving.
    let mut seed = 0x9e3779b97f4a7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let samples = [
        r#"{"type":"ping","id":1}"#,
        r#"{"type":"track","id":2,"piece":"p","path":["a",0]}"#,
        r#"{"type":"read","id":3,"doc":"space/pieces"}"#,
        r#"{"type":"send","id":4,"piece":"p","stream":["s"],"payload":{"a":[1,2]}}"#,
    ];
    for i in 0..10_000 {
        let r = next();
        let mut bytes = samples[(r % 4) as usize].as_bytes().to_vec();
        for _ in 0..(r >> 8) % 4 {
            let pos = (next() as usize) % bytes.len();
            bytes[pos] = (next() % 256) as u8;
        }
        if i % 7 == 0 {
            a.send_binary(bytes).await.unwrap();
        } else {
            a.send_text(String::from_utf8_lossy(&bytes).into_owned())
                .await
                .unwrap();
        }
    }
    // Every frame was answered; drain and check the session still works.
    let mut answered = 0;
    while answered < 10_000 {
        match a.recv(Duration::from_secs(20)).await.unwrap() {
            Some(_) => answered += 1,
            None => panic!("only {answered} of 10000 frames answered"),
        }
    }
    let id = RequestId::Int(424242);
    assert!(matches!(
        a.request(ClientMessage::Ping(Ping { id })).await.unwrap(),
        ServerMessage::Pong(_)
    ));
    let r = send(&mut a, &piece, "increment", json!({})).await;
    assert!(matches!(r, ServerMessage::Ack(_)), "{r:?}");
    assert_eq!(
        next_value(&mut bystander).await.1,
        json!(1),
        "the other session is unaffected"
    );
    let id = bystander.fresh_id();
    match bystander
        .request(ClientMessage::Read(ReadValue {
            id,
            piece: Some(piece.clone()),
            doc: None,
            path: Some(key("value")),
        }))
        .await
        .unwrap()
    {
        ServerMessage::Value(v) => assert_eq!(v.value, json!(1)),
        other => panic!("{other:?}"),
    }
    assert!(space_counter(&server.addr, "fuzz", "sessions", "framesRejected") >= 9);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_host_killed_with_undelivered_events_delivers_them_after_restart() {
    let dir = tempfile::tempdir().unwrap();
    let me = Identity::generate();
    let piece;
    {
        let server = serve(dir.path());
        let (mut a, _) = connect(&server, &me, "crashy").await;
        piece = deploy(&mut a, json!({"value": 0})).await;
        a.close().await.unwrap();
        wait_for("park", || {
            space_counter(&server.addr, "crashy", "activation", "parks") >= 1
        });
    } // SIGKILL
      // An event accepted into the store while no host serves the space.
    common::append_while_down(
        dir.path(),
        "crashy",
        &piece,
        "increment",
        "pending",
        json!({"amount": 41}),
    );
    let server = serve(dir.path());
    wait_for("boot delivery", || {
        space_counter(&server.addr, "crashy", "events", "processed") >= 1
    });
    assert_eq!(
        space_counter(&server.addr, "crashy", "activation", "bootDiscovered"),
        1
    );
    let (mut a, _) = connect(&server, &me, "crashy").await;
    track(&mut a, &piece, "value", None).await;
    assert_eq!(next_value(&mut a).await.1, json!(41));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_warm_request_runs_only_the_warmed_instance_and_a_resuming_client_misses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let me = Identity::generate();
    let (mut a, _) = connect(&server, &me, "warmth").await;
    let p1 = deploy(&mut a, json!({"value": 2})).await;
    let _p2 = deploy(&mut a, json!({"value": 3})).await;
    track(&mut a, &p1, "value", None).await;
    let (seen, _) = next_value(&mut a).await;
    a.close().await.unwrap();
    wait_for("park", || {
        space_counter(&server.addr, "warmth", "activation", "parks") >= 1
    });
    // Only each deploy's `[NAME]` ran.
    assert_eq!(
        space_counter(&server.addr, "warmth", "actions", "derivationRuns"),
        2
    );

    let body = json!({"pieces": [p1]}).to_string();
    let headers = [
        ("x-spacewake-did", me.did()),
        (
            "x-spacewake-signature",
            sign_ingest(&me, "warmth", body.as_bytes()),
        ),
    ];
    let (status, resp) = http(
        &server.addr,
        "POST",
        "/api/spaces/warmth/warm",
        &headers,
        body.as_bytes(),
    );
    assert_eq!(status, 200, "{resp}");
    wait_for("park after warm", || {
        space_counter(&server.addr, "warmth", "activation", "parks") >= 2
    });
    assert_eq!(
        space_counter(&server.addr, "warmth", "activation", "byWarm"),
        1
    );
    // p1's data output `doubled` ran (after the deploys' two names); its
    // [UI] and all of p2 did not.
    assert_eq!(
        space_counter(&server.addr, "warmth", "actions", "derivationRuns"),
        3
    );

    // Meanwhile another client changes the value twice; the first resumes.
    let (mut b, _) = connect(&server, &me, "warmth").await;
    send(&mut b, &p1, "increment", json!({})).await;
    send(&mut b, &p1, "increment", json!({})).await;
    let (mut a, _) = Client::connect_resuming(&ws_url(&server), &me, "warmth", Some(seen))
        .await
        .unwrap();
    track(&mut a, &p1, "value", None).await;
    let (seq, v) = next_value(&mut a).await;
    assert!(seq > seen);
    assert_eq!(v, json!(4));
    assert!(
        a.next_update(Duration::from_millis(300))
            .await
            .unwrap()
            .is_none(),
        "no duplicate"
    );
    // A client that has seen the latest seq gets nothing on resume.
    let (mut c, _) = Client::connect_resuming(&ws_url(&server), &me, "warmth", Some(seq))
        .await
        .unwrap();
    track(&mut c, &p1, "value", None).await;
    assert!(c
        .next_update(Duration::from_millis(300))
        .await
        .unwrap()
        .is_none());
}

#[test]
fn the_cli_deploys_sends_and_reads_against_a_running_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let key = dir.path().join("me.key");
    let cli = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
            .args(args)
            .args(["--server", &server.addr, "--space", "cli", "--key"])
            .arg(&key)
            .output()
            .unwrap();
        (
            out.status.success(),
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let counter = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/counter.tsx");
    let (ok, piece, err) = cli(&[
        "deploy",
        counter.to_str().unwrap(),
        "--argument",
        r#"{"value": 40}"#,
    ]);
    assert!(ok, "{err}");
    let piece = piece.trim().to_string();
    assert!(piece.starts_with("pc-"), "{piece}");
    let (ok, out, err) = cli(&[
        "send",
        "--piece",
        &piece,
        "--stream",
        "increment",
        "--payload",
        r#"{"amount": 2}"#,
    ]);
    assert!(ok, "{err}");
    assert!(out.starts_with("appended at seq"), "{out}");
    let (ok, out, err) = cli(&["read", "--piece", &piece, "--path", "doubled"]);
    assert!(ok, "{err}");
    assert_eq!(out.trim(), "84");
    let (ok, _, err) = cli(&["send", "--piece", &piece, "--stream", "nope"]);
    assert!(!ok);
    assert!(err.contains("unknownStream"), "{err}");
    let invalid = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/invalid/interval-59.tsx");
    let (ok, _, err) = cli(&["deploy", invalid.to_str().unwrap()]);
    assert!(!ok);
    assert!(err.contains("SCHEDULE_INTERVAL_TOO_SMALL"), "{err}");
}

/// A client that vanished without closing (it reads nothing, so it answers
/// no ping) is closed after the session timeout and its space parks; a
/// client that is only listening answers the server's pings and stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_and_its_space_parks_while_a_listening_one_stays() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_with(dir.path(), &["--session-timeout-ms", "400"]);
    let me = Identity::generate();

    let (mut listening, _) = connect(&server, &me, "listening").await;
    let piece = deploy(&mut listening, json!({"value": 0})).await;
    track(&mut listening, &piece, "value", None).await;
    assert_eq!(next_value(&mut listening).await.1, json!(0));

    let (mut silent, _) = connect(&server, &me, "silent").await;
    deploy(&mut silent, json!({"value": 0})).await;

    // Three timeouts long: the listening client only reads (and so answers
    // pings); the silent one is not polled at all.
    let quiet = listening.recv(Duration::from_millis(1200)).await.unwrap();
    assert!(quiet.is_none(), "nothing but pings was sent: {quiet:?}");
    let addr = server.addr.clone();
    wait_for("the silent session to time out", || {
        stats(&addr)["servingLoop"]["sessions"]["timedOut"].as_i64() == Some(1)
    });
    wait_for("the silent space to park", || {
        space_counter(&addr, "silent", "activation", "parks") >= 1
    });
    assert_eq!(space_counter(&addr, "silent", "sessions", "timedOut"), 1);
    assert!(
        silent.recv(Duration::from_secs(2)).await.is_err()
            || silent.recv(Duration::from_secs(2)).await.is_err(),
        "the silent connection was closed"
    );

    // The listening session is still open and served.
    assert_eq!(space_counter(&addr, "listening", "activation", "parks"), 0);
    send(&mut listening, &piece, "increment", json!({})).await;
    assert_eq!(next_value(&mut listening).await.1, json!(1));
    assert_eq!(space_counter(&addr, "listening", "sessions", "timedOut"), 0);
}

/// A session whose space server stops under it (here: another holder took
/// the space's lease, so the renewal fails and the tenure ends) is told with
/// an error frame and a close, instead of silently receiving nothing more;
/// once the lease is free again a reconnecting client carries on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_is_told_when_its_space_server_stops_and_can_reconnect() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve_with(
        dir.path(),
        &["--lease-ttl-ms", "600", "--lease-renew-ms", "100"],
    );
    let me = Identity::generate();
    let (mut c, _) = connect(&server, &me, "home").await;
    let piece = deploy(&mut c, json!({"value": 0})).await;
    track(&mut c, &piece, "value", None).await;
    assert_eq!(next_value(&mut c).await.1, json!(0));
    send(&mut c, &piece, "increment", json!({})).await;
    assert_eq!(next_value(&mut c).await.1, json!(1));

    let file = dir.path().join("spaces").join("home.sqlite");
    let db = rusqlite::Connection::open(&file).unwrap();
    db.busy_timeout(Duration::from_secs(5)).unwrap();
    db.execute(
        "UPDATE execution_lease SET holder = 'another-host', expires_at_ms = ?1",
        [i64::MAX / 2],
    )
    .unwrap();

    let told = loop {
        match c.recv(Duration::from_secs(5)).await {
            Ok(Some(ServerMessage::Error(e))) => break e,
            Ok(Some(_)) => continue,
            other => panic!("expected an error frame, got {other:?}"),
        }
    };
    assert!(told.message.contains("reconnect"), "{told:?}");
    assert!(c.recv(Duration::from_secs(5)).await.is_err(), "then closed");
    let addr = server.addr.clone();
    wait_for("the counters", || {
        space_counter(&addr, "home", "sessions", "endedByServer") == 1
            && space_counter(&addr, "home", "lease", "tenuresLost") == 1
    });

    // The other holder lets go; a new session finds the count where it was.
    db.execute("UPDATE execution_lease SET expires_at_ms = 0", [])
        .unwrap();
    let (mut c, _) = loop {
        match Client::connect(&ws_url(&server), &me, "home").await {
            Ok(ok) => break ok,
            // Backing off after the failed tenure (1 s at first).
            Err(_) => tokio::time::sleep(Duration::from_millis(200)).await,
        }
    };
    track(&mut c, &piece, "value", None).await;
    assert_eq!(next_value(&mut c).await.1, json!(1));
    send(&mut c, &piece, "increment", json!({})).await;
    assert_eq!(next_value(&mut c).await.1, json!(2));
}

/// `spacewake grant` (another process, writing the host directory) changes
/// a principal's access while its session is open: a downgrade applies from
/// the session's next request, a revocation ends the session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_grant_changed_while_a_session_is_open_applies_to_its_next_request() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let owner = Identity::generate();
    let bob = Identity::generate();
    let (mut a, _) = connect(&server, &owner, "home").await;
    let piece = deploy(&mut a, json!({"value": 0})).await;
    let code = |m: &ServerMessage| match m {
        ServerMessage::Error(e) => e.code.as_str().to_string(),
        other => other.to_text(),
    };

    grant(dir.path(), &bob, "write");
    let (mut b, opened) = connect(&server, &bob, "home").await;
    assert_eq!(opened.access.as_str(), "write");
    let r = send(&mut b, &piece, "increment", json!({})).await;
    assert!(matches!(r, ServerMessage::Ack(_)), "{}", r.to_text());

    grant(dir.path(), &bob, "read");
    let r = send(&mut b, &piece, "increment", json!({})).await;
    assert_eq!(code(&r), "forbidden");
    // Still open, and still allowed to read.
    track(&mut b, &piece, "value", None).await;
    assert_eq!(next_value(&mut b).await.1, json!(1));

    grant(dir.path(), &bob, "none");
    let r = send(&mut b, &piece, "increment", json!({})).await;
    assert_eq!(code(&r), "forbidden");
    assert!(b.recv(Duration::from_secs(5)).await.is_err(), "then closed");
    assert_eq!(
        space_counter(&server.addr, "home", "sessions", "revoked"),
        1
    );
    // The owner's session was never affected.
    let r = send(&mut a, &piece, "increment", json!({})).await;
    assert!(matches!(r, ServerMessage::Ack(_)), "{}", r.to_text());

    // A reader that only listens is cut off at its next update.
    let carol = Identity::generate();
    grant(dir.path(), &carol, "read");
    let (mut c, _) = connect(&server, &carol, "home").await;
    track(&mut c, &piece, "value", None).await;
    assert_eq!(next_value(&mut c).await.1, json!(2));
    grant(dir.path(), &carol, "none");
    let r = send(&mut a, &piece, "increment", json!({})).await;
    assert!(matches!(r, ServerMessage::Ack(_)), "{}", r.to_text());
    let told = c
        .recv(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a frame");
    assert_eq!(code(&told), "forbidden", "not the update");
    assert!(c.recv(Duration::from_secs(5)).await.is_err(), "then closed");
    assert_eq!(
        space_counter(&server.addr, "home", "sessions", "revoked"),
        2
    );

    // A reader that neither sends nor receives is cut off too, within the
    // re-check period, with no update to carry the news.
    let dave = Identity::generate();
    grant(dir.path(), &dave, "read");
    let (mut d, _) = connect(&server, &dave, "home").await;
    grant(dir.path(), &dave, "none");
    let told = d
        .recv(Duration::from_secs(5))
        .await
        .unwrap()
        .expect("a frame");
    assert_eq!(code(&told), "forbidden");
    assert!(d.recv(Duration::from_secs(5)).await.is_err(), "then closed");
    assert_eq!(
        space_counter(&server.addr, "home", "sessions", "revoked"),
        3
    );
}

/// A program whose modules sit in nested folders and import each other
/// upwards, downwards, sideways and above the entry's folder: `check`
/// accepts it, `deploy` runs it, and a restarted host activates it again
/// from what it stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_program_spread_over_nested_folders_checks_deploys_and_activates_again() {
    use spacewake::protocol::messages::Deploy;
    use std::collections::BTreeMap;
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns");
    let out = common::server::spacewake()
        .arg("check")
        .arg(root.join("nested-app.tsx"))
        .arg(root.join("nested-app/app/main.tsx"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let mut files = BTreeMap::new();
    for rel in [
        "nested-app.tsx",
        "nested-app/ui/controls/index.ts",
        "nested-app/ui/controls/controls.tsx",
        "nested-app/util/text.ts",
        "nested-app/notes/note.tsx",
        "nested-app/notes/shared.ts",
        "lib/format.ts",
    ] {
        files.insert(
            rel.to_string(),
            std::fs::read_to_string(root.join(rel)).unwrap(),
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let me = Identity::generate();
    let piece = {
        let server = common::server::Server::start(dir.path(), &[]);
        let (mut c, _) = common::wire::connect(&server, &me, "nested").await;
        let id = c.fresh_id();
        let piece = match c
            .request(ClientMessage::Deploy(Deploy {
                id,
                entry: "nested-app.tsx".into(),
                files: files.clone(),
                export: None,
                argument: Some(serde_json::json!({})),
            }))
            .await
            .unwrap()
        {
            ServerMessage::Deployed(d) => d.piece,
            other => panic!("deploy: {other:?}"),
        };
        assert_eq!(
            read_value(&mut c, &piece, "shown").await,
            serde_json::json!("note: groceries (6) 2.50 EUR")
        );
        piece
    };
    // A new host process on the same data: the program is compiled from
    // the stored sources and its modules resolved again at activation.
    let server = common::server::Server::start(dir.path(), &[]);
    let (mut c, _) = common::wire::connect(&server, &me, "nested").await;
    assert_eq!(
        read_value(&mut c, &piece, "shown").await,
        serde_json::json!("note: groceries (6) 2.50 EUR")
    );
}

async fn read_value(c: &mut Client, piece: &str, path: &str) -> Value {
    let id = c.fresh_id();
    let m = ClientMessage::Read(ReadValue {
        id,
        piece: Some(piece.to_string()),
        doc: None,
        path: Some(key(path)),
    });
    match c.request(m).await.unwrap() {
        ServerMessage::Value(v) => v.value,
        other => panic!("{other:?}"),
    }
}

/// A program that attaches data files (`dataFile`): `spacewake deploy`
/// sends them with the sources, and a restarted host activates the program
/// again from what it stored, data included.
#[test]
fn data_files_travel_with_a_deployed_program_and_survive_a_restart() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns");
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("key");
    let cli = |server: &common::server::Server, args: &[&str]| {
        let out = common::server::spacewake()
            .args(args)
            .args(["--server", &server.addr.to_string(), "--space", "data"])
            .arg("--key")
            .arg(&key)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let data = dir.path().join("host");
    let piece = {
        let server = common::server::Server::start(&data, &[]);
        let file = root.join("data-file.tsx");
        let piece = cli(&server, &["deploy", file.to_str().unwrap()])
            .lines()
            .last()
            .unwrap()
            .to_string();
        let words = cli(&server, &["read", "--piece", &piece, "--path", "words"]);
        assert_eq!(
            serde_json::from_str::<Value>(&words).unwrap(),
            serde_json::json!(["alpha", "bravo", "charlie"])
        );
        piece
    };
    let server = common::server::Server::start(&data, &[]);
    let biggest = cli(&server, &["read", "--piece", &piece, "--path", "biggest"]);
    assert_eq!(
        serde_json::from_str::<Value>(&biggest).unwrap(),
        serde_json::json!("Lagos")
    );
}

/// A host listening on port 0 gives patterns the origin it actually
/// listens at (`getPatternEnvironment().apiUrl`), not port 0.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn patterns_are_given_the_port_actually_bound() {
    use spacewake::protocol::messages::Deploy;
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let me = Identity::generate();
    let (mut c, _) = connect(&server, &me, "origin").await;
    let source = "import { getPatternEnvironment, pattern } from \"commonfabric\";\n\
                  export default pattern(() => ({ origin: getPatternEnvironment().apiUrl.href }));\n";
    let id = c.fresh_id();
    let piece = match c
        .request(ClientMessage::Deploy(Deploy {
            id,
            entry: "origin.tsx".into(),
            files: [("origin.tsx".to_string(), source.to_string())].into(),
            export: None,
            argument: None,
        }))
        .await
        .unwrap()
    {
        ServerMessage::Deployed(d) => d.piece,
        other => panic!("deploy: {other:?}"),
    };
    track(&mut c, &piece, "origin", None).await;
    let (_, origin) = next_value(&mut c).await;
    assert_eq!(origin, json!(format!("http://{}/", server.addr)));
}
