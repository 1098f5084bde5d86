//! `spacewake bench effects`: the CPU a wake spends with a fetch of a small
//! JSON document from a local server, beside the same wake without the
//! fetch, side by side in one run (alternating rounds, medians). Target:
//! the broker adds at most 0.3 ms of CPU per request.
//!
//! CPU is the process's (`CLOCK_PROCESS_CPUTIME_ID`: the space's thread and
//! the broker's alike), less what the local server's own thread spent
//! answering. Both wakes run the same waves (an event, then the wave that
//! would commit the answer), so the difference is the request's round trip
//! through the broker: submitting, the budget, the HTTP client, the policy
//! check, the outcome's delivery and its settling into state.

use crate::clock::ManualClock;
use crate::compiler::{compile, MemorySource};
use crate::effects::policy::Allowlist;
use crate::effects::{Broker, BrokerConfig};
use crate::metrics::Counters;
use crate::runtime::effects::EffectDone;
use crate::runtime::{RuntimeConfig, SpaceRuntime};
use crate::store::path::parse_dotted;
use crate::store::{Author, Store, StoreConfig};
use serde_json::json;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpListener;
use std::process::ExitCode;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::Duration;

/// One pattern, two wakes: `fetching` asks the URL its counter names;
/// otherwise the URL is built and nothing is asked.
const WAKE: &str = r#"
import { pattern, handler, computed, fetchJson, Cell, Default } from "commonfabric";
const bump = handler<{}, { n: Cell<number> }>((_e, { n }) => { n.set(n.get() + 1); });
export default pattern<{ base: Default<string, "">; fetching: Default<boolean, false>; n: Default<number, 0> }>(
  ({ base, fetching, n }) => {
    const url = computed(() => `${base}/doc?n=${n}`);
    const doc = fetchJson<{ value: number }>({ url: computed(() => (fetching ? url : "")) });
    const value = computed(() => (fetching ? doc.result?.value ?? -1 : url.length));
    return { value, bump: bump({ n }) };
  },
);
"#;

const BODY: &str = r#"{"value":42,"items":[1,2,3],"label":"a small JSON document"}"#;

/// A keep-alive HTTP/1.1 server answering every request with [`BODY`];
/// the CPU its threads spend is added to the returned counter.
fn serve_local(server_cpu: Arc<AtomicU64>) -> std::io::Result<String> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let cpu = server_cpu.clone();
            std::thread::spawn(move || {
                let _ = stream.set_nodelay(true);
                let mut write = match stream.try_clone() {
                    Ok(w) => w,
                    Err(_) => return,
                };
                let mut read = BufReader::new(stream);
                let mut line = String::new();
                loop {
                    // The request line and headers (GETs: no body).
                    line.clear();
                    match read.read_line(&mut line) {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                    let start = crate::accounting::thread_cpu_us();
                    loop {
                        line.clear();
                        match read.read_line(&mut line) {
                            Ok(0) | Err(_) => return,
                            Ok(_) if line == "\r\n" => break,
                            Ok(_) => {}
                        }
                    }
                    let answer = format!(
                        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{BODY}",
                        BODY.len()
                    );
                    if write.write_all(answer.as_bytes()).is_err() {
                        return;
                    }
                    cpu.fetch_add(
                        crate::accounting::thread_cpu_us().saturating_sub(start),
                        Ordering::Relaxed,
                    );
                }
            });
        }
    });
    Ok(format!("http://{addr}"))
}

pub fn run(scale: f64) -> anyhow::Result<ExitCode> {
    let wakes = ((400.0 * scale) as usize).max(5);
    let rounds = 7;
    let dir = std::env::temp_dir().join(format!("spacewake-bench-effects-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let server_cpu = Arc::new(AtomicU64::new(0));
    let base = serve_local(server_cpu.clone())?;
    let clock = Arc::new(ManualClock::default());
    let counters = Counters::new();
    let store = Store::open(StoreConfig::new(&dir), clock.clone(), counters.clone())?;
    let ttl = store.config().lease_ttl_ms;
    let mut broker_cfg = BrokerConfig::new(url::Url::parse(&base)?);
    broker_cfg.allow = Allowlist::new(vec![base
        .trim_start_matches("http://")
        .parse()
        .map_err(|e| anyhow::anyhow!("{e}"))?]);
    // Pacing is not what is measured: a bucket that never holds.
    broker_cfg.budget.requests_per_second = 1e9;
    broker_cfg.budget.request_burst = 1e9;
    broker_cfg.budget.bytes_per_second = 1e12;
    broker_cfg.budget.byte_burst = 1e12;
    let broker =
        Broker::new(broker_cfg, clock.clone(), counters.clone()).map_err(|e| anyhow::anyhow!(e))?;
    let program = compile("wake.tsx", &MemorySource::new().with("wake.tsx", WAKE))
        .map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
    let author = Author::principal("did:key:bench");
    let mut runs = Vec::new();
    for (name, fetching) in [("fetching", true), ("still", false)] {
        store.create_space(name, "did:key:bench")?;
        let cfg = RuntimeConfig {
            effects: Some(broker.clone()),
            ..RuntimeConfig::default()
        };
        let mut rt = SpaceRuntime::start(store.open_space(name)?, clock.clone(), ttl, cfg)?;
        let (tx, rx) = mpsc::channel::<EffectDone>();
        rt.set_effect_sink(Arc::new(move |d| {
            let _ = tx.send(d);
        }));
        let piece =
            rt.create_piece(&program, None, &json!({"base": base, "fetching": fetching}))?;
        rt.demand(&piece, &parse_dotted("value"));
        rt.run_wave()?;
        if fetching {
            let d = rx.recv_timeout(Duration::from_secs(10))?;
            rt.apply_effect(d)?;
            rt.run_wave()?;
        }
        runs.push((rt, rx, piece, fetching));
    }
    let mut id = 0u64;
    let mut samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (k, (rt, rx, piece, fetching)) in runs.iter_mut().enumerate() {
            let server_before = server_cpu.load(Ordering::Relaxed);
            let before = crate::accounting::process_cpu_us();
            for _ in 0..wakes {
                id += 1;
                rt.send(
                    piece,
                    &parse_dotted("bump"),
                    &format!("e{id}"),
                    json!({}),
                    &author,
                )?;
                rt.run_wave()?;
                if *fetching {
                    let d = rx.recv_timeout(Duration::from_secs(10))?;
                    rt.apply_effect(d)?;
                }
                rt.run_wave()?;
            }
            let spent = crate::accounting::process_cpu_us().saturating_sub(before);
            let server = server_cpu.load(Ordering::Relaxed) - server_before;
            samples[k].push(spent.saturating_sub(server) as f64 / wakes as f64);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let with = med(&mut samples[0]);
    let without = med(&mut samples[1]);
    let added = with - without;
    let requests = counters.space_value("fetching", crate::metrics::Counter::EffectsCompleted);
    println!("bench effects: {wakes} wakes per round, {rounds} rounds, medians of CPU per wake (process CPU less the local server's)");
    println!("  wake with a fetch     {:>8.1} µs", with);
    println!("  wake without          {:>8.1} µs", without);
    println!(
        "  the broker per request {:>7.1} µs ({:.2}x the wake without; target ≤ 300 µs)",
        added,
        with / without.max(1.0)
    );
    println!("  requests answered: {requests}");
    let _ = std::fs::remove_dir_all(&dir);
    Ok(if added <= 300.0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    })
}
