//! Operators reach the running server, end to end: the signed operator API
//! on a real `spacewake serve` process, its actions taken through the host
//! (a trigger fires within milliseconds), and the CLI's operator commands
//! talking to the server when one holds the data directory and to the
//! directory itself when none does.

mod common;

use common::server::{http_full, spacewake, wait_for, Server};
use common::wire::{connect, deploy, next_value, track};
use serde_json::{json, Value};
use spacewake::clock::{Clock, SystemClock};
use spacewake::protocol::{sign_operator, Identity};
use std::process::Output;
use std::time::{Duration, Instant};

/// One operator request signed by `who` at `time_ms`: `(status, body)`.
fn call_at(
    server: &Server,
    who: &Identity,
    time_ms: u64,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    common::server::operator_call(server, who, time_ms, method, path, body)
}

fn call(
    server: &Server,
    who: &Identity,
    method: &str,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    call_at(server, who, SystemClock.now_ms(), method, path, body)
}

fn code(v: &Value) -> &str {
    v["error"]["code"].as_str().unwrap_or("")
}

fn host_key(server: &Server) -> Identity {
    Identity::load(&server.data.join("host.key")).unwrap()
}

#[test]
fn the_operator_api_answers_only_fresh_signed_requests_of_operators() {
    let dir = tempfile::tempdir().unwrap();
    let op = Identity::generate();
    let server = Server::start(dir.path(), &["--operator", &op.did()]);
    let path = "/api/operator/spaces";

    let (status, _, text) = http_full(&server.addr, "GET", path, &[], b"");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!((status, code(&v)), (401, "badSignature"), "{text}");

    let stranger = Identity::generate();
    let (status, v) = call(&server, &stranger, "GET", path, None);
    assert_eq!((status, code(&v)), (403, "forbidden"));
    assert!(v["error"]["message"]
        .as_str()
        .unwrap()
        .contains("not an operator"));

    let (status, v) = call(&server, &op, "GET", path, None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["spaces"], json!([]));
    // The host's own key (in its data directory) is an operator too.
    let (status, _) = call(&server, &host_key(&server), "GET", path, None);
    assert_eq!(status, 200);

    // Ten minutes off the server's clock: stale.
    let (status, v) = call_at(
        &server,
        &op,
        SystemClock.now_ms() - 600_000,
        "GET",
        path,
        None,
    );
    assert_eq!((status, code(&v)), (401, "badSignature"));
    assert_eq!(v["error"]["details"]["reason"], "stale");
    // The same signed action twice: the second is a replay (and refused
    // before it acts: not `spaceExists`). A read may repeat.
    let t = SystemClock.now_ms();
    let create = json!({"space": "once", "owner": op.did()});
    assert_eq!(
        call_at(&server, &op, t, "POST", path, Some(create.clone())).0,
        201
    );
    let (status, v) = call_at(&server, &op, t, "POST", path, Some(create));
    assert_eq!((status, code(&v)), (401, "badSignature"));
    assert_eq!(v["error"]["details"]["reason"], "replayed");
    assert_eq!(call_at(&server, &op, t, "GET", path, None).0, 200);
    assert_eq!(call_at(&server, &op, t, "GET", path, None).0, 200);
    // A signature for a read does not authorise an action.
    let bytes = b"{}";
    let sig = sign_operator(&op, t + 1, "GET", path, b"");
    let headers = vec![
        ("x-spacewake-did", op.did()),
        ("x-spacewake-time", (t + 1).to_string()),
        ("x-spacewake-signature", sig),
    ];
    let (status, _, text) = http_full(&server.addr, "POST", path, &headers, bytes);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!((status, code(&v)), (401, "badSignature"), "{text}");
    assert_eq!(v["error"]["details"]["reason"], "signatureMismatch");

    // A space's dead letters (none here) and its events being retried.
    let (status, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/once/dead-letters",
        None,
    );
    assert_eq!(status, 200, "{v}");
    assert_eq!(
        v,
        json!({"space": "once", "deadLetters": [], "failing": []})
    );
    let (status, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/nope/dead-letters",
        None,
    );
    assert_eq!((status, code(&v)), (404, "unknownSpace"), "{v}");

    assert!(server.host_counter("operator", "refused") >= 5);
    assert!(server.host_counter("operator", "reads") >= 3);
}

