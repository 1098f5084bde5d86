//! Bad input gets the right answer, end to end on a real server: a
//! client's bad value is never an `internal` error or a 5xx, over the
//! WebSocket or HTTP; oversized frames and bodies get their documented
//! answers; a duplicate event says so; a space that does not exist is
//! never created by a read; a deploy's argument must fit its pattern.

mod common;

use common::server::{http, http_full, spacewake, wait_for, Server};
use common::wire::{connect, counter_files, deploy};
use serde_json::{json, Value};
use spacewake::protocol::client::{Client, ClientError};
use spacewake::protocol::{sign_ingest, Identity, ServerMessage};
use std::io::{Read, Write};
use std::time::Duration;

/// Sends one raw text frame and returns the error code (or `ok:<type>`).
async fn answer(c: &mut Client, frame: &Value) -> (String, Option<Value>) {
    c.send_text(frame.to_string()).await.unwrap();
    loop {
        match c.recv(Duration::from_secs(10)).await.unwrap() {
            Some(ServerMessage::Update(_)) => continue,
            Some(ServerMessage::Error(e)) => {
                return (e.code.as_str().to_string(), e.details);
            }
            Some(other) => return (format!("ok:{}", other.type_name()), None),
            None => panic!("no answer to {frame}"),
        }
    }
}

fn signed(who: &Identity, space: &str, body: &[u8]) -> Vec<(&'static str, String)> {
    vec![
        ("x-spacewake-did", who.did()),
        ("x-spacewake-signature", sign_ingest(who, space, body)),
    ]
}

