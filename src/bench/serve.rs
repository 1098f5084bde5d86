//! `spacewake bench serve`: a load generator against the real server on
//! loopback (axum + WebSocket, in this process), printing side by side:
//!
//! 1. event-to-update latency p50/p99 for one session (target p99 < 5 ms);
//! 2. sustained events/s with 1,000 sessions over 100 spaces;
//! 3. resident memory with 1,000 spaces parked vs never opened (target:
//!    within 5%).

use super::{rss_kib, status_kib};
use crate::clock::SystemClock;
use crate::host::{Host, HostConfig, Trigger};
use crate::metrics::{Counter, Counters};
use crate::protocol::client::Client;
use crate::protocol::messages::{Deploy, SendEvent, Track};
use crate::protocol::{ClientMessage, Identity, PathSegment, ServerMessage};
use crate::store::{Author, PathSeg, Store, StoreConfig};
use anyhow::{bail, Context};
use serde_json::json;
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

const COUNTER: &str = r#"
import { pattern, handler, Cell, Default } from "commonfabric";
const increment = handler<{}, { value: Cell<number> }>((_e, { value }) => { value.set(value.get() + 1); });
export default pattern<{ value: Default<number, 0> }>(({ value }) => ({ value, increment: increment({ value }) }));
"#;

/// One figure of the bench, for `--only`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Figure {
    Latency,
    Throughput,
    Memory,
}

pub fn run(scale: f64, only: &[Figure]) -> anyhow::Result<ExitCode> {
    let want = |f: Figure| only.is_empty() || only.contains(&f);
    let n = |full: usize| ((full as f64 * scale) as usize).max(2);
    let (dir, _store, host) = fresh_host("serve", 200)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    println!("spacewake bench serve (scale {scale})");
    let result = rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let app = crate::http::router(crate::http::HttpState::new(
            host.clone(),
            crate::http::OperatorAuth::new([]),
        ));
        tokio::spawn(crate::session::watch_grants(host.clone()));
        tokio::spawn(async move {
            let _ = axum::serve(crate::http::nodelay(listener), app).await;
        });
        let url = format!("ws://{addr}/ws");
        if want(Figure::Latency) {
            latency(&url, n(2_000)).await?;
        }
        if want(Figure::Throughput) {
            throughput(
                &host,
                &url,
                n(100),
                10,
                Duration::from_secs_f64((5.0 * scale).max(0.5)),
            )
            .await?;
        }
        anyhow::Ok(())
    });
    drop(rt);
    result?;
    if want(Figure::Memory) {
        memory(n(1_000))?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ExitCode::SUCCESS)
}

pub(super) async fn open_counter(
    url: &str,
    id: &Identity,
    space: &str,
) -> anyhow::Result<(Client, String)> {
    let (mut c, _) = Client::connect_creating(url, id, space).await?;
    let rid = c.fresh_id();
    let piece = match c
        .request(ClientMessage::Deploy(Deploy {
            id: rid,
            entry: "counter.tsx".into(),
            files: BTreeMap::from([("counter.tsx".to_string(), COUNTER.to_string())]),
            export: None,
            argument: Some(json!({})),
        }))
        .await?
    {
        ServerMessage::Deployed(d) => d.piece,
        other => bail!("deploy failed: {}", other.to_text()),
    };
    Ok((c, piece))
}

fn key(k: &str) -> Vec<PathSegment> {
    vec![PathSegment::Key(k.into())]
}