/// An operator request signed by `who` at `time_ms`, sent with the
/// signature spelled `spell(signature)`: `(status, body)`.
fn call_spelled(
    server: &Server,
    who: &Identity,
    time_ms: u64,
    path: &str,
    body: &Value,
    spell: impl Fn(&str) -> String,
) -> (u16, Value) {
    let bytes = body.to_string().into_bytes();
    let sig = sign_operator(who, time_ms, "POST", path, &bytes);
    let headers = vec![
        ("x-spacewake-did", who.did()),
        ("x-spacewake-time", time_ms.to_string()),
        ("x-spacewake-signature", spell(&sig)),
    ];
    let (status, _, text) = http_full(&server.addr, "POST", path, &headers, &bytes);
    (status, serde_json::from_str(&text).unwrap())
}

/// What the directory (`DATA/host.sqlite`) stores as `did`'s grant on `space`.
fn stored_grant(data: &std::path::Path, space: &str, did: &str) -> Option<String> {
    let db = rusqlite::Connection::open(data.join("host.sqlite")).unwrap();
    db.query_row(
        "SELECT access FROM grants WHERE space = ?1 AND did = ?2",
        [space, did],
        |r| r.get(0),
    )
    .ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_captured_action_is_refused_in_any_spelling_and_after_a_restart() {
    use spacewake::protocol::client::{Client, ClientError};
    let dir = tempfile::tempdir().unwrap();
    let op = Identity::generate();
    let mut server = Server::start(dir.path(), &["--operator", &op.did()]);
    let friend = Identity::generate();
    let (status, _) = call(
        &server,
        &op,
        "POST",
        "/api/operator/spaces",
        Some(json!({"space": "shared", "owner": op.did()})),
    );
    assert_eq!(status, 201);
    let grants = "/api/operator/spaces/shared/grants";
    // The grant an attacker captures, then its revocation.
    let t = SystemClock.now_ms();
    let grant = json!({"did": friend.did(), "access": "write"});
    let exact = |s: &str| s.to_string();
    assert_eq!(call_spelled(&server, &op, t, grants, &grant, exact).0, 200);
    let revoke = json!({"did": friend.did(), "access": "none"});
    assert_eq!(
        call_spelled(&server, &op, t + 1, grants, &revoke, exact).0,
        200
    );
    // Every spelling of the captured signature is the same signature.
    let spellings: [fn(&str) -> String; 3] =
        [|s| s.to_string(), |s| format!("{s}="), |s| format!("{s}==")];
    for spell in spellings {
        let (status, v) = call_spelled(&server, &op, t, grants, &grant, spell);
        assert_eq!((status, code(&v)), (401, "badSignature"), "{v}");
        assert_eq!(v["error"]["details"]["reason"], "replayed");
    }
    assert_eq!(server.host_counter("operator", "replaysRefused"), 3);
    match Client::connect_creating(&server.ws_url(), &friend, "shared").await {
        Err(ClientError::Refused(e)) => assert_eq!(e.code.as_str(), "forbidden"),
        other => panic!("the revoked grant came back: {:?}", other.map(|_| ())),
    }

    // A restart on the same data directory, inside the window.
    server.signal(libc::SIGTERM);
    server
        .wait_exit(Duration::from_secs(10))
        .expect("serve exits on SIGTERM");
    assert_eq!(stored_grant(dir.path(), "shared", &friend.did()), None);
    let server = Server::start(dir.path(), &["--operator", &op.did()]);
    for spell in spellings {
        let (status, v) = call_spelled(&server, &op, t, grants, &grant, spell);
        assert_eq!((status, code(&v)), (401, "badSignature"), "{v}");
        assert_eq!(v["error"]["details"]["reason"], "replayed");
    }
    assert_eq!(server.host_counter("operator", "replaysRefused"), 3);
    assert_eq!(server.host_counter("operator", "refused"), 3);
    // A fresh signature still acts (ordinary use is unaffected).
    let (status, v) = call(&server, &op, "GET", "/api/operator/spaces/shared", None);
    assert_eq!(status, 200, "{v}");
    let read = json!({"did": friend.did(), "access": "read"});
    let now = SystemClock.now_ms();
    assert_eq!(call_spelled(&server, &op, now, grants, &read, exact).0, 200);
    assert_eq!(
        stored_grant(dir.path(), "shared", &friend.did()).as_deref(),
        Some("read"),
        "only the fresh action acted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn operator_actions_act_through_the_host_and_a_trigger_fires_within_milliseconds() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let op = host_key(&server);
    let me = Identity::generate();
    let (mut c, _) = connect(&server, &me, "demo").await;
    let piece = deploy(&mut c, json!({"value": 1})).await;
    c.close().await.unwrap();
    wait_for("park", || {
        server.space_counter("demo", "activation", "parks") >= 1
    });

    let (status, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/demo/pieces",
        None,
    );
    assert_eq!(status, 200, "{v}");
    let p = &v["pieces"][0];
    assert_eq!(p["id"], json!(piece));
    assert_eq!(p["pattern"], "counter.tsx#default");
    // Its computed `[NAME]`, though no client has read the piece.
    assert_eq!(p["name"], "Counter 1", "{p}");
    assert_eq!(p["scheduleEntries"], 2);
    assert!(p["createdMs"].as_u64().is_some());
    let (status, v) = call(&server, &op, "GET", "/api/operator/schedules", None);
    assert_eq!(status, 200);
    assert_eq!(v["entries"].as_array().unwrap().len(), 2, "{v}");
    let (_, v) = call(&server, &op, "GET", "/api/operator/spaces/demo", None);
    assert_eq!(v["state"], "parked");
    assert_eq!(v["owner"], json!(me.did()));

    // Trigger a parked space's entry: the waker is told, no 60 s net.
    let base = format!("/api/operator/spaces/demo/schedules/{piece}");
    let t = Instant::now();
    let (status, v) = call(&server, &op, "POST", &format!("{base}/0/trigger"), None);
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["after"]["status"], "active");
    // An extra occurrence: the cadence's next period is not moved.
    assert!(v["after"]["nextDueMs"].as_u64().is_some(), "{v}");
    assert_eq!(v["after"]["nextDueMs"], v["before"]["nextDueMs"], "{v}");
    wait_for("the triggered wake", || {
        server.space_counter("demo", "schedule", "fired") == 1
    });
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    assert_eq!(server.space_counter("demo", "activation", "byOperator"), 1);
    wait_for("the triggered wake delivered", || {
        server.space_counter("demo", "schedule", "delivered") == 1
    });
    let (_, v) = call(&server, &op, "GET", &format!("{base}/0/fires"), None);
    assert_eq!(v["fires"].as_array().unwrap().len(), 1, "{v}");
    let fire = &v["fires"][0];
    assert_eq!(fire["outcome"], "delivered", "{v}");
    // The run is kept with the fire: what it took and the commit it made.
    assert!(fire["durationUs"].as_u64().is_some(), "{v}");
    assert!(fire["cpuUs"].as_u64().is_some(), "{v}");
    assert!(fire["settledMs"].as_u64().is_some(), "{v}");
    assert!(fire["commitSeq"].as_u64().is_some(), "{v}");
    assert!(fire.get("error").is_none(), "{v}");
    // Its run view, by event id.
    let event = fire["eventId"].as_str().unwrap().to_string();
    let (status, run) = call(
        &server,
        &op,
        "GET",
        &format!("/api/operator/spaces/demo/runs?event={event}"),
        None,
    );
    assert_eq!(status, 200, "{run}");
    assert_eq!(run["fire"]["outcome"], "delivered");
    assert_eq!(run["payload"]["triggered"], true, "{run}");
    assert!(run["appendedSeq"].as_u64().is_some(), "{run}");
    assert_eq!(run["entry"]["piece"], json!(piece), "{run}");
    let (status, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/demo/runs?event=wake/pc-none/0/1/1",
        None,
    );
    assert_eq!((status, code(&v)), (404, "unknownRun"), "{v}");

    // Pause and resume; errors name what is wrong.
    let (_, v) = call(&server, &op, "POST", &format!("{base}/1/pause"), None);
    assert_eq!(v["after"]["status"], "paused");
    let (_, v) = call(&server, &op, "POST", &format!("{base}/1/resume"), None);
    assert_eq!(v["after"]["status"], "active");
    for (method, path, status, want) in [
        ("POST", format!("{base}/9/trigger"), 404, "unknownEntry"),
        ("POST", format!("{base}/x/trigger"), 400, "badMessage"),
        (
            "POST",
            "/api/operator/spaces/demo/schedules/pc-none/0/pause".to_string(),
            404,
            "unknownPiece",
        ),
        (
            "GET",
            "/api/operator/spaces/nope/pieces".to_string(),
            404,
            "unknownSpace",
        ),
        (
            "GET",
            "/api/operator/spaces/nope/ledger".to_string(),
            404,
            "unknownSpace",
        ),
    ] {
        let (got, v) = call(&server, &op, method, &path, None);
        assert_eq!((got, code(&v)), (status, want), "{path}: {v}");
        if want == "unknownEntry" {
            assert_eq!(v["error"]["details"]["entries"], json!([0, 1]));
        }
    }

    // The budget, through the host, and the ledger that shows it.
    let budget = "/api/operator/spaces/demo/ledger/budget";
    let (status, v) = call(&server, &op, "PUT", budget, Some(json!({"budgetMs": 500})));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["overrideUs"], 500_000);
    let (status, v) = call(
        &server,
        &op,
        "PUT",
        budget,
        Some(json!({"budgetMs": "lots"})),
    );
    assert_eq!((status, code(&v)), (400, "badMessage"));
    let (_, v) = call(
        &server,
        &op,
        "GET",
        "/api/operator/spaces/demo/ledger?top=5",
        None,
    );
    assert_eq!(v["budget"]["setting"], "override");
    assert!(
        !v["rows"].as_array().unwrap().is_empty(),
        "the wake was billed: {v}"
    );

    // Acting on an active space goes through its server's own handle.
    let (mut c, _) = connect(&server, &me, "demo").await;
    track(&mut c, &piece, "value", None).await;
    let (_, before) = next_value(&mut c).await;
    let (status, _) = call(&server, &op, "POST", &format!("{base}/0/trigger"), None);
    assert_eq!(status, 200);
    assert_eq!(
        next_value(&mut c).await.1,
        json!(before.as_i64().unwrap() + 1)
    );

    // Grants and creation.
    let friend = Identity::generate();
    let grants = "/api/operator/spaces/demo/grants";
    let (status, v) = call(
        &server,
        &op,
        "POST",
        grants,
        Some(json!({"did": friend.did(), "access": "read"})),
    );
    assert_eq!(status, 200, "{v}");
    let (_, opened) = connect(&server, &friend, "demo").await;
    assert_eq!(opened.access.as_str(), "read");
    let (status, v) = call(
        &server,
        &op,
        "POST",
        grants,
        Some(json!({"did": "did:key:nope", "access": "read"})),
    );
    assert_eq!((status, code(&v)), (400, "badMessage"));
    let create = json!({"space": "made", "owner": friend.did()});
    let (status, v) = call(
        &server,
        &op,
        "POST",
        "/api/operator/spaces",
        Some(create.clone()),
    );
    assert_eq!(status, 201, "{v}");
    assert_eq!(v["owner"], json!(friend.did()));
    // (Another owner, so the request is not a replay of the first.)
    let again = json!({"space": "made", "owner": me.did()});
    let (status, v) = call(&server, &op, "POST", "/api/operator/spaces", Some(again));
    assert_eq!((status, code(&v)), (409, "spaceExists"));
    assert!(server.space_counter("demo", "operator", "actions") >= 6);
}

