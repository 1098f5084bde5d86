//! OpenTelemetry export end to end: a real `spacewake serve` process runs
//! waves, and a fake OTLP/HTTP receiver in this test records what arrives.
//! With `--otlp-endpoint` the wave spans reach `/v1/traces` as protobuf;
//! without it nothing is exported (no connection at all).

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as AnyValue;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use prost::Message as _;
use serde_json::{json, Value};
use spacewake::protocol::client::Client;
use spacewake::protocol::messages::{Deploy, SendEvent, Track};
use spacewake::protocol::{ClientMessage, Identity, PathSegment, ServerMessage};
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- receiver

#[derive(Debug, Clone)]
struct Received {
    method: String,
    path: String,
    content_type: String,
    body: Vec<u8>,
}

/// A fake OTLP/HTTP collector: accepts connections, records each request and
/// answers `200 OK` with an empty body.
struct Receiver {
    port: u16,
    connections: Arc<Mutex<usize>>,
    requests: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let connections = Arc::new(Mutex::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (c, r) = (connections.clone(), requests.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                *c.lock().unwrap() += 1;
                let r = r.clone();
                std::thread::spawn(move || {
                    if let Some(req) = handle(stream) {
                        r.lock().unwrap().push(req);
                    }
                });
            }
        });
        Receiver {
            port,
            connections,
            requests,
        }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    fn connections(&self) -> usize {
        *self.connections.lock().unwrap()
    }

    fn requests(&self) -> Vec<Received> {
        self.requests.lock().unwrap().clone()
    }
}

fn handle(stream: TcpStream) -> Option<Received> {
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .ok()?;
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut line = String::new();
    reader.read_line(&mut line).ok()?;
    let mut parts = line.split_whitespace();
    let method = parts.next()?.to_string();
    let path = parts.next()?.to_string();
    let mut content_type = String::new();
    let mut length = 0usize;
    loop {
        line.clear();
        if reader.read_line(&mut line).ok()? == 0 || line == "\r\n" {
            break;
        }
        let (name, value) = line.split_once(':')?;
        let value = value.trim().to_string();
        match name.trim().to_ascii_lowercase().as_str() {
            "content-type" => content_type = value,
            "content-length" => length = value.parse().ok()?,
            _ => {}
        }
    }
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    let mut stream = stream;
    stream
        .write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-protobuf\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
        .ok()?;
    Some(Received {
        method,
        path,
        content_type,
        body,
    })
}

// ------------------------------------------------------------------ server

struct Server {
    child: Child,
    addr: String,
    stderr: Arc<Mutex<String>>,
}

impl Server {
    fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(data: &Path, otlp_endpoint: Option<&str>, envs: &[(&str, String)]) -> Server {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_spacewake"));
    cmd.args([
        "serve",
        "--listen",
        "127.0.0.1:0",
        "--idle-park-ms",
        "50",
        "--data",
    ])
    .arg(data);
    if let Some(endpoint) = otlp_endpoint {
        cmd.args(["--otlp-endpoint", endpoint]);
    }
    // Nothing from the test's own environment may turn export on or off.
    for var in [
        "OTEL_EXPORTER_OTLP_ENDPOINT",
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
        "OTEL_BSP_SCHEDULE_DELAY",
        "OTEL_SDK_DISABLED",
    ] {
        cmd.env_remove(var);
    }
    cmd.env("SPACEWAKE_LOG", "info");
    for (k, v) in envs {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = Arc::new(Mutex::new(String::new()));
    {
        let stderr = stderr.clone();
        let pipe = child.stderr.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(pipe).lines() {
                let Ok(line) = line else { break };
                let mut s = stderr.lock().unwrap();
                s.push_str(&line);
                s.push('\n');
            }
        });
    }
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = match lines.next() {
        Some(Ok(line)) => line,
        _ => {
            let _ = child.wait();
            std::thread::sleep(Duration::from_millis(100));
            panic!(
                "serve printed no address; stderr:\n{}",
                stderr.lock().unwrap()
            );
        }
    };
    let addr = line.strip_prefix("listening on ").unwrap().to_string();
    Server {
        child,
        addr,
        stderr,
    }
}