/// `(status, error code)` of an HTTP request; the body must be the JSON
/// error shape whenever the status is not 200.
fn http_answer(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, String)],
    body: &[u8],
) -> (u16, String, Value) {
    let (status, text) = http(addr, method, path, headers, body);
    let v: Value = serde_json::from_str(&text)
        .unwrap_or_else(|e| panic!("{method} {path}: {status} body is not JSON ({e}): {text}"));
    if status == 200 {
        return (status, "ok".into(), v);
    }
    let code = v["error"]["code"]
        .as_str()
        .unwrap_or_else(|| panic!("{method} {path}: no error.code in {text}"))
        .to_string();
    assert!(v["error"]["message"].is_string(), "{text}");
    (status, code, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_bad_value_is_an_internal_error_over_either_edge() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let me = Identity::generate();
    let (mut a, _) = connect(&server, &me, "home").await;
    let piece = deploy(&mut a, json!({"value": 0})).await;
    let e512: String = "é".repeat(512);
    let e513: String = "é".repeat(513);
    let mut deep = json!(1);
    for _ in 0..200 {
        deep = json!([deep]);
    }
    let send = |stream: Value, event_id: Value| {
        json!({"type": "send", "id": 1, "piece": piece, "stream": stream,
               "payload": {}, "eventId": event_id})
    };
    let ws_cases: Vec<(Value, &str)> = vec![
        (send(json!(["increment"]), json!("")), "badMessage"),
        (send(json!(["increment"]), json!(e513)), "badMessage"),
        (
            send(json!(["increment"]), json!("x".repeat(513))),
            "badMessage",
        ),
        (send(json!(["increment"]), json!(e512)), "ok:ack"),
        (send(json!(["increment"]), json!(7)), "badMessage"),
        (send(json!([]), json!("e1")), "badMessage"),
        (send(json!(["nope"]), json!("e2")), "unknownStream"),
        (send(json!([0]), json!("e3")), "unknownStream"),
        (send(json!([u64::MAX]), json!("e4")), "unknownStream"),
        (
            send(json!(["increment", "deeper", 3]), json!("e5")),
            "unknownStream",
        ),
        (send(json!(["increment"]), json!(null)), "ok:ack"),
        (
            json!({"type": "send", "id": 2, "piece": "", "stream": ["increment"], "payload": 1}),
            "badMessage",
        ),
        (
            json!({"type": "send", "id": 3, "piece": "p".repeat(10_000), "stream": ["increment"], "payload": 1}),
            "unknownPiece",
        ),
        (
            json!({"type": "send", "id": 4, "piece": piece, "stream": ["increment"], "payload": deep}),
            "badJson",
        ),
        (
            json!({"type": "send", "id": 5, "piece": piece, "stream": ["increment"], "payload": "x".repeat(900_000)}),
            "ok:ack",
        ),
        (
            json!({"type": "track", "id": 6, "piece": piece, "path": ["value", 999_999_999_u64]}),
            "ok:ack",
        ),
        (
            json!({"type": "track", "id": 7, "piece": piece, "since": -1}),
            "badMessage",
        ),
        (
            json!({"type": "track", "id": 8, "piece": "pc-none"}),
            "unknownPiece",
        ),
        (
            json!({"type": "read", "id": 9, "doc": "../../etc/passwd"}),
            "ok:value",
        ),
        (json!({"type": "read", "id": 10, "doc": ""}), "badMessage"),
        (
            json!({"type": "read", "id": 11, "piece": piece, "path": [u64::MAX, "x"]}),
            "ok:value",
        ),
        (
            json!({"type": "read", "id": 12, "piece": "pc-none"}),
            "unknownPiece",
        ),
        (json!({"type": "ping", "id": "x".repeat(300)}), "badMessage"),
        (
            json!({"type": "deploy", "id": 13, "entry": "c.tsx", "files": counter_files(), "export": "x"}),
            "badMessage",
        ),
        (
            json!({"type": "deploy", "id": 14, "entry": "counter.tsx", "files": counter_files(), "export": "nope"}),
            "invalidPattern",
        ),
        (
            json!({"type": "deploy", "id": 15, "entry": "counter.tsx", "files": counter_files(), "argument": 5}),
            "invalidArgument",
        ),
        (
            json!({"type": "deploy", "id": 16, "entry": "counter.tsx", "files": counter_files(), "argument": {"value": "notanumber"}}),
            "invalidArgument",
        ),
        (
            json!({"type": "deploy", "id": 17, "entry": "../up.tsx", "files": {"../up.tsx": "export default 1;"}}),
            "invalidPattern",
        ),
        (
            json!({"type": "deploy", "id": 18, "entry": "a.tsx", "files": {"a.tsx": "import x from \"./missing.tsx\";\nexport default x;"}}),
            "invalidPattern",
        ),
        (
            json!({"type": "deploy", "id": 19, "entry": "a.tsx", "files": {"a.tsx": "export default pattern(() => { while (true) {} });"}}),
            "invalidPattern",
        ),
    ];
    for (frame, want) in &ws_cases {
        let (got, _) = answer(&mut a, frame).await;
        let shown: String = frame.to_string().chars().take(120).collect();
        assert_eq!(&got, want, "{shown}");
        assert_ne!(got, "internal", "{shown}");
    }

    let addr = server.addr.clone();
    let events = "/api/spaces/home/events";
    let ingest = |body: Value| {
        let body = body.to_string().into_bytes();
        let headers = signed(&me, "home", &body);
        http_answer(&addr, "POST", events, &headers, &body)
    };
    let event = |stream: Value, event_id: Value| json!({"piece": piece, "stream": stream, "payload": {}, "eventId": event_id});
    let (status, code, empty_stream) = ingest(event(json!([]), json!("h1")));
    assert_eq!((status, code.as_str()), (400, "badMessage"));
    // The same words as the WebSocket's answer to an empty stream.
    let (_, ws_details) = answer(&mut a, &send(json!([]), json!("w1"))).await;
    assert_eq!(ws_details, Some(json!({"field": "stream"})));
    assert!(
        empty_stream["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`stream` must name a path with at least one segment"),
        "{empty_stream}"
    );
    assert_eq!(empty_stream["error"]["details"]["field"], "stream");
    let http_cases: Vec<(Value, u16, &str)> = vec![
        (event(json!(["increment"]), json!("")), 400, "badMessage"),
        (event(json!(["increment"]), json!(e513)), 400, "badMessage"),
        (event(json!(["increment"]), json!(5)), 400, "badMessage"),
        (event(json!(["increment"]), json!("h2")), 200, "ok"),
        (event(json!(["nope"]), json!("h3")), 404, "unknownStream"),
        (
            json!({"piece": "", "stream": ["increment"], "eventId": "h4"}),
            400,
            "badMessage",
        ),
        (
            json!({"piece": "pc-none", "stream": ["increment"], "eventId": "h5"}),
            404,
            "unknownPiece",
        ),
        (
            json!({"piece": piece, "stream": ["increment"]}),
            400,
            "badMessage",
        ),
        (
            json!({"piece": piece, "stream": ["increment"], "eventId": "h6", "extra": 1}),
            400,
            "badMessage",
        ),
        (json!([1, 2]), 400, "badMessage"),
    ];
    for (body, want_status, want_code) in http_cases {
        let (status, code, v) = ingest(body.clone());
        assert_eq!(
            (status, code.as_str()),
            (want_status, want_code),
            "{body}: {v}"
        );
    }
    // Not JSON at all, signed.
    let junk = b"{not json".to_vec();
    let (status, code, _) = http_answer(&addr, "POST", events, &signed(&me, "home", &junk), &junk);
    assert_eq!((status, code.as_str()), (400, "badMessage"));
    // A body over the 2 MiB limit: the JSON shape, not plain text.
    let big = vec![b' '; 3 * 1024 * 1024];
    let (status, code, _) = http_answer(&addr, "POST", events, &signed(&me, "home", &big), &big);
    assert_eq!((status, code.as_str()), (413, "bodyTooLarge"));
    // A bad signature says what was signed; ingest has no nonce.
    let body = event(json!(["increment"]), json!("h7")).to_string();
    let forged = vec![
        ("x-spacewake-did", me.did()),
        (
            "x-spacewake-signature",
            sign_ingest(&me, "elsewhere", body.as_bytes()),
        ),
    ];
    let (status, code, v) = http_answer(&addr, "POST", events, &forged, body.as_bytes());
    assert_eq!((status, code.as_str()), (401, "badSignature"));
    let message = v["error"]["message"].as_str().unwrap();
    assert!(!message.contains("nonce"), "{message}");
    assert!(message.contains("request body"), "{message}");
    let (status, code, _) = http_answer(&addr, "POST", events, &[], body.as_bytes());
    assert_eq!((status, code.as_str()), (401, "badSignature"));
    // Spaces that do not exist, or cannot: 404, after the signature.
    for space in ["typo", "..bad", &"s".repeat(300)] {
        let path = format!("/api/spaces/{space}/events");
        let (status, code, _) = http_answer(
            &addr,
            "POST",
            &path,
            &signed(&me, space, body.as_bytes()),
            body.as_bytes(),
        );
        assert_eq!((status, code.as_str()), (404, "unknownSpace"), "{space}");
    }
    // Warm: an empty list, an unknown piece.
    for (pieces, want_status, want_code) in [
        (json!([]), 400, "badMessage"),
        (json!([""]), 400, "badMessage"),
        (json!(["pc-none"]), 404, "unknownPiece"),
    ] {
        let body = json!({ "pieces": pieces }).to_string();
        let (status, code, _) = http_answer(
            &addr,
            "POST",
            "/api/spaces/home/warm",
            &signed(&me, "home", body.as_bytes()),
            body.as_bytes(),
        );
        assert_eq!(
            (status, code.as_str()),
            (want_status, want_code),
            "{pieces}"
        );
    }
    // Routes and methods that do not exist.
    let (status, code, _) = http_answer(&addr, "GET", "/api/spaces/home/events", &[], b"");
    assert_eq!((status, code.as_str()), (405, "methodNotAllowed"));
    let (status, code, _) = http_answer(&addr, "GET", "/nowhere", &[], b"");
    assert_eq!((status, code.as_str()), (404, "notFound"));
    let (status, code, _) = http_answer(&addr, "POST", "/api/spaces/%ff%fe/events", &[], b"{}");
    assert!(status < 500, "{status} {code}");

    // Nothing above was internal, and the session still works.
    let stats = server.stats();
    assert!(
        stats["servingLoop"]["spaces"]["home"]["sessions"]["framesRejected"]
            .as_i64()
            .unwrap()
            >= 20
    );
    let (got, _) = answer(&mut a, &json!({"type": "ping", "id": 99})).await;
    assert_eq!(got, "ok:pong");
}

/// Writes one WebSocket client frame header announcing `len` payload bytes
/// (masked text), then a little of the payload: a frame the server must
/// refuse from its header alone.
#[test]
fn a_frame_announced_past_the_transport_limit_gets_close_1009() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut s = std::net::TcpStream::connect(&server.addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET /ws HTTP/1.1\r\nHost: {}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n",
        server.addr
    )
    .unwrap();
    // The 101 response, then the challenge frame.
    let mut head = Vec::new();
    let mut byte = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        s.read_exact(&mut byte).unwrap();
        head.push(byte[0]);
    }
    assert!(String::from_utf8_lossy(&head).starts_with("HTTP/1.1 101"));
    let (opcode, _) = read_frame(&mut s);
    assert_eq!(opcode, 1, "the challenge");
    let len: u64 = 17 * 1024 * 1024;
    let mut header = vec![0x81, 0x80 | 127];
    header.extend_from_slice(&len.to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    s.write_all(&header).unwrap();
    let _ = s.write_all(&[b'x'; 1024]);
    let (opcode, payload) = read_frame(&mut s);
    assert_eq!(opcode, 8, "a close frame");
    let code = u16::from_be_bytes([payload[0], payload[1]]);
    assert_eq!(code, 1009);
    let reason = String::from_utf8_lossy(&payload[2..]).into_owned();
    assert!(reason.contains("16 MiB"), "{reason}");
    wait_for("the refused frame to be counted", || {
        server.host_counter("sessions", "framesRejected") >= 1
    });
}

