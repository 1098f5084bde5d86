//! `spacewake bench patterns`: the compiler, instantiation, the event path
//! and derivation throughput, side by side in one run.
//!
//! 1. Cold compile vs cached compile of a generated 500-line pattern.
//! 2. Piece instantiations per second (create + commit).
//! 3. Events per second through a counter handler with one demanded
//!    derivation: appended as authored commits, consumed by waves.
//! 4. Derivations per second along a 1,000-node lift chain.

use crate::clock::{Clock, ManualClock};
use crate::compiler::{compile, CompileCache, MemorySource};
use crate::metrics::Counters;
use crate::runtime::{RuntimeConfig, SpaceRuntime};
use crate::store::path::parse_dotted;
use crate::store::{Author, Store, StoreConfig};
use serde_json::json;
use std::fmt::Write as _;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

pub fn run(scale: f64) -> anyhow::Result<ExitCode> {
    let n = |full: usize| ((full as f64 * scale) as usize).max(5);
    println!("spacewake bench patterns (scale {scale})");

    // 1. Compile cache.
    let src = MemorySource::new().with("big.tsx", &big_pattern(500));
    let lines = big_pattern(500).lines().count();
    let reps = n(20);
    let mut cold = Vec::new();
    for _ in 0..reps {
        let t = Instant::now();
        compile("big.tsx", &src).map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
        cold.push(t.elapsed().as_secs_f64());
    }
    let cache = CompileCache::new();
    cache
        .compile("big.tsx", &src)
        .map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
    let mut warm = Vec::new();
    for _ in 0..reps * 10 {
        let t = Instant::now();
        cache
            .compile("big.tsx", &src)
            .map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
        warm.push(t.elapsed().as_secs_f64());
    }
    let (c, w) = (median(cold), median(warm));
    println!(
        "compile ({lines} lines): cold {:.2} ms, cached {:.1} us, cached is {:.0}x faster (target >= 20x)",
        c * 1e3,
        w * 1e6,
        c / w
    );

    let dir = std::env::temp_dir().join(format!("spacewake-bench-patterns-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let clock = Arc::new(ManualClock::default());
    let store = Store::open(StoreConfig::new(&dir), clock.clone(), Counters::new())?;
    let ttl = store.config().lease_ttl_ms;
    let counter = MemorySource::new().with("counter.tsx", COUNTER);
    let counter = compile("counter.tsx", &counter)
        .map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;

    // 2. Instantiation.
    store.create_space("inst", "did:key:bench")?;
    let mut rt = SpaceRuntime::start(
        store.open_space("inst")?,
        clock.clone(),
        ttl,
        RuntimeConfig::default(),
    )?;
    let count = n(500);
    let heap_before = rt.memory_used_bytes();
    let t = Instant::now();
    for i in 0..count {
        rt.create_piece(&counter, None, &json!({"value": i}))?;
        rt.flush()?;
    }
    let per_s = count as f64 / t.elapsed().as_secs_f64();
    let heap = rt.memory_used_bytes();
    println!(
        "instantiation: {per_s:.0} pieces/s ({count} counter pieces in one space, each committed); \
         engine heap {:.1} MiB, {:.1} KiB a piece (each its own module instance)",
        heap as f64 / (1 << 20) as f64,
        heap.saturating_sub(heap_before) as f64 / count as f64 / 1024.0
    );
    rt.stop()?;

    // 3. Events through a handler with one demanded derivation.
    store.create_space("events", "did:key:bench")?;
    let mut rt = SpaceRuntime::start(
        store.open_space("events")?,
        clock.clone(),
        ttl,
        RuntimeConfig::default(),
    )?;
    let piece = rt.create_piece(&counter, None, &json!({"value": 0}))?;
    rt.demand(&piece, &parse_dotted("doubled"));
    rt.run_wave()?;
    let events = n(20_000);
    let author = Author::principal("did:key:bench");
    let bump = parse_dotted("increment");
    let t = Instant::now();
    for i in 0..events {
        rt.send(&piece, &bump, &format!("e{i}"), json!({}), &author)?;
    }
    let appended = t.elapsed().as_secs_f64();
    let t2 = Instant::now();
    rt.settle(events)?;
    let waves = t2.elapsed().as_secs_f64();
    anyhow::ensure!(
        rt.read(&piece, &parse_dotted("value"))? == json!(events),
        "the counter did not count every event"
    );
    println!(
        "events: {:.0} events/s end to end ({:.0}/s appending, {:.0}/s in waves; {events} events, one demanded derivation, target >= 20000/s)",
        events as f64 / (appended + waves),
        events as f64 / appended,
        events as f64 / waves
    );
    rt.stop()?;

    // 4. A 1,000-node lift chain.
    let chain = MemorySource::new().with("chain.tsx", &lift_chain(1_000));
    let chain =
        compile("chain.tsx", &chain).map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
    store.create_space("chain", "did:key:bench")?;
    let mut rt = SpaceRuntime::start(
        store.open_space("chain")?,
        clock.clone(),
        ttl,
        RuntimeConfig::default(),
    )?;
    let piece = rt.create_piece(&chain, None, &json!({"value": 0}))?;
    rt.demand(&piece, &parse_dotted("last"));
    rt.run_wave()?;
    let rounds = n(10);
    let t = Instant::now();
    for i in 0..rounds {
        rt.send(
            &piece,
            &parse_dotted("bump"),
            &format!("c{i}"),
            json!({}),
            &author,
        )?;
        rt.settle(10)?;
        clock.advance_ms(1);
    }
    let secs = t.elapsed().as_secs_f64();
    if let Some(f) = rt.failures().first() {
        anyhow::bail!(
            "a derivation failed: {f:?} ({} failures)",
            rt.failures().len()
        );
    }
    anyhow::ensure!(rt.read(&piece, &parse_dotted("last"))? == json!(rounds + 1_000));
    println!(
        "derivations: {:.0} derivations/s along a 1000-node lift chain ({rounds} changes, each re-running all 1000)",
        (rounds * 1_000) as f64 / secs
    );
    rt.stop()?;
    let _ = clock.now_ms();
    let _ = std::fs::remove_dir_all(&dir);
    Ok(ExitCode::SUCCESS)
}

const COUNTER: &str = r#"
import { pattern, handler, computed, Cell, Default } from "commonfabric";
const increment = handler<{}, { value: Cell<number> }>((_e, { value }) => { value.set(value.get() + 1); });
export default pattern<{ value: Default<number, 0> }>(({ value }) => {
  const doubled = computed(() => value * 2);
  return { value, doubled, increment: increment({ value }) };
});
"#;

/// A pattern of about `lines` lines: many handlers and lifts, and a UI.
pub fn big_pattern(lines: usize) -> String {
    let mut s = String::from(
        "import { pattern, handler, lift, computed, str, UI, NAME, Cell, Default } from \"commonfabric\";\n\
         interface Args { value: Default<number, 0>; label: Default<string, \"x\">; }\n",
    );
    let blocks = lines.saturating_sub(12) / 8;
    for i in 0..blocks {
        let _ = write!(
            s,
            "const h{i} = handler<{{ by?: number }}, {{ value: Cell<number> }}>((ev, {{ value }}) => {{\n  \
               const by = ev?.by ?? {i};\n  \
               value.set(value.get() + by);\n}});\n\
             const l{i} = lift((v: number) => {{\n  \
               return v * {i} + 1;\n}});\n"
        );
    }
    s.push_str("export default pattern<Args>(({ value, label }) => {\n");
    s.push_str("  const total = computed(() => value + 1);\n  return {\n    [NAME]: str`${label}`,\n    total,\n");
    for i in 0..blocks {
        let _ = writeln!(s, "    h{i}: h{i}({{ value }}), l{i}: l{i}(value),");
    }
    s.push_str("    [UI]: <div>{total}</div>,\n  };\n});\n");
    s
}

/// A pattern whose result `last` is `value` passed through `n` lifts.
fn lift_chain(n: usize) -> String {
    let mut s = String::from(
        "import { pattern, handler, lift, Cell, Default } from \"commonfabric\";\n\
         const inc = lift((v: number) => v + 1);\n\
         const bump = handler<{}, { value: Cell<number> }>((_e, { value }) => { value.set(value.get() + 1); });\n\
         export default pattern<{ value: Default<number, 0> }>(({ value }) => {\n  const a0 = value;\n",
    );
    for i in 1..=n {
        let _ = writeln!(s, "  const a{i} = inc(a{});", i - 1);
    }
    let _ = write!(
        s,
        "  return {{ value, last: a{n}, bump: bump({{ value }}) }};\n}});\n"
    );
    s
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
