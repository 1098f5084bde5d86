//! The health and metrics routes on a real `spacewake serve` process.

mod common;

use common::server::{http, Server};

fn get(addr: &str, path: &str) -> (u16, String) {
    http(addr, "GET", path, &[], b"")
}

#[test]
fn serve_exposes_health_stats_and_prometheus_metrics() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
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