/// One unmasked server frame: `(opcode, payload)`.
fn read_frame(s: &mut std::net::TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    s.read_exact(&mut h).unwrap();
    let mut len = u64::from(h[1] & 0x7f);
    if len == 126 {
        let mut b = [0u8; 2];
        s.read_exact(&mut b).unwrap();
        len = u64::from(u16::from_be_bytes(b));
    } else if len == 127 {
        let mut b = [0u8; 8];
        s.read_exact(&mut b).unwrap();
        len = u64::from_be_bytes(b);
    }
    let mut payload = vec![0u8; len as usize];
    s.read_exact(&mut payload).unwrap();
    (h[0] & 0x0f, payload)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ack_says_whether_the_event_was_a_duplicate_and_the_cli_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let key = dir.path().join("me.key");
    let me = spacewake::protocol::Identity::generate();
    me.save(&key).unwrap();
    let (mut a, _) = connect(&server, &me, "home").await;
    let piece = deploy(&mut a, json!({"value": 0})).await;
    let frame = json!({"type": "send", "id": 1, "piece": piece, "stream": ["increment"],
                       "payload": {}, "eventId": "e1"});
    let ack = |m: ServerMessage| match m {
        ServerMessage::Ack(a) => (a.seq.unwrap(), a.duplicate),
        other => panic!("{other:?}"),
    };
    a.send_text(frame.to_string()).await.unwrap();
    let (first, dup) = ack(a.recv(Duration::from_secs(5)).await.unwrap().unwrap());
    assert_eq!(dup, Some(false));
    // More commits happen; the duplicate still names the first one.
    common::wire::send(&mut a, &piece, "increment", json!({})).await;
    a.send_text(frame.to_string()).await.unwrap();
    let (again, dup) = ack(a.recv(Duration::from_secs(5)).await.unwrap().unwrap());
    assert_eq!((again, dup), (first, Some(true)));
    // HTTP ingest agrees.
    let body = json!({"piece": piece, "stream": ["increment"], "eventId": "e1"}).to_string();
    let (status, text) = http(
        &server.addr,
        "POST",
        "/api/spaces/home/events",
        &signed(&me, "home", body.as_bytes()),
        body.as_bytes(),
    );
    assert_eq!(status, 200);
    assert_eq!(
        serde_json::from_str::<Value>(&text).unwrap(),
        json!({"seq": first, "duplicate": true})
    );
    // The CLI says which.
    let cli = |event_id: &str| {
        let out = spacewake()
            .args([
                "send",
                "--server",
                &server.addr,
                "--space",
                "home",
                "--piece",
                &piece,
            ])
            .args(["--stream", "increment", "--event-id", event_id, "--key"])
            .arg(&key)
            .output()
            .unwrap();
        assert!(out.status.success(), "{out:?}");
        String::from_utf8(out.stdout).unwrap()
    };
    let out = cli("e1");
    assert_eq!(
        out.lines().next().unwrap(),
        format!("duplicate of seq {first} (this event id was already sent; nothing appended)")
    );
    let out = cli("e-new");
    assert!(out.starts_with("appended at seq"), "{out}");

    // In the CLI's words: a space that does not exist, a key that does not.
    let refused = |space: &str, key: &std::path::Path| {
        let out = spacewake()
            .args(["read", "--server", &server.addr, "--space", space])
            .args(["--piece", &piece, "--key"])
            .arg(key)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{out:?}");
        String::from_utf8(out.stderr).unwrap()
    };
    let err = refused("homr", &key);
    assert!(
        err.contains("space homr does not exist")
            && err.contains("spacewake spaces create --space homr")
            && !err.contains("create: true"),
        "{err}"
    );
    let missing = dir.path().join("nobody.key");
    let err = refused("home", &missing);
    assert!(err.contains("there is no key at"), "{err}");
    assert!(!missing.exists(), "read made no key file");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_space_that_does_not_exist_is_unknown_and_only_an_explicit_create_makes_one() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let me = Identity::generate();
    let key = dir.path().join("me.key");
    me.save(&key).unwrap();
    let url = server.ws_url();
    match Client::connect(&url, &me, "typo").await {
        Err(ClientError::Refused(e)) => {
            assert_eq!(e.code.as_str(), "unknownSpace");
            assert!(e.message.contains("create"), "{}", e.message);
        }
        other => panic!("expected unknownSpace, got {other:?}"),
    }
    assert_eq!(server.stats()["spacesRegistered"], 0);
    assert!(!dir.path().join("spaces/typo.sqlite").exists());
    // The CLI's read and send do not create either.
    let cli = |args: &[&str]| {
        spacewake()
            .args(args)
            .args(["--server", &server.addr, "--space", "typo", "--key"])
            .arg(&key)
            .output()
            .unwrap()
    };
    let out = cli(&["read", "--piece", "pc-0000000000000000"]);
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("space typo does not exist"),
        "{out:?}"
    );
    let out = cli(&["send", "--piece", "pc-0000000000000000", "--stream", "x"]);
    assert!(!out.status.success());
    assert_eq!(server.stats()["spacesRegistered"], 0);
    // A deploy does create, owned by its identity.
    let counter =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/counter.tsx");
    let out = cli(&["deploy", counter.to_str().unwrap()]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(server.stats()["spacesRegistered"], 1);
    let (_, opened) = Client::connect(&url, &me, "typo").await.unwrap();
    assert_eq!(opened.access.as_str(), "owner");
    assert_eq!(server.space_counter("typo", "store", "spacesCreated"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deploy_whose_argument_does_not_fit_its_pattern_is_refused_and_leaves_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let me = Identity::generate();
    let (mut a, _) = connect(&server, &me, "home").await;
    let frame = json!({"type": "deploy", "id": 1, "entry": "counter.tsx", "files": counter_files(),
                       "argument": {"value": "notanumber"}});
    a.send_text(frame.to_string()).await.unwrap();
    let e = match a.recv(Duration::from_secs(10)).await.unwrap().unwrap() {
        ServerMessage::Error(e) => e,
        other => panic!("{other:?}"),
    };
    assert_eq!(e.code.as_str(), "invalidArgument");
    assert_eq!(
        e.details,
        Some(json!({"path": "value", "expected": "a number", "got": "the string \"notanumber\""}))
    );
    assert!(
        e.message.contains("argument.value must be a number"),
        "{}",
        e.message
    );
    // Nothing was created: no piece, no stored program.
    let read = json!({"type": "read", "id": 2, "doc": "space/pieces"});
    a.send_text(read.to_string()).await.unwrap();
    match a.recv(Duration::from_secs(10)).await.unwrap().unwrap() {
        ServerMessage::Value(v) => assert!(v.value.is_null() || v.value == json!({}), "{v:?}"),
        other => panic!("{other:?}"),
    }
    let db = rusqlite::Connection::open(dir.path().join("spaces/home.sqlite")).unwrap();
    let programs: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM docs WHERE id LIKE 'program/%'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(programs, 0);
    // The right type is accepted.
    deploy(&mut a, json!({"value": 4})).await;
    // The CLI prints the same sentence.
    let key = dir.path().join("me.key");
    me.save(&key).unwrap();
    let counter =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/counter.tsx");
    let out = spacewake()
        .args([
            "deploy",
            counter.to_str().unwrap(),
            "--argument",
            r#"{"items": [1]}"#,
        ])
        .args(["--server", &server.addr, "--space", "home", "--key"])
        .arg(&key)
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("invalidArgument"), "{err}");
    assert!(
        err.contains("argument.items.0 must be a string (got the number 1)"),
        "{err}"
    );
}

/// The refusal of an open (over the WebSocket) and of an ingest (HTTP).
async fn refusals(
    server: &Server,
    me: &Identity,
    space: &str,
) -> (String, Value, u16, String, Option<String>) {
    // Once: the client library would wait out a `heldElsewhere`.
    let once = spacewake::protocol::client::OpenOptions {
        once: true,
        ..Default::default()
    };
    let (code, details) = match Client::connect_with(&server.ws_url(), me, space, once).await {
        Err(ClientError::Refused(e)) => {
            (e.code.as_str().to_string(), e.details.unwrap_or(json!({})))
        }
        other => panic!("{space}: expected a refused open, got {other:?}"),
    };
    let body = json!({"piece": "pc-0000000000000000", "stream": ["increment"], "eventId": "x"})
        .to_string();
    let (status, headers, text) = http_full(
        &server.addr,
        "POST",
        &format!("/api/spaces/{space}/events"),
        &signed(me, space, body.as_bytes()),
        body.as_bytes(),
    );
    let v: Value = serde_json::from_str(&text).unwrap();
    let retry = headers
        .iter()
        .find(|(k, _)| k == "retry-after")
        .map(|(_, v)| v.clone());
    (
        code,
        details,
        status,
        v["error"]["code"].as_str().unwrap().to_string(),
        retry,
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_four_reasons_a_space_cannot_be_reached_are_four_codes() {
    let me = Identity::generate();
    // At capacity: one active space at most. "a" is made by a first
    // process; in the next one "b" holds the only slot, so "a" is refused.
    let dir = tempfile::tempdir().unwrap();
    let full = Server::start(
        dir.path(),
        &["--max-active-spaces", "1", "--idle-park-ms", "60000"],
    );
    let (mut a, _) = connect(&full, &me, "a").await;
    deploy(&mut a, json!({"value": 0})).await;
    full.kill();
    let full = Server::start(
        dir.path(),
        &["--max-active-spaces", "1", "--idle-park-ms", "60000"],
    );
    let (mut b, _) = connect(&full, &me, "b").await;
    deploy(&mut b, json!({"value": 0})).await;
    let (code, details, status, http_code, retry) = refusals(&full, &me, "a").await;
    assert_eq!(
        (code.as_str(), status, http_code.as_str()),
        ("overloaded", 503, "overloaded")
    );
    assert_eq!(details["limit"], 1);
    assert!(retry.is_some(), "Retry-After on a 503");

    // Held by another host, and broken (backing off).
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    for space in ["held", "broken"] {
        let (mut c, _) = connect(&server, &me, space).await;
        deploy(&mut c, json!({"value": 0})).await;
        c.close().await.unwrap();
    }
    wait_for("both to park", || {
        server.space_counter("held", "activation", "parks") >= 1
            && server.space_counter("broken", "activation", "parks") >= 1
    });
    let held = dir.path().join("spaces/held.sqlite");
    let db = rusqlite::Connection::open(&held).unwrap();
    db.execute(
        "UPDATE execution_lease SET holder = 'host-elsewhere/1', expires_at_ms = ?1",
        [(spacewake::clock::Clock::now_ms(&spacewake::clock::SystemClock) + 60_000) as i64],
    )
    .unwrap();
    drop(db);
    let (code, details, status, http_code, retry) = refusals(&server, &me, "held").await;
    assert_eq!(
        (code.as_str(), status, http_code.as_str()),
        ("heldElsewhere", 503, "heldElsewhere")
    );
    assert_eq!(details["holder"], "host-elsewhere/1");
    assert!(details["retryInMs"].as_u64().unwrap() > 50_000, "{details}");
    let secs: u64 = retry.expect("Retry-After").parse().unwrap();
    assert!((50..=60).contains(&secs), "{secs}");

    let broken = dir.path().join("spaces/broken.sqlite");
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .open(&broken)
        .unwrap();
    f.write_all(&[0u8; 100]).unwrap();
    drop(f);
    let (code, details, status, http_code, retry) = refusals(&server, &me, "broken").await;
    assert_eq!(
        (code.as_str(), status, http_code.as_str()),
        ("backingOff", 503, "backingOff")
    );
    assert!(details["failures"].as_u64().unwrap() >= 1, "{details}");
    assert!(retry.is_some());

    // And a space that does not exist.
    let (code, _, status, http_code, _) = refusals(&server, &me, "nowhere").await;
    assert_eq!(
        (code.as_str(), status, http_code.as_str()),
        ("unknownSpace", 404, "unknownSpace")
    );
}

/// A one-shot command whose reader has gone (`spacewake … | head -1`) ends
/// quietly, as Unix tools do: no panic, no backtrace.
#[test]
fn a_closed_stdout_ends_a_command_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let dir = tempfile::tempdir().unwrap();
    let key = dir.path().join("id.key");
    // A socket whose other end is closed before the command starts: its
    // first write finds nobody reading.
    let (ours, theirs) = std::os::unix::net::UnixStream::pair().unwrap();
    drop(theirs);
    let out = spacewake()
        .args(["identity", "--key"])
        .arg(&key)
        .stdout(std::process::Stdio::from(std::os::fd::OwnedFd::from(ours)))
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{:?}", out.status);
}
