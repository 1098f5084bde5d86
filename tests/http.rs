//! The operator routes on a real `spacewake serve` process.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};

struct Server {
    child: Child,
    addr: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn serve(data: &std::path::Path) -> Server {
    let mut child = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(data)
        .env("SPACEWAKE_LOG", "warn")
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let line = lines.next().expect("serve prints its address").unwrap();
    let addr = line.strip_prefix("listening on ").unwrap().to_string();
    Server { child, addr }
}

fn get(addr: &str, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = String::new();
    s.read_to_string(&mut raw).unwrap();
    let status: u16 = raw[9..12].parse().unwrap();
    let body = raw
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

#[test]
fn serve_exposes_health_stats_and_prometheus_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let server = serve(dir.path());
    let (status, body) = get(&server.addr, "/api/health/stats");
    assert_eq!(status, 200);
    let v: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["ok"], true);
    let sl = &v["servingLoop"];
    for block in ["demand", "events", "lease", "schedule", "ledger", "store"] {
        assert!(sl[block].is_object(), "servingLoop.{block} missing: {sl}");
    }
    assert_eq!(sl["events"]["appended"], 0);

    let (status, text) = get(&server.addr, "/metrics");
    assert_eq!(status, 200);
    assert!(
        text.contains("spacewake_events_appended_total{space=\"_host\"} 0"),
        "{text}"
    );
    assert!(text.trim_end().ends_with("# EOF"));

    let (status, _) = get(&server.addr, "/nope");
    assert_eq!(status, 404);
    assert!(
        dir.path().join("host.sqlite").exists(),
        "the store was opened"
    );
}