async fn latency(url: &str, events: usize) -> anyhow::Result<()> {
    let me = Identity::generate();
    let (mut c, piece) = open_counter(url, &me, "latency").await?;
    let rid = c.fresh_id();
    c.request(ClientMessage::Track(Track {
        id: rid,
        piece: piece.clone(),
        path: Some(key("value")),
        since: None,
    }))
    .await?;
    c.next_update(Duration::from_secs(5))
        .await?
        .context("initial value")?;
    let mut samples = Vec::with_capacity(events);
    for i in 0..events {
        let t = Instant::now();
        let rid = c.fresh_id();
        c.request(ClientMessage::Send(SendEvent {
            id: rid,
            piece: piece.clone(),
            stream: key("increment"),
            payload: json!({}),
            event_id: Some(format!("lat-{i}")),
        }))
        .await?;
        let u = c
            .next_update(Duration::from_secs(5))
            .await?
            .context("an update")?;
        samples.push(t.elapsed().as_secs_f64() * 1e3);
        if u.value != json!(i + 1) {
            bail!("update {} carried {}", i + 1, u.value);
        }
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| samples[((samples.len() as f64 * p) as usize).min(samples.len() - 1)];
    println!(
        "latency: event-to-update p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms ({events} events, one session; target p99 < 5 ms)",
        pct(0.50),
        pct(0.99),
        samples[samples.len() - 1]
    );
    Ok(())
}

async fn throughput(
    host: &Host,
    url: &str,
    spaces: usize,
    per_space: usize,
    run_for: Duration,
) -> anyhow::Result<()> {
    let me = me_clone();
    let counters = host.counters();
    let mut pieces = Vec::new();
    for s in 0..spaces {
        let (c, piece) = open_counter(url, &me, &format!("load-{s}")).await?;
        pieces.push(piece);
        c.close().await.ok();
    }
    let tally = || {
        let c = counters.host();
        [
            c.get(Counter::DirectoryMovedEarlier) + c.get(Counter::DirectoryMovedLater),
            c.get(Counter::Waves),
            c.get(Counter::WalCheckpoints),
        ]
    };
    // Every session connects first; the clock starts when the last one has
    // (before, sessions that connected late shortened the measured window).
    let sessions = spaces * per_space;
    let ready = Arc::new(tokio::sync::Barrier::new(sessions + 1));
    let connecting = Instant::now();
    let mut tasks = Vec::new();
    for (s, piece) in pieces.iter().enumerate() {
        for k in 0..per_space {
            let url = url.to_string();
            let piece = piece.clone();
            let space = format!("load-{s}");
            let id = me_clone();
            let ready = ready.clone();
            tasks.push(tokio::spawn(async move {
                let connected = Client::connect(&url, &id, &space).await;
                ready.wait().await;
                let (mut c, _) = connected?;
                let deadline = Instant::now() + run_for;
                let mut sent = 0u64;
                while Instant::now() < deadline {
                    let rid = c.fresh_id();
                    match c
                        .request(ClientMessage::Send(SendEvent {
                            id: rid,
                            piece: piece.clone(),
                            stream: key("increment"),
                            payload: json!({}),
                            event_id: Some(format!("{space}-{k}-{sent}")),
                        }))
                        .await?
                    {
                        ServerMessage::Ack(_) => sent += 1,
                        other => bail!("send failed: {}", other.to_text()),
                    }
                }
                c.close().await.ok();
                anyhow::Ok(sent)
            }));
        }
    }
    ready.wait().await;
    let connect_ms = connecting.elapsed().as_millis();
    let before = tally();
    let mut total = 0u64;
    let mut sents = Vec::new();
    for t in tasks {
        let sent = t.await??;
        total += sent;
        sents.push(sent);
    }
    sents.sort_unstable();
    let after = tally();
    let per_event = |i: usize| (after[i] - before[i]) as f64 / total.max(1) as f64;
    println!(
        "throughput: {:.0} events/s sustained ({sessions} sessions over {spaces} spaces for {:.1} s, each send acknowledged after its commit; sends per session min {} median {} max {}; connecting all sessions took {connect_ms} ms; per event: {:.3} waves, {:.3} host directory writes, {:.4} idle checkpoints)",
        total as f64 / run_for.as_secs_f64(),
        run_for.as_secs_f64(),
        sents[0],
        sents[sents.len() / 2],
        sents[sents.len() - 1],
        per_event(1),
        per_event(0),
        per_event(2),
    );
    Ok(())
}

/// The shared load identity: every load session signs as the owner.
fn me_text() -> String {
    static SECRET: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SECRET
        .get_or_init(|| Identity::generate().secret_hex())
        .clone()
}

fn me_clone() -> Identity {
    Identity::from_secret_text(&me_text()).expect("a generated secret parses")
}

/// A host on the system clock in a fresh temporary data directory.
fn fresh_host(tag: &str, idle_park_ms: u64) -> anyhow::Result<(std::path::PathBuf, Store, Host)> {
    let dir = std::env::temp_dir().join(format!("spacewake-bench-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let store = Store::open(
        StoreConfig::new(&dir),
        Arc::new(SystemClock),
        Counters::new(),
    )?;
    let host = Host::new(
        store.clone(),
        HostConfig {
            idle_park_ms,
            ..HostConfig::default()
        },
    );
    Ok((dir, store, host))
}

/// Resident memory of a host with `spaces` parked spaces vs the same host
/// whose spaces were never opened. Every space is a copy of one template
/// file holding a deployed counter piece; "parked" spaces were each
/// activated by an event, ran it and parked. Each figure comes from its own
/// fresh process (this binary, `bench serve-memory`), started as `serve`
/// starts (the start-up check included), so neither inherits the other's
/// allocator or page-cache state.
fn memory(spaces: usize) -> anyhow::Result<()> {
    let (dir, piece) = memory_template()?;
    let template = dir.join("spaces").join("template.sqlite");
    let measure = |parked: bool| -> anyhow::Result<Probe> {
        let out = std::process::Command::new(std::env::current_exe()?)
            .args(["bench", "serve-memory", "--spaces"])
            .arg(spaces.to_string())
            .arg("--template")
            .arg(&template)
            .args(["--piece", &piece])
            .args(if parked { &["--parked"][..] } else { &[][..] })
            .env("SPACEWAKE_LOG", "error")
            .output()?;
        anyhow::ensure!(out.status.success(), "memory probe failed: {out:?}");
        let text = String::from_utf8_lossy(&out.stdout);
        let field = |name: &str| -> anyhow::Result<u64> {
            text.lines()
                .find_map(|l| l.strip_prefix(name).and_then(|v| v.trim().parse().ok()))
                .with_context(|| format!("the memory probe printed no {name} line"))
        };
        Ok(Probe {
            rss: field("rss_kib ")?,
            anon: field("rss_anon_kib ")?,
        })
    };
    let mib = |k: u64| k as f64 / 1024.0;
    // Code pages and allocator state move by a few hundred KiB between
    // otherwise identical processes, so each figure is the median of
    // several fresh processes, the two kinds alternating.
    const PROBES: usize = 5;
    let mut never = Vec::new();
    let mut parked = Vec::new();
    let probed = (0..PROBES).try_for_each(|_| {
        never.push(measure(false)?);
        parked.push(measure(true)?);
        anyhow::Ok(())
    });
    let _ = std::fs::remove_dir_all(&dir);
    probed?;
    let median = |v: &[Probe], f: fn(&Probe) -> u64| -> u64 {
        let mut xs: Vec<u64> = v.iter().map(f).collect();
        xs.sort_unstable();
        xs[xs.len() / 2]
    };
    let (n_rss, n_anon) = (median(&never, |p| p.rss), median(&never, |p| p.anon));
    let (p_rss, p_anon) = (median(&parked, |p| p.rss), median(&parked, |p| p.anon));
    let each: Vec<String> = never
        .iter()
        .zip(&parked)
        .map(|(n, p)| format!("{:.3}", p.rss as f64 / n.rss.max(1) as f64))
        .collect();
    println!(
        "memory: {spaces} spaces with a counter piece, never opened {:.1} MiB RSS ({:.1} anonymous), after an event activated each and all parked {:.1} MiB RSS ({:.1} anonymous), ratio {:.3}, {:+.0} KiB in all, {:.0} bytes per parked space (target within 5%; fresh processes, medians of {PROBES} each, pairwise ratios {})",
        mib(n_rss),
        mib(n_anon),
        mib(p_rss),
        mib(p_anon),
        p_rss as f64 / n_rss.max(1) as f64,
        p_rss as f64 - n_rss as f64,
        (p_rss as f64 - n_rss as f64) * 1024.0 / spaces.max(1) as f64,
        each.join(" ")
    );
    Ok(())
}

/// The memory probes' template: a space named `template` with a deployed
/// counter piece that has handled one event, parked. Returns its data
/// directory and the piece's id.
fn memory_template() -> anyhow::Result<(std::path::PathBuf, String)> {
    let (dir, store, host) = fresh_host("mem-template", 0)?;
    store.create_space("template", OWNER)?;
    let piece = host
        .deploy_file_blocking("template", "counter.tsx", COUNTER, json!({}))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    host.ask_blocking("template", Trigger::Events, increment(&piece, "template"))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    wait_for_parks(&host, 1, Duration::from_secs(30))?;
    while !host.active_spaces().is_empty() {
        std::thread::sleep(Duration::from_millis(5));
    }
    host.shutdown();
    // Fold the WAL into the file: the probes copy the file alone.
    let conn = rusqlite::Connection::open(store.space_path("template"))?;
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))?;
    Ok((dir, piece))
}

