//! `spacewake bench accounting`: wave time with metering on vs off, side by
//! side in one run (alternating rounds, medians), target overhead ≤ 3%.

use crate::clock::ManualClock;
use crate::compiler::{compile, MemorySource};
use crate::metrics::Counters;
use crate::runtime::{RuntimeConfig, SpaceRuntime};
use crate::store::path::parse_dotted;
use crate::store::{Author, Store, StoreConfig};
use serde_json::json;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

const COUNTER: &str = r#"
import { pattern, handler, computed, Cell, Default } from "commonfabric";
const increment = handler<{}, { value: Cell<number> }>((_e, { value }) => { value.set(value.get() + 1); });
export default pattern<{ value: Default<number, 0> }>(({ value }) => {
  const doubled = computed(() => value * 2);
  return { value, doubled, increment: increment({ value }) };
});
"#;

pub fn run(scale: f64) -> anyhow::Result<ExitCode> {
    let n = |full: usize| ((full as f64 * scale) as usize).max(5);
    let dir =
        std::env::temp_dir().join(format!("spacewake-bench-accounting-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = Arc::new(ManualClock::default());
    let store = Store::open(StoreConfig::new(&dir), clock.clone(), Counters::new())?;
    let ttl = store.config().lease_ttl_ms;
    let program = compile(
        "counter.tsx",
        &MemorySource::new().with("counter.tsx", COUNTER),
    )
    .map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
    let mut runtimes = Vec::new();
    for (name, metering) in [("metered", true), ("unmetered", false)] {
        store.create_space(name, "did:key:bench")?;
        let cfg = RuntimeConfig {
            metering,
            ..RuntimeConfig::default()
        };
        let mut rt = SpaceRuntime::start(store.open_space(name)?, clock.clone(), ttl, cfg)?;
        let piece = rt.create_piece(&program, None, &json!({}))?;
        rt.demand(&piece, &parse_dotted("doubled"));
        rt.run_wave()?;
        runtimes.push((rt, piece));
    }
    // Each wave: a batch of events appended, then one wave consumes them.
    let batch = 16;
    let waves = n(400);
    let rounds = 7;
    let author = Author::principal("did:key:bench");
    let mut samples: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut id = 0u64;
    for _ in 0..rounds {
        for (k, (rt, piece)) in runtimes.iter_mut().enumerate() {
            let mut wave_time = 0.0;
            for _ in 0..waves {
                for _ in 0..batch {
                    id += 1;
                    rt.send(
                        piece,
                        &parse_dotted("increment"),
                        &format!("e{id}"),
                        json!({}),
                        &author,
                    )?;
                }
                let t = Instant::now();
                rt.run_wave()?;
                wave_time += t.elapsed().as_secs_f64();
            }
            samples[k].push(wave_time / waves as f64);
        }
    }
    let med = |v: &mut Vec<f64>| {
        v.sort_by(|a, b| a.total_cmp(b));
        v[v.len() / 2]
    };
    let on = med(&mut samples[0]);
    let off = med(&mut samples[1]);
    println!("spacewake bench accounting (scale {scale})");
    println!(
        "metering: wave {:.1} us metered vs {:.1} us unmetered, overhead {:+.1}% (target <= 3%; {waves} waves of {batch} events per round, median of {rounds} alternating rounds)",
        on * 1e6,
        off * 1e6,
        (on / off - 1.0) * 100.0
    );
    for (rt, _) in runtimes {
        rt.stop()?;
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ExitCode::SUCCESS)
}