// ------------------------------------------------------------------- waves

fn key(k: &str) -> Vec<PathSegment> {
    vec![PathSegment::Key(k.into())]
}

/// Deploy the counter, track it and send one event: at least one wave runs,
/// observed as the update carrying the new value.
async fn run_a_wave(server: &Server, space: &str) -> Client {
    let src = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/counter.tsx"),
    )
    .unwrap();
    let me = Identity::generate();
    let url = format!("ws://{}/ws", server.addr);
    let (mut c, _) = Client::connect_creating(&url, &me, space).await.unwrap();
    let id = c.fresh_id();
    let piece = match c
        .request(ClientMessage::Deploy(Deploy {
            id,
            entry: "counter.tsx".into(),
            files: BTreeMap::from([("counter.tsx".to_string(), src)]),
            export: None,
            argument: Some(json!({"value": 0})),
        }))
        .await
        .unwrap()
    {
        ServerMessage::Deployed(d) => d.piece,
        other => panic!("deploy: {other:?}"),
    };
    let id = c.fresh_id();
    let r = c
        .request(ClientMessage::Track(Track {
            id,
            piece: piece.clone(),
            path: Some(key("value")),
            since: None,
        }))
        .await
        .unwrap();
    assert!(matches!(r, ServerMessage::Ack(_)), "{r:?}");
    let first = c.next_update(Duration::from_secs(10)).await.unwrap();
    assert_eq!(first.map(|u| u.value), Some(json!(0)));
    let id = c.fresh_id();
    let r = c
        .request(ClientMessage::Send(SendEvent {
            id,
            piece,
            stream: key("increment"),
            payload: json!({}),
            event_id: None,
        }))
        .await
        .unwrap();
    assert!(matches!(r, ServerMessage::Ack(_)), "{r:?}");
    let u = c
        .next_update(Duration::from_secs(10))
        .await
        .unwrap()
        .expect("the wave's update");
    assert_eq!(u.value, Value::from(1));
    c
}

fn string_attr(attrs: &[KeyValue], key: &str) -> Option<String> {
    attrs.iter().find(|kv| kv.key == key).and_then(|kv| {
        match kv.value.as_ref()?.value.as_ref()? {
            AnyValue::StringValue(s) => Some(s.clone()),
            _ => None,
        }
    })
}

/// Wave spans (with their `space` attribute) and the resources' service
/// names found in the trace export requests received so far.
fn wave_spans(received: &[Received]) -> (Vec<String>, Vec<String>) {
    let (spaces, services, _) = wave_details(received);
    (spaces, services)
}

/// As [`wave_spans`], plus each wave span's events as (name, attribute keys).
#[allow(clippy::type_complexity)]
fn wave_details(received: &[Received]) -> (Vec<String>, Vec<String>, Vec<(String, Vec<String>)>) {
    let mut spaces = Vec::new();
    let mut services = Vec::new();
    let mut events = Vec::new();
    for r in received.iter().filter(|r| r.path == "/v1/traces") {
        let req = ExportTraceServiceRequest::decode(r.body.as_slice())
            .expect("the body is an OTLP ExportTraceServiceRequest");
        for rs in &req.resource_spans {
            if let Some(resource) = &rs.resource {
                services.extend(string_attr(&resource.attributes, "service.name"));
            }
            for ss in &rs.scope_spans {
                for span in ss.spans.iter().filter(|s| s.name == "wave") {
                    spaces.extend(string_attr(&span.attributes, "space"));
                    events.extend(span.events.iter().map(|e| {
                        (
                            e.name.clone(),
                            e.attributes.iter().map(|kv| kv.key.clone()).collect(),
                        )
                    }));
                }
            }
        }
    }
    (spaces, services, events)
}