const OWNER: &str = "did:key:bench";

fn increment(piece: &str, event_id: &str) -> crate::host::SendEvent {
    crate::host::SendEvent {
        author: Author::principal(OWNER),
        piece: piece.to_string(),
        path: vec![PathSeg::Key("increment".into())],
        event_id: Some(event_id.to_string()),
        payload: json!({}),
    }
}

struct Probe {
    rss: u64,
    anon: u64,
}

/// Waits until the host has parked `n` spaces in all.
fn wait_for_parks(host: &Host, n: usize, timeout: Duration) -> anyhow::Result<()> {
    let t = Instant::now();
    while host.counters().host().get(Counter::Parks) < n as i64 {
        if t.elapsed() > timeout {
            bail!("spaces did not park within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// `bench serve-memory`: one probe of [`memory`]. Starts a host as `serve`
/// does and registers `spaces` spaces, each a copy of `template`; with
/// `parked`, sends each one event to `piece` (in waves of 100, as a host
/// under steady load would see them) and waits until all have parked.
/// Prints `rss_kib N`, `rss_anon_kib N` and `counter_sets N`.
pub fn memory_probe(
    spaces: usize,
    template: &std::path::Path,
    piece: &str,
    parked: bool,
) -> anyhow::Result<ExitCode> {
    let (dir, store, host) = fresh_host("mem", 50)?;
    host.check_start()?;
    host.start_waker();
    for i in 0..spaces {
        let id = format!("idle-{i}");
        std::fs::copy(template, store.space_path(&id))
            .with_context(|| format!("copying {}", template.display()))?;
        store.create_space(&id, OWNER)?;
    }
    if parked {
        for start in (0..spaces).step_by(100) {
            let end = (start + 100).min(spaces);
            for i in start..end {
                let id = format!("idle-{i}");
                host.notify(&id, Trigger::Events, increment(piece, &id))
                    .map_err(|e| anyhow::anyhow!("{e}"))?;
            }
            wait_for_parks(&host, end, Duration::from_secs(120))?;
        }
        let processed = host.counters().host().get(Counter::EventsProcessed);
        anyhow::ensure!(
            processed == spaces as i64,
            "{processed} events processed, not {spaces}"
        );
    }
    // Steady state: the pool's idle space-server threads have exited.
    std::thread::sleep(crate::host::POOL_KEEP + Duration::from_millis(300));
    crate::allocator::release_freed_memory();
    println!("rss_kib {}", rss_kib());
    println!("rss_anon_kib {}", status_kib("RssAnon:"));
    println!("counter_sets {}", host.counters().space_count());
    if std::env::var("SPACEWAKE_MALLOC_STATS").is_ok() {
        // SAFETY: malloc_stats only prints the allocator's own statistics.
        unsafe { libc::malloc_stats() };
    }
    if let Ok(to) = std::env::var("SPACEWAKE_SMAPS_TO") {
        let _ = std::fs::copy("/proc/self/smaps", to);
    }
    host.shutdown();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ExitCode::SUCCESS)
}