/// Runs the CLI with `args`.
fn cli(args: &[&str]) -> Output {
    spacewake().args(args).output().unwrap()
}

fn stdout_ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{}\nstderr:\n{}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_cli_talks_to_the_server_holding_the_directory_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(dir.path(), &[]);
    let data = dir.path().to_str().unwrap().to_string();
    let me = Identity::generate();
    let (mut c, _) = connect(&server, &me, "demo").await;
    let piece = deploy(&mut c, json!({"value": 1})).await;
    c.close().await.unwrap();

    let via = format!(
        "(via the running server at {}, pid {}",
        server.addr,
        server.pid()
    );
    let out = stdout_ok(&cli(&["spaces", "--data", &data]));
    assert!(out.contains(&via), "{out}");
    // Columns line up however long the did is.
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines[1].find(&me.did()), lines[0].find("OWNER"), "{out}");
    assert!(
        lines[1].contains("Z (in "),
        "a UTC time and how far off: {out}"
    );

    let out = stdout_ok(&cli(&["pieces", "--data", &data, "--space", "demo"]));
    assert!(
        out.contains(&piece) && out.contains("counter.tsx#default"),
        "{out}"
    );
    assert!(out.contains(&via), "{out}");

    let out = stdout_ok(&cli(&["schedules", "list", "--data", &data]));
    assert!(out.contains("2 entries in 1 space"), "{out}");
    assert!(out.contains(&via), "{out}");
    let t = Instant::now();
    let entry = ["--space", "demo", "--piece", piece.as_str(), "--entry", "0"];
    let mut args = vec!["schedules", "trigger", "--data", &data];
    args.extend_from_slice(&entry);
    let out = stdout_ok(&cli(&args));
    assert!(out.contains("it fires within milliseconds"), "{out}");
    wait_for("the triggered wake", || {
        server.space_counter("demo", "schedule", "fired") == 1
    });
    assert!(t.elapsed() < Duration::from_secs(3), "{:?}", t.elapsed());

    // --server takes host:port, http:// and ws:// alike (signing with the
    // host key found through --data).
    for form in [
        server.addr.clone(),
        format!("http://{}", server.addr),
        format!("ws://{}/ws", server.addr),
    ] {
        let out = stdout_ok(&cli(&[
            "ledger", "--data", &data, "--server", &form, "--space", "demo",
        ]));
        assert!(
            out.contains("scheduled budget the host default: unlimited"),
            "{out}"
        );
        assert!(
            out.contains(&format!("(via the server at http://{})", server.addr)),
            "{out}"
        );
    }
    // A space's effect knobs, set through the server, shown by `ledger`.
    let out = stdout_ok(&cli(&[
        "ledger",
        "--data",
        &data,
        "--space",
        "demo",
        "--set-effects-in-flight",
        "2",
        "--set-effects-bytes-per-second",
        "65536",
    ]));
    assert!(
        out.contains("effect knobs of demo: in flight 2 (this space's); requests/s 2 (the host's); bytes/s 64.0 KiB (this space's)"),
        "{out}"
    );
    let out = stdout_ok(&cli(&["ledger", "--data", &data, "--space", "demo"]));
    assert!(
        out.contains("effect knobs: in flight 2 (this space's)"),
        "{out}"
    );
    let bad = cli(&[
        "ledger",
        "--data",
        &data,
        "--space",
        "demo",
        "--set-effects-in-flight",
        "0",
    ]);
    assert!(!bad.status.success());
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("positive numbers"),
        "{}",
        String::from_utf8_lossy(&bad.stderr)
    );
    // https:// speaks TLS (this server does not: a clear error, not "unsupported").
    let out = cli(&[
        "ledger",
        "--data",
        &data,
        "--server",
        &format!("https://{}", server.addr),
        "--space",
        "demo",
    ]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!(
            "cannot reach the server at https://{}",
            server.addr
        )),
        "{err}"
    );
    let friend = Identity::generate();
    let out = stdout_ok(&cli(&[
        "grant",
        "--data",
        &data,
        "--space",
        "demo",
        "--did",
        &friend.did(),
        "--access",
        "read",
    ]));
    assert!(
        out.contains(&format!("{}: read on demo", friend.did())),
        "{out}"
    );
    // An unknown space is one sentence, exit 1.
    let out = cli(&["pieces", "--data", &data, "--space", "nope"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("there is no space \"nope\"") && err.contains("unknownSpace"),
        "{err}"
    );

    // With the server gone, the same commands act on the directory.
    server.signal(libc::SIGTERM);
    server.wait_exit(Duration::from_secs(10)).expect("exits");
    let out = stdout_ok(&cli(&["spaces", "--data", &data]));
    assert!(
        out.contains("(on the data directory") && out.contains("no server is running"),
        "{out}"
    );
    let mut args = vec!["schedules", "pause", "--data", &data];
    args.extend_from_slice(&["--space", "demo", "--piece", piece.as_str(), "--entry", "1"]);
    let out = stdout_ok(&cli(&args));
    assert!(out.starts_with("paused space demo"), "{out}");
}