async fn wait_until(what: &str, server: &Server, limit: Duration, mut f: impl FnMut() -> bool) {
    let t = Instant::now();
    while !f() {
        assert!(
            t.elapsed() < limit,
            "timed out waiting for {what}; serve stderr:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

// ------------------------------------------------------------------- tests

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wave_spans_are_exported_to_the_configured_otlp_endpoint() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    let server = serve(
        dir.path(),
        Some(&receiver.endpoint()),
        &[("OTEL_BSP_SCHEDULE_DELAY", "200".to_string())],
    );
    let client = run_a_wave(&server, "home").await;
    wait_until(
        "a wave span at /v1/traces",
        &server,
        Duration::from_secs(15),
        || {
            wave_spans(&receiver.requests())
                .0
                .iter()
                .any(|s| s == "home")
        },
    )
    .await;
    let received = receiver.requests();
    let traces: Vec<&Received> = received.iter().filter(|r| r.path == "/v1/traces").collect();
    assert!(!traces.is_empty());
    for r in &traces {
        assert_eq!(r.method, "POST");
        assert_eq!(r.content_type, "application/x-protobuf");
        assert!(!r.body.is_empty());
    }
    let all: Vec<u8> = traces.iter().flat_map(|r| r.body.clone()).collect();
    let contains = |needle: &[u8]| all.windows(needle.len()).any(|w| w == needle);
    assert!(contains(b"wave") && contains(b"spacewake"));
    let (_, services, events) = wave_details(&received);
    assert!(
        services.iter().all(|s| s == "spacewake") && !services.is_empty(),
        "{services:?}"
    );
    // The wave's debug event travels on its span, with the wave's figures.
    assert!(
        events.iter().any(|(name, keys)| name == "wave committed"
            && ["events", "seq"]
                .iter()
                .all(|k| keys.iter().any(|key| key == k))),
        "{events:?}"
    );
    assert!(
        received.iter().all(|r| r.path == "/v1/traces"),
        "only traces are exported: {:?}",
        received.iter().map(|r| &r.path).collect::<Vec<_>>()
    );
    assert!(
        server.log().contains("exporting OpenTelemetry spans"),
        "{}",
        server.log()
    );
    client.close().await.unwrap();
}

#[cfg(unix)]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn buffered_spans_are_flushed_when_serve_exits_on_ctrl_c() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    // A schedule delay far past the test: only the exit flush can send.
    let mut server = serve(
        dir.path(),
        Some(&receiver.endpoint()),
        &[("OTEL_BSP_SCHEDULE_DELAY", "600000".to_string())],
    );
    let client = run_a_wave(&server, "flushed").await;
    client.close().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(receiver.connections(), 0, "nothing sent before exit");
    let pid = server.child.id() as libc::pid_t;
    // SAFETY: signalling our own child process.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGINT) }, 0);
    let t = Instant::now();
    let status = loop {
        if let Some(status) = server.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            t.elapsed() < Duration::from_secs(15),
            "serve did not exit on ctrl-c; stderr:\n{}",
            server.log()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    assert!(status.success(), "{status:?}; stderr:\n{}", server.log());
    let (spaces, _) = wave_spans(&receiver.requests());
    assert!(
        spaces.iter().any(|s| s == "flushed"),
        "{spaces:?}; stderr:\n{}",
        server.log()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_nothing_is_exported() {
    let receiver = Receiver::start();
    let dir = tempfile::tempdir().unwrap();
    // The SDK's own signal variable points at the receiver: were an exporter
    // built by default, it would connect there.
    let server = serve(
        dir.path(),
        None,
        &[
            (
                "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
                format!("{}/v1/traces", receiver.endpoint()),
            ),
            ("OTEL_BSP_SCHEDULE_DELAY", "100".to_string()),
        ],
    );
    let client = run_a_wave(&server, "quiet").await;
    tokio::time::sleep(Duration::from_millis(1500)).await;
    client.close().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(
        receiver.connections(),
        0,
        "no connection without an endpoint"
    );
    // A log written to a pipe carries no colour codes.
    assert!(!server.log().contains('\u{1b}'), "{:?}", server.log());
    assert!(!server.log().contains("OpenTelemetry"), "{}", server.log());
}

#[test]
fn an_endpoint_that_is_not_http_or_https_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--otlp-endpoint",
            "ftp://collector.invalid:4318",
            "--data",
        ])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("expected an http:// or https:// URL"), "{err}");
    assert!(out.stdout.is_empty(), "serve did not start");
}
