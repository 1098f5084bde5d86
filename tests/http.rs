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
    assert!(text.contains("spacewake_events_appended_total 0"), "{text}");
    assert!(!text.contains("space=\"_host\""), "no pseudo-space");
    // Every family the host serves is listed in spec/metrics.md, so the
    // dashboard and the alert rules checked against that page name only
    // metrics that exist (the fleet's per-host gauges appear on PostgreSQL).
    let spec =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/spec/metrics.md")).unwrap();
    let mut families = 0;
    for line in text.lines().filter(|l| l.starts_with("# TYPE ")) {
        let mut words = line.split(' ').skip(2);
        let (name, kind) = (words.next().unwrap(), words.next().unwrap());
        let scraped = match kind {
            "counter" => format!("{name}_total"),
            _ => name.to_string(),
        };
        assert!(
            spec.contains(&format!("`{scraped}`")),
            "{scraped} is not in spec/metrics.md"
        );
        families += 1;
    }
    assert!(families > 100, "{families} families");
    // Real histograms, by base units.
    for h in [
        "spacewake_schedule_wake_lateness_seconds",
        "spacewake_wave_duration_seconds",
        "spacewake_activation_duration_seconds",
        "spacewake_effect_duration_seconds",
    ] {
        assert!(text.contains(&format!("# TYPE {h} histogram")), "{h}");
        assert!(text.contains(&format!("{h}_bucket{{le=\"+Inf\"}}")), "{h}");
    }
    assert!(text.trim_end().ends_with("# EOF"));

    let (status, _) = get(&server.addr, "/nope");
    assert_eq!(status, 404);
    assert!(
        dir.path().join("host.sqlite").exists(),
        "the store was opened"
    );
}

/// Whoever reads `serve`'s first line may close its stdout right after
/// (`spacewake serve | head -1`): the host keeps serving. Before, the second
/// line's `println!` panicked on the closed pipe and took the host down.
#[test]
fn serve_keeps_serving_when_its_stdout_is_closed() {
    let dir = tempfile::tempdir().unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let addr = format!("127.0.0.1:{port}");
    // A pipe whose reading end is gone before serve writes anything.
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let mut child = common::server::spacewake()
        .args(["serve", "--listen", &addr, "--data"])
        .arg(dir.path())
        .stdout(writer)
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let up = (0..200).any(|_| {
        std::thread::sleep(std::time::Duration::from_millis(50));
        common::server::try_http(&addr, "GET", "/api/health/stats", &[], b"")
            .is_ok_and(|(status, _)| status == 200)
    });
    // It printed both lines (into nothing) and is still there to answer.
    std::thread::sleep(std::time::Duration::from_millis(200));
    let still = common::server::try_http(&addr, "GET", "/api/health/stats", &[], b"");
    let exited = child.try_wait().unwrap();
    let _ = child.kill();
    let _ = child.wait();
    assert!(up, "serve never answered");
    assert!(exited.is_none(), "serve exited: {exited:?}");
    assert_eq!(still.unwrap().0, 200);
}

/// An on-time cap above the cap on scheduled activations would be silently
/// lowered to it: refused at start, naming both flags.
#[test]
fn serve_refuses_an_on_time_cap_above_the_scheduled_cap() {
    let dir = tempfile::tempdir().unwrap();
    let out = common::server::spacewake()
        .args(["serve", "--listen", "127.0.0.1:0", "--data"])
        .arg(dir.path())
        .args(["--max-scheduled", "4", "--on-time-scheduled", "6"])
        .output()
        .unwrap();
    assert!(!out.status.success(), "serve started");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("--on-time-scheduled 6 is above --max-scheduled 4"),
        "{err}"
    );
}
