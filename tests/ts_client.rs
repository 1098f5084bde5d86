//! The TypeScript client's example page (`clients/typescript/examples/`)
//! in a real headless Chromium against a real `spacewake serve`: it signs
//! in with a key it keeps in the browser, opens a space, deploys a
//! counter, shows its value live and sends events. The page and the
//! compiled client (`clients/typescript/dist/`, `npm run build`) come from
//! a static file server of this test's own, on another port than the
//! spacewake server, as an app's own origin would.

mod common;

use common::server::{operator_call, wait_for, Server};
use common::webdriver::Browser;
use serde_json::json;
use spacewake::clock::{Clock, SystemClock};
use spacewake::protocol::client::Client;
use spacewake::protocol::messages::SendEvent;
use spacewake::protocol::{ClientMessage, Identity, PathSegment, ServerMessage};
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};

fn package_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("clients/typescript")
}

/// Serves `GET /examples/…` and `/dist/…` from the package directory on a
/// free loopback port; returns `host:port`. Nothing else is served, and
/// no path may climb out with `..`.
fn static_server(root: PathBuf) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let root = root.clone();
            std::thread::spawn(move || serve_file(stream, &root));
        }
    });
    addr
}

fn serve_file(mut stream: TcpStream, root: &Path) {
    let mut first = String::new();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    if reader.read_line(&mut first).is_err() {
        return;
    }
    // Drain the request head.
    let mut line = String::new();
    while reader.read_line(&mut line).is_ok_and(|n| n > 2) {
        line.clear();
    }
    let path = first.split_whitespace().nth(1).unwrap_or("/");
    let path = path.split('?').next().unwrap_or("/");
    let allowed = (path.starts_with("/examples/") || path.starts_with("/dist/"))
        && !path.split('/').any(|s| s == "..");
    let file = root.join(path.trim_start_matches('/'));
    let (status, body) = match std::fs::read(&file) {
        Ok(bytes) if allowed => ("200 OK", bytes),
        _ => ("404 Not Found", b"not found".to_vec()),
    };
    let content_type = match file.extension().and_then(|e| e.to_str()) {
        Some("html") => "text/html; charset=utf-8",
        Some("js") => "text/javascript; charset=utf-8",
        Some("map") | Some("json") => "application/json",
        _ => "text/plain; charset=utf-8",
    };
    let head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Cache-Control: no-store\r\nConnection: close\r\n\r\n",
        body.len()
    );
    let _ = stream.write_all(head.as_bytes());
    let _ = stream.write_all(&body);
}

/// Waits for `f` to hold in the page, failing with what the page logged.
fn eventually(b: &Browser, what: &str, mut f: impl FnMut(&Browser) -> bool) {
    let start = std::time::Instant::now();
    while !f(b) {
        if start.elapsed() > std::time::Duration::from_secs(20) {
            panic!(
                "timed out waiting for {what}; the page says: status {:?}, error {:?}, log:\n{}",
                b.text("#status"),
                b.text("#error"),
                b.text("#log")
            );
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_page_signs_in_shows_a_value_live_and_sends_events() {
    let package = package_dir();
    if !package.join("dist/index.js").is_file() {
        let why =
            "the TypeScript client is not built (cd clients/typescript && npm ci && npm run build)";
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("CI=true and {why}");
        }
        println!("skipped: the example page needs {why}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let Some(b) = Browser::start() else { return };
    let web = static_server(package);
    let page = format!(
        "http://{web}/examples/index.html?server={}&space=browser",
        server.addr
    );

    // Signed in with a key made in the browser; the session opens and
    // creates the space.
    b.goto(&page);
    eventually(&b, "the session to open", |b| b.text("#status") == "open");
    let did = b.text("#did");
    assert!(did.starts_with("did:key:z6Mk"), "{did}");
    assert_eq!(b.text("#error"), "");

    // Deploy a counter: its value shows; +1 sends an event; the update shows.
    b.click("#deploy");
    eventually(&b, "the deployed counter's value", |b| {
        b.text("#value") == "0"
    });
    let piece = b.text("#piece");
    assert!(piece.starts_with("pc-"), "{piece}");
    b.click("#increment");
    eventually(&b, "the update after +1", |b| b.text("#value") == "1");
    assert!(b.text("#log").contains("appended at seq"), "the ack");

    // The space is the browser key's: the server says so.
    let host = Identity::load(&server.data.join("host.key")).unwrap();
    let (status, space) = operator_call(
        &server,
        &host,
        SystemClock.now_ms(),
        "GET",
        "/api/operator/spaces/browser",
        None,
    );
    assert_eq!(status, 200, "{space}");
    assert_eq!(space["owner"], json!(did));

    // Live: an event another client sends shows in the page.
    let other = Identity::generate();
    let (status, _) = operator_call(
        &server,
        &host,
        SystemClock.now_ms(),
        "POST",
        "/api/operator/spaces/browser/grants",
        Some(json!({"did": other.did(), "access": "write"})),
    );
    assert_eq!(status, 200);
    let (mut c, _) = Client::connect(&server.ws_url(), &other, "browser")
        .await
        .unwrap();
    let id = c.fresh_id();
    let reply = c
        .request(ClientMessage::Send(SendEvent {
            id,
            piece: piece.clone(),
            stream: vec![PathSegment::Key("increment".into())],
            payload: json!({"amount": 5}),
            event_id: Some("from-rust".into()),
        }))
        .await
        .unwrap();
    assert!(matches!(reply, ServerMessage::Ack(_)), "{reply:?}");
    eventually(&b, "the other client's event", |b| b.text("#value") == "6");
    c.close().await.unwrap();

    // A reload keeps the key (IndexedDB) and the piece, and shows the value.
    b.goto(&page);
    eventually(&b, "the session to open again", |b| {
        b.text("#status") == "open" && b.text("#value") == "6"
    });
    assert_eq!(b.text("#did"), did, "the same key after a reload");
    assert_eq!(b.text("#piece"), piece);
    b.click("#increment");
    eventually(&b, "the update after the reload", |b| {
        b.text("#value") == "7"
    });
    assert_eq!(b.text("#error"), "");
    b.screenshot(
        &Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join("ts-client")
            .join("example.png"),
    );
    wait_for("the server counted the events", || {
        server.space_counter("browser", "events", "appended") >= 3
    });
}
