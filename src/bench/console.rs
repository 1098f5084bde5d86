//! `spacewake bench console`: how fast the console's pages answer with
//! many spaces, side by side with the JSON twin of the spaces table (the
//! operator API's signed page of 50), against a real server on loopback in
//! this process.
//!
//! Target (issue 20): with 10,000 spaces the spaces page answers in under
//! 200 ms (paged).

use super::schedule::{names, provision, template, TICKER};
use crate::clock::{Clock, SystemClock};
use crate::host::{Host, HostConfig};
use crate::metrics::Counters;
use crate::protocol::{sign_operator, Identity};
use crate::store::{Store, StoreConfig};
use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Instant;

/// One GET on a fresh connection; its status and how long it took, in ms.
fn get(addr: &str, path: &str, headers: &[(&str, String)]) -> anyhow::Result<(u16, f64)> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    let mut req = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    s.write_all(req.as_bytes())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw)?;
    let status = std::str::from_utf8(raw.get(9..12).unwrap_or_default())?.parse()?;
    Ok((status, t.elapsed().as_secs_f64() * 1e3))
}

fn median_p99(mut v: Vec<f64>) -> (f64, f64) {
    v.sort_by(f64::total_cmp);
    let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

pub fn run(scale: f64) -> anyhow::Result<ExitCode> {
    let spaces = ((10_000.0 * scale) as usize).max(10);
    let rounds = ((40.0 * scale) as usize).clamp(5, 40);
    println!("spacewake bench console (scale {scale})");
    let root = std::env::temp_dir().join(format!("spacewake-bench-console-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let t = template(&root.join("template"), TICKER)?;
    let clock: std::sync::Arc<dyn Clock> = std::sync::Arc::new(SystemClock);
    let store = Store::open(StoreConfig::new(root.join("host")), clock, Counters::new())?;
    let ids = names("console", spaces);
    let made = Instant::now();
    provision(&store, &ids, &t)?;
    let made = made.elapsed().as_secs_f64();
    let host = Host::new(store, HostConfig::default());
    let operator = Identity::generate();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let addr = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = crate::http::router(crate::http::HttpState::new(
            host.clone(),
            crate::http::OperatorAuth::new([operator.did()]),
        ));
        tokio::spawn(async move {
            let _ = axum::serve(crate::http::nodelay(listener), app).await;
        });
        anyhow::Ok(addr.to_string())
    })?;
    let signed = |path: &str| {
        let now = SystemClock.now_ms();
        vec![
            ("x-spacewake-did", operator.did()),
            ("x-spacewake-time", now.to_string()),
            (
                "x-spacewake-signature",
                sign_operator(&operator, now, "GET", path, b""),
            ),
        ]
    };
    let twin_path = "/api/operator/spaces?limit=50";
    let cases: Vec<(String, String, bool)> = vec![
        ("spaces page, by id".into(), "/console/spaces".into(), false),
        (
            "spaces page, by next wake, descending".into(),
            "/console/spaces?sort=nextWake&desc=true".into(),
            false,
        ),
        (
            "spaces page, filtered to one".into(),
            format!("/console/spaces?q={}", ids[ids.len() / 2]),
            false,
        ),
        ("host page".into(), "/console".into(), false),
        (
            "a space's page".into(),
            format!("/console/spaces/{}", ids[0]),
            false,
        ),
        ("JSON twin (50 spaces)".into(), twin_path.into(), true),
    ];
    let mut twin_median = 0.0;
    let mut lines = Vec::new();
    for (name, path, sign) in &cases {
        // One warm-up request, then the measured rounds.
        let mut times = Vec::with_capacity(rounds);
        for i in 0..=rounds {
            let headers = if *sign { signed(path) } else { Vec::new() };
            let (status, ms) = get(&addr, path, &headers)?;
            anyhow::ensure!(status == 200, "{path}: HTTP {status}");
            if i > 0 {
                times.push(ms);
            }
        }
        let (m, p99) = median_p99(times);
        if *sign {
            twin_median = m;
        }
        lines.push((name.clone(), m, p99));
    }
    for (name, m, p99) in lines {
        println!(
            "{name}: median {m:.1} ms, p99 {p99:.1} ms ({:.2}x the JSON twin){}",
            m / twin_median,
            if name.starts_with("spaces page") {
                " (target < 200 ms)"
            } else {
                ""
            }
        );
    }
    println!("({spaces} spaces, each with a scheduled piece, provisioned in {made:.1} s; {rounds} requests a page)");
    drop(rt);
    let _ = std::fs::remove_dir_all(&root);
    Ok(ExitCode::SUCCESS)
}
