//! `spacewake bench schedule`: scheduled wakes, each figure measured side by
//! side in one run (printed in the order run):
//!
//! 4. Resident memory with 100,000 indexed entries (25,000 parked spaces ×
//!    4 entries) with the host and its waker running and idle. Run first so
//!    the activations below do not inflate its absolute figure.
//! 1. Index-hook overhead: commits whose piece result carries `[SCHEDULE]`
//!    vs the same commits without it, on a real store with the
//!    [`ScheduleIndexHook`] registered, in alternating rounds (medians),
//!    checkpoints between legs as an active space's server does. Three
//!    cases: re-committing a result whose declaration is unchanged (a result
//!    rewritten by a wave), a first declaration (a new result document),
//!    and a piece creation (argument, cell and result). Alongside: the WAL
//!    pages each commit wrote, a same-size document declaring nothing, and a
//!    store without the hook.
//!
//!    And the one-off (`at`) hook: a handler moving an entry's `at` field
//!    (the hook re-arms its row in the commit) against a handler changing
//!    another field of the same document (the hook compares and writes
//!    nothing), in alternating rounds through a real runtime, each event
//!    one wave.
//! 2. End-to-end scheduled wakes per second: 10,000 parked spaces, each one
//!    piece with a 60-minute schedule whose callback increments a cell, all
//!    due at once on a manual clock; from starting the waker until
//!    `schedule.delivered` reaches 10,000. Repeated for several
//!    `max_scheduled` caps, after a single-thread breakdown of one wake
//!    step by step.
//! 3. Wake lateness (fire time - due time, from the fire history) on the
//!    system clock with 1,000 entries due within one second, their due times
//!    placed directly in the index (bench-only path): in parked spaces, and
//!    in active spaces.
//!
//! Spaces are provisioned fast but really: a piece is deployed once through
//! the runtime in a template space, and its documents are then written into
//! each new (parked) space in one commit, which the index hook indexes.

use super::rss_kib;
use crate::allocator::release_freed_memory;
use crate::clock::{Clock, ManualClock, SystemClock};
use crate::compiler::MemorySource;
use crate::host::{Host, HostConfig, Request, Trigger};
use crate::metrics::{Counter, Counters};
use crate::runtime::{compile_cache, RuntimeConfig, SpaceRuntime, COMMONFABRIC_JS};
use crate::sandbox::TenureSandbox;
use crate::schedule::{Jitter, JitterMode, ScheduleIndexHook, DEFAULT_WINDOW_MS};
use crate::store::{Author, CommitClass, CommitRequest, DocOp, Store, StoreConfig};
use anyhow::{bail, ensure, Context};
use serde_json::{json, Value};
use std::path::Path;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::{Duration, Instant};

pub(super) const OWNER: &str = "did:key:bench";
const MIN_MS: u64 = 60_000;

/// One 60-minute entry whose callback increments a cell.
pub(super) const TICKER: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";
const tick = handler<{}, { count: Cell<number> }>((_e, { count }) => { count.set(count.get() + 1); });
export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  count,
  [SCHEDULE]: [{ intervalMinutes: 60, callback: tick({ count }) }],
}));
"#;

/// Four entries (the most a piece may declare), for the memory figure.
const TICKER4: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";
const tick = handler<{}, { count: Cell<number> }>((_e, { count }) => { count.set(count.get() + 1); });
export default pattern<{ count: Default<number, 0> }>(({ count }) => ({
  count,
  [SCHEDULE]: [
    { intervalMinutes: 60, callback: tick({ count }) },
    { intervalMinutes: 120, callback: tick({ count }) },
    { intervalMinutes: 240, callback: tick({ count }) },
    { intervalMinutes: 1440, callback: tick({ count }) },
  ],
}));
"#;

/// A one-off entry following `next`, and two handlers writing the same
/// argument document: one the followed field, one another field.
const ONE_OFF: &str = r#"
import { pattern, handler, SCHEDULE, Cell, Default } from "commonfabric";
const setNext = handler<{ at: number }, { next: Cell<number | null> }>((e, { next }) => { next.set(e.at); });
const setOther = handler<{ at: number }, { other: Cell<number> }>((e, { other }) => { other.set(e.at); });
const ring = handler<{}, { count: Cell<number> }>((_e, { count }) => { count.set(count.get() + 1); });
export default pattern<{ next: Default<number | null, null>; other: Default<number, 0>; count: Default<number, 0> }>(
  ({ next, other, count }) => ({
    next, other, count,
    [SCHEDULE]: [{ at: next, callback: ring({ count }) }],
    setNext: setNext({ next }),
    setOther: setOther({ other }),
  }),
);
"#;

/// One figure of the bench, for `--only`.
#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Figure {
    Memory,
    Hook,
    /// The one-off (`at`) hook's cost on a handler's commit.
    OneOff,
    Wakes,
    Lateness,
    /// Rounds of wakes one at a time, for `valgrind --tool=callgrind` to
    /// count instructions per wake (not part of the default run).
    Instructions,
}

/// Spaces the instructions mode wakes per round (scaled by `--scale`).
pub const INSTRUCTION_SPACES: usize = 200;

pub fn run(
    scale: f64,
    only: &[Figure],
    wake_rounds: u32,
    herd_caps: &[usize],
) -> anyhow::Result<ExitCode> {
    let want = |f: Figure| (only.is_empty() && f != Figure::Instructions) || only.contains(&f);
    let n = |full: usize, min: usize| ((full as f64 * scale) as usize).max(min);
    let root =
        std::env::temp_dir().join(format!("spacewake-bench-schedule-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root)?;
    println!("spacewake bench schedule (scale {scale})");
    let one = template(&root.join("template-1"), TICKER)?;
    let four = template(&root.join("template-4"), TICKER4)?;

    // 4. Memory, first: its absolute RSS is then not inflated by what the
    // activations of 2 and 3 leave in the allocator.
    if want(Figure::Memory) {
        memory(&root.join("memory"), &four, n(25_000, 20))?;
    }

    // 1. Index-hook overhead.
    if want(Figure::Hook) {
        let per_round = n(3_000, 50);
        let rounds = 7;
        let hook = hook_overhead(&root.join("hook"), &one, per_round, rounds)?;
        for (case, r) in HOOK_CASES.iter().zip(&hook) {
            println!(
            "index hook, {case}: with [SCHEDULE] {:.0} commits/s, without {:.0} commits/s, ratio {:.3}x (target <= 1.05x; WAL pages per commit {:.2} vs {:.2}; same-size doc declaring nothing {:.0}/s, ratio {:.3}x; no hook at all {:.0}/s; median of {rounds} alternating rounds of {per_round})",
            r.with,
            r.without,
            r.without / r.with,
            r.pages_with,
            r.pages_without,
            r.same_size,
            r.same_size / r.with,
            r.no_hook
        );
        }
    }

    // 1b. The one-off hook on a handler's commit.
    if want(Figure::OneOff) {
        let per_round = n(400, 20);
        let rounds = 7;
        let (moving, other) = one_off_hook(&root.join("one-off"), per_round, rounds)?;
        println!(
            "one-off hook: handler moving the at field {moving:.0} events/s, handler changing \
             another field of the same document {other:.0} events/s, ratio {:.3}x (target <= \
             1.1x; each event one wave; median of {rounds} alternating rounds of {per_round})",
            other / moving
        );
    }

    // 2. End-to-end wakes per second, for several caps on the herd.
    if want(Figure::Wakes) {
        // Engine reuse off and on, side by side, at the default cap; the
        // default cap for six rounds more (a space's cost moves with its
        // WAL from wake to wake: the WAL file grows over its first wakes,
        // and it is checkpointed at close every fourth wake, so wakes 5-8
        // of a space's life are one whole steady cycle); then other caps
        // with reuse on.
        let default_caps: &[(usize, bool)] = if scale >= 0.5 {
            &[
                (8, false),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (2, true),
                (4, true),
                (32, true),
            ]
        } else {
            &[
                (8, false),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (8, true),
                (4, true),
                (32, true),
            ]
        };
        let chosen: Vec<(usize, bool)> = herd_caps.iter().map(|&c| (c, true)).collect();
        let caps = if chosen.is_empty() {
            default_caps
        } else {
            &chosen[..]
        };
        wakes(&root.join("wakes"), &one, n(10_000, 40), caps, n(200, 10))?;
    }

    if want(Figure::Instructions) {
        let spaces = n(INSTRUCTION_SPACES, 10);
        instructions(&root.join("instructions"), &one, spaces, wake_rounds)?;
    }

    // 3. Lateness on the system clock.
    if want(Figure::Lateness) {
        let entries = n(1_000, 20);
        // At the default cap, and at half of it beside: on two cores, fewer
        // activations at once reach their firing sooner (each waits behind
        // fewer others' waves), at some cost to a herd's rate.
        let caps = if herd_caps.is_empty() {
            &[8, 4][..]
        } else {
            herd_caps
        };
        for (k, &cap) in caps.iter().enumerate() {
            let dir = root.join(format!("late-parked-{k}-{cap}"));
            lateness_parked(&dir, &one, entries, cap)?;
        }
        lateness_active(&root.join("late-active"), &one, entries)?;
    }
    let _ = std::fs::remove_dir_all(&root);
    Ok(ExitCode::SUCCESS)
}

// ----- provisioning ---------------------------------------------------------

/// A piece as deployed through the runtime: every document it wrote.
pub(super) struct Template {
    pub(super) piece: String,
    docs: Vec<(String, Value)>,
}

pub(super) fn template(dir: &Path, source: &str) -> anyhow::Result<Template> {
    let clock: Arc<ManualClock> = Arc::new(ManualClock::default());
    let store = Store::open(StoreConfig::new(dir), clock.clone(), Counters::new())?;
    store.create_space("template", OWNER)?;
    let program = compile_cache()
        .compile(
            "ticker.tsx",
            &MemorySource::new().with("ticker.tsx", source),
        )
        .map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
    let mut rt = SpaceRuntime::start(
        store.open_space("template")?,
        clock,
        store.config().lease_ttl_ms,
        RuntimeConfig::default(),
    )?;
    let piece = rt.create_piece(&program, None, &json!({}))?;
    rt.flush()?;
    let mut space = rt.stop()?;
    let mut ids: Vec<String> = Vec::new();
    for c in space.commits_since(0, 10_000)? {
        for op in c.ops {
            if !ids.contains(&op.doc_id) {
                ids.push(op.doc_id);
            }
        }
    }
    let mut docs = Vec::new();
    for id in ids {
        if let Some(d) = space.read(&id)? {
            docs.push((id, d.value));
        }
    }
    ensure!(
        docs.iter()
            .any(|(id, v)| *id == piece && v.get("$SCHEDULE").is_some()),
        "the template piece's result carries no $SCHEDULE"
    );
    Ok(Template { piece, docs })
}

/// Creates `ids` as parked spaces holding the template piece, each written
/// by one provisioning commit (indexed by the hook), on two threads.
pub(super) fn provision(store: &Store, ids: &[String], t: &Template) -> anyhow::Result<()> {
    let threads = std::thread::available_parallelism().map_or(2, |n| n.get());
    let chunk = ids.len().div_ceil(threads).max(1);
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let joins: Vec<_> = ids
            .chunks(chunk)
            .map(|part| {
                scope.spawn(move || -> anyhow::Result<()> {
                    for id in part {
                        store.create_space(id, OWNER)?;
                        let mut space = store.open_space(id)?;
                        let mut req = CommitRequest::new(CommitClass::System, Author::server());
                        for (doc, value) in &t.docs {
                            req = req.op(DocOp::Set {
                                id: doc.clone(),
                                value: value.clone(),
                            });
                        }
                        space.commit(req)?;
                    }
                    Ok(())
                })
            })
            .collect();
        for j in joins {
            j.join().expect("provisioning thread panicked")?;
        }
        Ok(())
    })
}

pub(super) fn names(prefix: &str, count: usize) -> Vec<String> {
    (0..count).map(|i| format!("{prefix}-{i:06}")).collect()
}

/// The host's jitter, as its firing passes use it (secret from the directory).
fn host_jitter(store: &Store) -> anyhow::Result<Jitter> {
    let hex = store
        .directory()
        .meta("jitter_secret")?
        .context("the host has no jitter secret")?;
    let mut secret = [0u8; 32];
    for (i, chunk) in hex.as_bytes().chunks(2).take(32).enumerate() {
        secret[i] = u8::from_str_radix(std::str::from_utf8(chunk)?, 16)?;
    }
    Ok(Jitter::new(JitterMode::Keyed, DEFAULT_WINDOW_MS, secret))
}

fn wait_until(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) -> anyhow::Result<()> {
    let t = Instant::now();
    while !f() {
        if t.elapsed() > timeout {
            bail!(
                "timed out after {:.0} s waiting for {what}",
                timeout.as_secs_f64()
            );
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Ok(())
}

fn delivered(host: &Host) -> i64 {
    host.counters().host().get(Counter::ScheduleDelivered)
}

/// The value of the piece's `count` cell (following its link).
fn count_of(store: &Store, space: &str, piece: &str) -> anyhow::Result<Value> {
    let mut s = store.open_space(space)?;
    let result = s.read(piece)?.context("no result document")?.value;
    let link = &result["count"]["$link"];
    let doc = link["doc"].as_str().context("count is not a link")?;
    let mut v = s.read(doc)?.map(|d| d.value).unwrap_or(Value::Null);
    for seg in link["path"].as_array().into_iter().flatten() {
        v = match seg {
            Value::String(k) => v[k.as_str()].take(),
            Value::Number(i) => v[i.as_u64().unwrap_or(0) as usize].take(),
            _ => Value::Null,
        };
    }
    Ok(v)
}

// ----- 1. index-hook overhead ----------------------------------------------

/// Median commits/s of each leg of one case.
struct Rates {
    /// Result carries `[SCHEDULE]`, hooked store.
    with: f64,
    /// The same commits, the result without `[SCHEDULE]`, hooked store.
    without: f64,
    /// The same commits, `$SCHEDULE` renamed so the documents keep their
    /// size but declare nothing, hooked store.
    same_size: f64,
    /// The `with` commits in a store without the hook.
    no_hook: f64,
    /// WAL frames (pages) written per commit, with and without.
    pages_with: f64,
    pages_without: f64,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Sched,
    Plain,
    SameSize,
}

/// The three cases measured, as printed.
const HOOK_CASES: [&str; 3] = [
    "re-commit, declaration unchanged",
    "first declaration, result only  ",
    "first declaration, piece created",
];

/// A piece result as the runtime stores it, with or without a declaration.
fn result_doc(piece: &str, i: usize, kind: Kind) -> Value {
    let mut doc = json!({
        "$NAME": format!("feed {i}"),
        "$UI": {"type": "vnode", "name": "div", "props": {},
                "children": [{"$link": {"doc": format!("{piece}/n0"), "path": []}}]},
        "items": {"$link": {"doc": format!("{piece}/c1"), "path": []}},
        "url": {"$link": {"doc": format!("{piece}/argument"), "path": ["url"]}},
        "refresh": {"$stream": format!("{piece}/s0")},
    });
    let decl = json!([{"intervalMinutes": 120, "callback": {"$stream": format!("{piece}/s0")}}]);
    match kind {
        Kind::Sched => doc["$SCHEDULE"] = decl,
        Kind::Plain => {}
        Kind::SameSize => doc["$SCHEDUL_"] = decl,
    }
    doc
}

/// The documents a piece creation commits (argument, cells, result), from
/// the template, renamed to `piece`; the result per `kind`. The space's
/// piece listing is left out: it is one document that grows with every
/// piece and would dominate a long run.
fn creation_ops(t: &Template, piece: &str, kind: Kind) -> Vec<DocOp> {
    t.docs
        .iter()
        .filter(|(id, _)| id.starts_with(&t.piece))
        .map(|(id, value)| {
            let text = value.to_string().replace(&t.piece, piece);
            let mut value: Value = serde_json::from_str(&text).expect("renamed JSON parses");
            if *id == t.piece {
                if let Some(decl) = value.as_object_mut().and_then(|o| o.remove("$SCHEDULE")) {
                    match kind {
                        Kind::Sched => value["$SCHEDULE"] = decl,
                        Kind::Plain => {}
                        Kind::SameSize => value["$SCHEDUL_"] = decl,
                    }
                }
            }
            DocOp::Set {
                id: id.replace(&t.piece, piece),
                value,
            }
        })
        .collect()
}

fn hook_overhead(
    dir: &Path,
    t: &Template,
    per_round: usize,
    rounds: usize,
) -> anyhow::Result<Vec<Rates>> {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::default());
    let hooked = Store::open(
        StoreConfig::new(dir.join("hooked")),
        clock.clone(),
        Counters::new(),
    )?;
    hooked.add_hook(Arc::new(ScheduleIndexHook::new(Jitter::keyed([7; 32]))));
    let bare = Store::open(StoreConfig::new(dir.join("bare")), clock, Counters::new())?;
    let commit = |space: &mut crate::store::Space, ops: Vec<DocOp>| {
        let mut req = CommitRequest::new(CommitClass::System, Author::server());
        req.ops = ops;
        space.commit(req)
    };
    let mut out = Vec::new();
    for (case, case_name) in HOOK_CASES.iter().enumerate() {
        let name = format!("case-{case}");
        hooked.create_space(&name, OWNER)?;
        bare.create_space(&name, OWNER)?;
        let mut h = hooked.open_space(&name)?;
        let mut b = bare.open_space(&name)?;
        // As an active space's server does: checkpoints off the commit path
        // (here between legs, untimed), so WAL syncs do not land at random
        // in one leg's rounds.
        h.defer_checkpoints(100_000)?;
        b.defer_checkpoints(100_000)?;
        // What one commit of a leg writes: the same piece rewritten (case
        // 0), or a new piece each time.
        let ops = |kind: Kind, i: usize| -> Vec<DocOp> {
            let tag = match kind {
                Kind::Sched => "sched",
                Kind::Plain => "plain",
                Kind::SameSize => "size",
            };
            let piece = match case {
                0 => format!("pc-{tag}"),
                _ => format!("pc-{tag}-{i:08}"),
            };
            match case {
                2 => creation_ops(t, &piece, kind),
                _ => vec![DocOp::Set {
                    id: piece.clone(),
                    value: result_doc(&piece, i, kind),
                }],
            }
        };
        // The re-committed pieces exist (declared once) beforehand.
        for kind in [Kind::Sched, Kind::Plain, Kind::SameSize] {
            commit(&mut h, ops(kind, 0))?;
        }
        commit(&mut b, ops(Kind::Sched, 0))?;
        // A second connection reads how many WAL frames each leg wrote
        // (its checkpoint reports them), and checkpoints between legs.
        let probe = |space: &crate::store::Space| -> anyhow::Result<rusqlite::Connection> {
            Ok(rusqlite::Connection::open(space.path())?)
        };
        let (probe_h, probe_b) = (probe(&h)?, probe(&b)?);
        let mut frames = [0u64; 4];
        let mut samples: [Vec<f64>; 4] = Default::default();
        let mut i = 0usize;
        for _ in 0..rounds {
            for (leg, kind) in [Kind::Sched, Kind::Plain, Kind::SameSize, Kind::Sched]
                .into_iter()
                .enumerate()
            {
                let space = if leg == 3 { &mut b } else { &mut h };
                let start = Instant::now();
                for _ in 0..per_round {
                    i += 1;
                    commit(space, ops(kind, i))?;
                }
                samples[leg].push(per_round as f64 / start.elapsed().as_secs_f64());
                let conn = if leg == 3 { &probe_b } else { &probe_h };
                let (busy, log): (i64, i64) =
                    conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |r| {
                        Ok((r.get(0)?, r.get(1)?))
                    })?;
                ensure!(busy == 0, "a checkpoint between legs was blocked");
                frames[leg] += log.max(0) as u64;
            }
        }
        let rows = h.schedule(None)?.len();
        let expected = if case == 0 { 1 } else { rounds * per_round + 1 };
        ensure!(
            rows == expected,
            "{case_name}: {rows} schedule rows, expected {expected}"
        );
        let [with, without, same_size, no_hook] = samples.map(median);
        let per_commit = |leg: usize| frames[leg] as f64 / (rounds * per_round) as f64;
        out.push(Rates {
            with,
            without,
            same_size,
            no_hook,
            pages_with: per_commit(0),
            pages_without: per_commit(1),
        });
    }
    Ok(out)
}

/// Events per second through a runtime for a handler moving the one-off
/// entry's field and for one changing another field of the same document:
/// (moving, other), medians of alternating rounds.
fn one_off_hook(dir: &Path, per_round: usize, rounds: usize) -> anyhow::Result<(f64, f64)> {
    let clock: Arc<ManualClock> = Arc::new(ManualClock::default());
    let store = Store::open(StoreConfig::new(dir), clock.clone(), Counters::new())?;
    store.add_hook(Arc::new(ScheduleIndexHook::new(Jitter::keyed([7; 32]))));
    store.create_space("one-off", OWNER)?;
    let program = compile_cache()
        .compile("at.tsx", &MemorySource::new().with("at.tsx", ONE_OFF))
        .map_err(|d| anyhow::anyhow!(crate::compiler::render(&d)))?;
    let mut rt = SpaceRuntime::start(
        store.open_space("one-off")?,
        clock.clone(),
        store.config().lease_ttl_ms,
        RuntimeConfig::default(),
    )?;
    let piece = rt.create_piece(&program, None, &json!({}))?;
    rt.flush()?;
    rt.space().defer_checkpoints(100_000)?;
    let author = Author::principal(OWNER);
    let base = clock.now_ms() + 1_000 * MIN_MS;
    let mut samples: [Vec<f64>; 2] = Default::default();
    let mut i = 0u64;
    for _ in 0..rounds {
        for (leg, stream) in ["setNext", "setOther"].into_iter().enumerate() {
            let start = Instant::now();
            for _ in 0..per_round {
                i += 1;
                rt.send(
                    &piece,
                    &[crate::store::PathSeg::Key(stream.into())],
                    &format!("e{i}"),
                    json!({ "at": base + i * 1_000 }),
                    &author,
                )?;
                rt.run_wave()?;
            }
            samples[leg].push(per_round as f64 / start.elapsed().as_secs_f64());
            rt.space().checkpoint()?;
        }
    }
    // The moving leg armed a new time with every event, the other none.
    let row = rt.space().schedule(None)?;
    ensure!(
        row.len() == 1 && row[0].next_due_ms == base + (i - per_round as u64) * 1_000,
        "the one-off row did not follow its field: {row:?}"
    );
    rt.stop()?;
    let [moving, other] = samples.map(median);
    Ok((moving, other))
}

// ----- 2. wakes per second -------------------------------------------------

fn wakes(
    dir: &Path,
    t: &Template,
    herd: usize,
    caps: &[(usize, bool)],
    profiled: usize,
) -> anyhow::Result<()> {
    let clock = Arc::new(ManualClock::default());
    let start_ms = clock.now_ms();
    let ids = names("herd", herd);
    let prof = names("prof", profiled);
    let bare = names("bare", profiled);
    let cfg = |(cap, reuse): (usize, bool)| {
        let mut c = HostConfig {
            idle_park_ms: 5,
            ..HostConfig::default()
        };
        c.schedule.max_scheduled = cap;
        // As `serve` does by default: an image for every thread kept.
        c.runtime.engine_images = if reuse {
            crate::host::threads_kept(cap)
        } else {
            0
        };
        // Nobody reads the ticks: unread back-off would double the interval
        // after three rounds and leave nothing due in the later ones.
        c.schedule.backoff = crate::schedule::backoff::BackoffPolicy::disabled();
        c
    };
    let open = |run: (usize, bool)| -> anyhow::Result<Host> {
        let store = Store::open(StoreConfig::new(dir), clock.clone(), Counters::new())?;
        Ok(Host::new(store, cfg(run)))
    };
    let host = open(caps[0])?;
    let t0 = Instant::now();
    provision(host.store(), &ids, t)?;
    provision(host.store(), &prof, t)?;
    provision(host.store(), &bare, t)?;
    let made = t0.elapsed().as_secs_f64();
    // Period 1 of every entry is due by declaration + 60 min + 20 min.
    clock.set_ms(start_ms + 81 * MIN_MS);
    profile(&host, &prof, t, herd, made)?;
    let (bare_cpu, bare_js) = bare_wakes(host.store(), &bare, t)?;
    println!(
        "bare wake (one thread, {} spaces: open the file, a firing transaction, a tiny handler in a \
         fresh engine context, a commit transaction, close): {:.3} ms CPU per wake, of which the \
         engine context and handler {:.3} ms",
        bare.len(),
        bare_cpu * 1e3,
        bare_js * 1e3
    );

    let mut host = Some(host);
    // CPU seconds per wake of each round, by (cap, reuse), with the round's
    // place in the herd spaces' lives (wake k + 1 of each).
    let mut per_cap: std::collections::BTreeMap<(usize, bool), Vec<(usize, f64)>> =
        Default::default();
    for (k, &(cap, reuse)) in caps.iter().enumerate() {
        let h = match host.take() {
            Some(h) => h,
            None => {
                // Period k+1 of every entry is due by declaration + (k+1) h + 20 min.
                clock.set_ms(start_ms + (k as u64 * 60 + 81) * MIN_MS);
                open((cap, reuse))?
            }
        };
        let cpu0 = crate::bench::process_cpu_seconds();
        let began = Instant::now();
        h.start_waker();
        let waker0 = thread_cpu_seconds("waker");
        let mut first = None;
        wait_until("every wake delivered", Duration::from_secs(600), || {
            let d = delivered(&h);
            if first.is_none() && d > 0 {
                first = Some(began.elapsed());
            }
            d >= herd as i64
        })?;
        let secs = began.elapsed().as_secs_f64();
        let cpu = crate::bench::process_cpu_seconds() - cpu0;
        let waker_cpu = thread_cpu_seconds("waker") - waker0;
        let c = h.counters().host();
        let fired = c.get(Counter::ScheduleFired);
        let activations = c.get(Counter::ActivationsSchedule);
        let built = c.get(Counter::EngineSandboxesBuilt);
        let started = c.get(Counter::ServerThreadsStarted);
        h.shutdown();
        ensure!(
            h.park_all_idle(60_000) == 0,
            "spaces still active after the herd"
        );
        // Let parked servers finish releasing their leases.
        std::thread::sleep(Duration::from_millis(200));
        ensure!(
            fired == herd as i64,
            "{fired} fired in a round of {herd} (only the herd may be due)"
        );
        for id in [&ids[0], &ids[herd / 2], &ids[herd - 1]] {
            let v = count_of(h.store(), id, &t.piece)?;
            ensure!(v == json!(k + 1), "{id}: count {v} after {} wakes", k + 1);
        }
        per_cap
            .entry((cap, reuse))
            .or_default()
            .push((k + 1, cpu / herd as f64));
        println!(
            "wakes: {herd} parked spaces due at once, round {}, {:.0} wakes/s end to end (max_scheduled {cap}, engine reuse {}; {fired} fired, {activations} activations, {built} engines built, {started} threads started; first delivered after {:.0} ms; {:.2} ms CPU per wake, of which the waker thread {:.2} ms, {:.2}x the bare wake (target <= 1.5x); target >= 2000/s)",
            k + 1,
            herd as f64 / secs,
            if reuse { "on" } else { "off" },
            first.unwrap_or_default().as_secs_f64() * 1e3,
            cpu * 1e3 / herd as f64,
            waker_cpu * 1e3 / herd as f64,
            cpu / herd as f64 / bare_cpu
        );
    }
    // A cap run for several rounds: its mean over them, nearer a steady
    // state than any one round.
    for ((cap, reuse), rounds) in per_cap.iter().filter(|(_, v)| v.len() > 1) {
        let reuse = if *reuse { "on" } else { "off" };
        let mean = |rs: &[&(usize, f64)]| rs.iter().map(|r| r.1).sum::<f64>() / rs.len() as f64;
        let all: Vec<_> = rounds.iter().collect();
        println!(
            "wakes: max_scheduled {cap}, engine reuse {reuse}, mean of {} rounds: {:.2} ms CPU per wake, {:.2}x the bare wake (target <= 1.5x)",
            all.len(),
            mean(&all) * 1e3,
            mean(&all) / bare_cpu
        );
        // Split where a space's WAL settles: its first wakes grow the WAL
        // file (new blocks, which the filesystem zeroes), once per space;
        // from the fifth on it is reused in place, checkpointed every fourth.
        let (first, later): (Vec<_>, Vec<_>) = rounds.iter().partition(|r| r.0 <= FIRST_WAL_CYCLE);
        if first.is_empty() || later.is_empty() {
            continue;
        }
        let span = |rs: &[&(usize, f64)]| format!("{}-{}", rs[0].0, rs[rs.len() - 1].0);
        println!(
            "wakes: max_scheduled {cap}, engine reuse {reuse}, by the spaces' WAL: first cycle (wakes {} of each space, its WAL file growing) {:.2} ms CPU per wake, {:.2}x the bare wake; later (wakes {}, reused in place) {:.2} ms, {:.2}x (target <= 1.5x)",
            span(&first),
            mean(&first) * 1e3,
            mean(&first) / bare_cpu,
            span(&later),
            mean(&later) * 1e3,
            mean(&later) / bare_cpu
        );
    }
    Ok(())
}

/// The wakes of a space's life over which its WAL file grows to the size
/// it keeps: its first close checkpoint comes at the fourth (a wake writes
/// about 19 frames; `CLOSE_CHECKPOINT_FRAMES` is 64).
const FIRST_WAL_CYCLE: usize = 4;

/// The least a wake of a parked space can cost with one SQLite file per
/// space (issue 36's floor), measured beside the real one: open the space's
/// file (the real schema), one firing transaction (advance the entry,
/// append its wake event, move the stream's head), one tiny handler in a
/// fresh engine context (on one engine runtime kept across wakes), one
/// commit transaction (read the count, write it, log the operation, move
/// the watermark), close. Raw SQL on purpose: it is what the store's layers
/// add up to at best, not a second store. Returns this thread's CPU seconds
/// per bare wake, and of them the engine context's and handler's.
fn bare_wakes(store: &Store, ids: &[String], t: &Template) -> anyhow::Result<(f64, f64)> {
    use rusqlite::{params, OptionalExtension, TransactionBehavior};
    let engine = rquickjs::Runtime::new()?;
    let argument = format!("{}/argument", t.piece);
    let mut js_us = 0;
    let cpu0 = crate::accounting::thread_cpu_us();
    for (i, id) in ids.iter().enumerate() {
        let now = 1_800_000_000_000 + i as i64;
        let mut conn = rusqlite::Connection::open(store.space_path(id))?;
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        // The firing: advance the entry and append its wake event.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let (stream, period): (String, i64) = tx.query_row(
            "SELECT callback_stream, nominal_period FROM schedule_index WHERE piece = ?1 AND entry = 0",
            [&t.piece],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        tx.execute(
            "UPDATE schedule_index SET nominal_period = nominal_period + 1, \
             next_due_ms = next_due_ms + 3600000, wake_ms = next_due_ms + 3600000, \
             fired_count = fired_count + 1, last_fired_ms = ?2 WHERE piece = ?1 AND entry = 0",
            params![&t.piece, now],
        )?;
        let seq: i64 = tx.query_row("SELECT COALESCE(MAX(seq), 0) + 1 FROM commits", [], |r| {
            r.get(0)
        })?;
        tx.execute(
            "INSERT INTO commits (seq, class, principal, session, at_ms, op_count, event_count) \
             VALUES (?1, 'system', 'server', NULL, ?2, 0, 1)",
            params![seq, now],
        )?;
        tx.execute(
            "INSERT INTO events (event_id, stream, seq, payload, fired_by, fired_at_ms) \
             VALUES (?1, ?2, ?3, '{}', 'server', ?4)",
            params![format!("bare/{period}"), &stream, seq, now],
        )?;
        tx.execute(
            "INSERT INTO streams (stream, head_seq, watermark_seq) VALUES (?1, ?2, 0) \
             ON CONFLICT (stream) DO UPDATE SET head_seq = excluded.head_seq",
            params![&stream, seq],
        )?;
        tx.commit()?;
        // The handler, in a fresh context.
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let doc: Option<String> = tx
            .query_row("SELECT value FROM docs WHERE id = ?1", [&argument], |r| {
                r.get(0)
            })
            .optional()?
            .flatten();
        let mut value: Value = doc.as_deref().map_or(Ok(json!({})), serde_json::from_str)?;
        let count = value["count"].as_i64().unwrap_or(0);
        let js0 = crate::accounting::thread_cpu_us();
        let ctx = rquickjs::Context::full(&engine)?;
        let next: i64 = ctx.with(|c| c.eval(format!("((n) => n + 1)({count})")))?;
        drop(ctx);
        js_us += crate::accounting::thread_cpu_us() - js0;
        value["count"] = json!(next);
        let text = value.to_string();
        // The handler's commit: the document, the log, the watermark.
        let seq = seq + 1;
        tx.execute(
            "INSERT INTO commits (seq, class, principal, session, at_ms, op_count, event_count) \
             VALUES (?1, 'derived', 'server', NULL, ?2, 1, 0)",
            params![seq, now],
        )?;
        tx.execute(
            "INSERT INTO commit_ops (seq, idx, doc_id, op, path, value) \
             VALUES (?1, 0, ?2, 'set', NULL, ?3)",
            params![seq, &argument, &text],
        )?;
        tx.execute(
            "INSERT INTO docs (id, value, seq, rev) VALUES (?1, ?2, ?3, 1) \
             ON CONFLICT (id) DO UPDATE SET value = excluded.value, seq = excluded.seq, \
             rev = rev + 1",
            params![&argument, &text, seq],
        )?;
        tx.execute(
            "UPDATE streams SET watermark_seq = ?2 WHERE stream = ?1",
            params![&stream, seq - 1],
        )?;
        tx.commit()?;
        drop(conn);
    }
    let secs = (crate::accounting::thread_cpu_us() - cpu0) as f64 / 1e6;
    for id in &ids[..1] {
        let v = count_of(store, id, &t.piece)?;
        ensure!(v == json!(1), "{id}: the bare wake counted {v}");
    }
    // Not part of a wake: keeps these spaces out of the herd's rounds. Left
    // active, they fall due with the herd from its second round on, their
    // deliveries count towards the herd's, and a round could end before its
    // last herd space was woken.
    for id in ids {
        let mut space = store.open_space(id)?;
        crate::schedule::ops::pause(&mut space, &t.piece, 0)?;
    }
    let n = ids.len() as f64;
    Ok((secs / n, js_us as f64 / 1e6 / n))
}

/// `rounds` + 1 rounds of wakes of `spaces` parked spaces through the real
/// host, one wake in flight at a time (`max_scheduled` 1), on a manual
/// clock. The first round warms the process (compile caches, thread pool);
/// the instructions one wake costs are what a run with `rounds` = k + 1
/// executes beyond a run with k, divided by `spaces`
/// (`bench/wake-instructions.sh` runs both under callgrind). The work of
/// every thread counts: the waker's as much as the space server's.
fn instructions(dir: &Path, t: &Template, spaces: usize, rounds: u32) -> anyhow::Result<()> {
    let clock = Arc::new(ManualClock::default());
    let start_ms = clock.now_ms();
    let ids = names("wake", spaces);
    let store = Store::open(StoreConfig::new(dir), clock.clone(), Counters::new())?;
    let mut cfg = HostConfig {
        idle_park_ms: 5,
        ..HostConfig::default()
    };
    cfg.schedule.max_scheduled = 1;
    // Unread back-off would double the interval after three rounds and
    // leave nothing due in the later ones (as in the herd).
    cfg.schedule.backoff = crate::schedule::backoff::BackoffPolicy::disabled();
    let host = Host::new(store, cfg);
    provision(host.store(), &ids, t)?;
    let began = Instant::now();
    for r in 0..=rounds as u64 {
        // Period r + 1 of every entry is due by declaration + (r + 1) h + 20 min.
        clock.set_ms(start_ms + (r * 60 + 81) * MIN_MS);
        host.start_waker();
        let want = (r as i64 + 1) * spaces as i64;
        wait_until("every wake delivered", Duration::from_secs(3_600), || {
            // Polled rarely: the polling thread's instructions count too.
            std::thread::sleep(Duration::from_millis(20));
            delivered(&host) >= want
        })?;
        ensure!(host.park_all_idle(600_000) == 0, "spaces still active");
    }
    host.shutdown();
    let v = count_of(host.store(), &ids[spaces - 1], &t.piece)?;
    ensure!(
        v == json!(rounds + 1),
        "count {v} after {} rounds",
        rounds + 1
    );
    let c = host.counters().host();
    println!(
        "instructions: {spaces} parked spaces woken {} times one at a time in {:.1} s ({} engine images reused, {} leases taken with the firing; instructions per wake: the difference between runs with --wake-rounds k+1 and k under callgrind, divided by {spaces}; see bench/wake-instructions.sh)",
        rounds + 1,
        began.elapsed().as_secs_f64(),
        c.get(Counter::EngineImagesReused),
        c.get(Counter::ScheduleLeaseWithFiring)
    );
    Ok(())
}

/// One wake at a time on this thread, step by step as a space server does
/// it (server::run), so the herd's figure can be read as a sum of parts.
fn profile(
    host: &Host,
    prof: &[String],
    t: &Template,
    herd: usize,
    made_secs: f64,
) -> anyhow::Result<()> {
    let store = host.store();
    let jitter = host_jitter(store)?;
    let rcfg = RuntimeConfig::default();
    let ttl = store.config().lease_ttl_ms;
    let clock = store.clock().clone();
    const STEPS: [&str; 10] = [
        "waker budget check",
        "open file",
        "runtime start",
        "(of which sandbox)",
        "bookkeeping",
        "firing txn",
        "wave",
        "release lease",
        "close file",
        "malloc_trim",
    ];
    let mut sum = [0f64; STEPS.len()];
    let lap = |t: &mut Instant| {
        let s = t.elapsed().as_secs_f64();
        *t = Instant::now();
        s
    };
    for id in prof {
        let mut at = Instant::now();
        // What the waker does per due space before dispatching it.
        ensure!(!host.bench_waker_check(id), "{id}: skipped for budget");
        sum[0] += lap(&mut at);
        // (Space servers run on pooled threads: no thread start per wake;
        // a scheduled tenure opens its file exclusively.)
        let space = store.open_space_with(id, crate::store::FileAccess::Exclusive)?;
        sum[1] += lap(&mut at);
        // A sandbox as a tenure gets one (a restored image once this thread
        // has one) and gives it back.
        drop(TenureSandbox::get(
            &rcfg.sandbox,
            &COMMONFABRIC_JS,
            rcfg.engine_images,
        )?);
        sum[3] += lap(&mut at);
        let mut rt = SpaceRuntime::start(space, clock.clone(), ttl, rcfg.clone())?;
        sum[2] += lap(&mut at);
        rt.space().schedule(None)?;
        rt.space().defer_checkpoints(10_000)?;
        rt.space().defer_later_moves();
        sum[4] += lap(&mut at);
        let now = clock.now_ms();
        let report = crate::schedule::fire::fire_due(rt.space(), now, &jitter, true)?;
        ensure!(
            report.fired.len() == 1,
            "{id}: {} fired",
            report.fired.len()
        );
        rt.space().schedule(None)?;
        sum[5] += lap(&mut at);
        // As a brief tenure's server does: the last wave gives the lease back.
        rt.release_with_last_wave(true);
        let (_, d) = crate::host::wave::run_wave(&mut rt, now, 256)?;
        ensure!(d.delivered == 1, "{id}: {} delivered", d.delivered);
        rt.flush()?;
        rt.space().has_undelivered()?;
        sum[6] += lap(&mut at);
        rt.flush()?;
        let mut space = rt.stop()?;
        sum[7] += lap(&mut at);
        // Not part of a wake: keeps this space out of the herd's later rounds.
        crate::schedule::ops::pause(&mut space, &t.piece, 0)?;
        at = Instant::now();
        drop(space);
        sum[8] += lap(&mut at);
        release_freed_memory();
        sum[9] += lap(&mut at);
    }
    let v = count_of(store, &prof[0], &t.piece)?;
    ensure!(v == json!(1), "profiled wake did not count: {v}");
    let k = prof.len() as f64;
    // The sandbox figure is a separate, extra sandbox: it is inside "runtime start".
    let total: f64 = sum
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 3)
        .map(|(_, s)| s)
        .sum::<f64>();
    let parts: Vec<String> = STEPS
        .iter()
        .zip(sum)
        .map(|(name, s)| format!("{name} {:.2}", s * 1e3 / k))
        .collect();
    println!(
        "wake breakdown (one thread, mean ms per wake over {} spaces): {}; total {:.2} ms = {:.0} wakes/s per core ({} + {} spaces provisioned in {:.1} s)",
        prof.len(),
        parts.join(", "),
        total * 1e3 / k,
        k / total,
        herd,
        prof.len(),
        made_secs
    );
    Ok(())
}

/// User + system CPU seconds of this process's threads named `name`
/// (live threads only).
fn thread_cpu_seconds(name: &str) -> f64 {
    // SAFETY: sysconf has no preconditions.
    let tick = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0.0;
    };
    let mut ticks = 0u64;
    for task in dir.flatten() {
        let comm = std::fs::read_to_string(task.path().join("comm")).unwrap_or_default();
        if comm.trim_end() != name {
            continue;
        }
        let stat = std::fs::read_to_string(task.path().join("stat")).unwrap_or_default();
        // Fields after the parenthesised command: state is field 3, utime 14, stime 15.
        if let Some(rest) = stat.rsplit_once(')').map(|(_, r)| r) {
            let f: Vec<&str> = rest.split_whitespace().collect();
            ticks += f.get(11).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
            ticks += f.get(12).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        }
    }
    ticks as f64 / tick
}

// ----- 3. lateness -----------------------------------------------------------

fn system_host(dir: &Path, idle_park_ms: u64, cap: usize) -> anyhow::Result<Host> {
    let store = Store::open(
        StoreConfig::new(dir),
        Arc::new(SystemClock),
        Counters::new(),
    )?;
    Ok(Host::new(
        store,
        HostConfig {
            idle_park_ms,
            schedule: crate::host::ScheduleConfig {
                max_scheduled: cap,
                ..Default::default()
            },
            ..HostConfig::default()
        },
    ))
}

/// Places `(space, entry)` due at `base + offset` directly in the index.
fn place(
    store: &Store,
    piece: &str,
    slots: &[(String, u32, u64)],
    base: u64,
) -> anyhow::Result<()> {
    let mut i = 0;
    while i < slots.len() {
        let space_id = &slots[i].0;
        let mut space = store.open_space(space_id)?;
        let rows = space.schedule(Some(piece))?;
        let template = rows.first().cloned().context("no schedule row")?;
        while i < slots.len() && slots[i].0 == *space_id {
            let (_, entry, offset) = &slots[i];
            let mut row = rows
                .iter()
                .find(|r| r.entry == *entry)
                .cloned()
                .unwrap_or_else(|| {
                    let mut r = template.clone();
                    r.entry = *entry;
                    r
                });
            row.next_due_ms = base + offset;
            crate::schedule::entry::save_in(&mut space, &mut row)?;
            i += 1;
        }
    }
    Ok(())
}

/// Places the slots in the index so they fall due shortly after the
/// placing is done, starts the waker, and prints lateness percentiles from
/// the fire history.
pub(super) fn measure_lateness(
    host: &Host,
    piece: &str,
    slots: &[(String, u32, u64)],
    label: &str,
) -> anyhow::Result<()> {
    let store = host.store();
    // A dry pass (due in an hour) times the placing, so the real pass can
    // finish before the first entry falls due.
    let t = Instant::now();
    place(store, piece, slots, SystemClock.now_ms() + 3_600_000)?;
    let placing_ms = t.elapsed().as_millis() as u64;
    let base = SystemClock.now_ms() + placing_ms * 2 + 300;
    place(store, piece, slots, base)?;
    let ready = SystemClock.now_ms();
    ensure!(
        ready < base,
        "placing the entries took until {} ms after the first due time",
        ready - base
    );
    let statements = || host.counters().host().get(Counter::PgStatements);
    let statements0 = statements();
    host.start_waker();
    let waker0 = thread_cpu_seconds("waker");
    let n = slots.len() as i64;
    wait_until("every wake delivered", Duration::from_secs(120), || {
        delivered(host) >= n
    })?;
    let statements_per_wake = (statements() - statements0) as f64 / n as f64;
    let waker_ms = (thread_cpu_seconds("waker") - waker0) * 1e3 / n as f64;
    let fired_in = host.counters().host().get(Counter::ScheduleFired);
    // Activated ahead by the waker's lead (the rest were activated at
    // their due time): how much of the lateness activation could add.
    let prepared = host.counters().host().get(Counter::SchedulePrepared);
    let mut late: Vec<f64> = Vec::new();
    let mut spaces: Vec<&String> = slots.iter().map(|s| &s.0).collect();
    spaces.dedup();
    for id in spaces {
        let mut s = store.open_space(id)?;
        for entry in 0..4 {
            for f in s.fires(piece, entry, usize::MAX)? {
                if matches!(f.outcome.as_str(), "fired" | "delivered") && f.due_ms >= base {
                    if std::env::var("DUMP").is_ok() {
                        eprintln!(
                            "DUMP {} {} {}",
                            id,
                            f.due_ms - base,
                            f.fired_ms as i64 - f.due_ms as i64
                        );
                    }
                    late.push(f.fired_ms.saturating_sub(f.due_ms) as f64);
                }
            }
        }
    }
    ensure!(
        late.len() == slots.len(),
        "{} fires recorded for {} entries ({fired_in} counted)",
        late.len(),
        slots.len()
    );
    late.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| late[((late.len() as f64 * p) as usize).min(late.len() - 1)];
    println!(
        "lateness: {} entries due within 1 s, {label}: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms (system clock; {prepared} activated ahead; waker thread {waker_ms:.2} ms CPU per wake; {})",
        slots.len(),
        pct(0.50),
        pct(0.99),
        late[late.len() - 1],
        if store.postgres().is_some() {
            format!("{statements_per_wake:.1} statements per wake; target p99 <= 250 ms on PostgreSQL")
        } else {
            "target p99 <= 10 ms".to_string()
        }
    );
    host.shutdown();
    Ok(())
}

/// One entry in each of `entries` parked spaces: each wake activates its space.
fn lateness_parked(dir: &Path, t: &Template, entries: usize, cap: usize) -> anyhow::Result<()> {
    let host = system_host(dir, 5, cap)?;
    let ids = names("late", entries);
    provision(host.store(), &ids, t)?;
    let slots: Vec<(String, u32, u64)> = ids
        .iter()
        .enumerate()
        .map(|(i, id)| (id.clone(), 0, (i as u64 * 1_000) / entries as u64))
        .collect();
    measure_lateness(
        &host,
        &t.piece,
        &slots,
        &format!("{entries} parked spaces, max_scheduled {cap}"),
    )?;
    ensure!(host.park_all_idle(60_000) == 0, "spaces still active");
    Ok(())
}

/// Four entries in each of `entries / 4` spaces kept active: the waker and
/// the firing path without activation.
fn lateness_active(dir: &Path, t: &Template, entries: usize) -> anyhow::Result<()> {
    let spaces = entries.div_ceil(4);
    let host = system_host(
        dir,
        8_000,
        crate::host::ScheduleConfig::default().max_scheduled,
    )?;
    let ids = names("warm", spaces);
    provision(host.store(), &ids, t)?;
    for id in &ids {
        host.ask_blocking(id, Trigger::Warm, Request::Wake)
            .map_err(|e| anyhow::anyhow!("{e}"))?;
    }
    // Entry k of space s falls due at (k * spaces + s) ms-steps of 1 s / entries.
    let mut slots: Vec<(String, u32, u64)> = (0..entries)
        .map(|j| {
            (
                ids[j % spaces].clone(),
                (j / spaces) as u32,
                (j as u64 * 1_000) / entries as u64,
            )
        })
        .collect();
    slots.sort_by(|a, b| a.0.cmp(&b.0).then(a.1.cmp(&b.1)));
    measure_lateness(
        &host,
        &t.piece,
        &slots,
        &format!("{spaces} active spaces x 4 entries"),
    )?;
    ensure!(host.park_all_idle(60_000) == 0, "spaces still active");
    Ok(())
}

// ----- 4. memory -----------------------------------------------------------------

fn memory(dir: &Path, t: &Template, spaces: usize) -> anyhow::Result<()> {
    let clock = Arc::new(ManualClock::default());
    let store = Store::open(StoreConfig::new(dir), clock, Counters::new())?;
    let host = Host::new(store, HostConfig::default());
    release_freed_memory();
    let before = rss_kib();
    let ids = names("mem", spaces);
    let t0 = Instant::now();
    // Provisioned before the waker starts: with it running, every commit
    // that moves a wake earlier pokes it into a directory pass, which
    // doubles the time to create the spaces (the figure is the same).
    provision(host.store(), &ids, t)?;
    let made = t0.elapsed().as_secs_f64();
    // Its first pass reads the directory at once, then it sleeps.
    host.start_waker();
    let mut entries = 0;
    for id in [&ids[0], &ids[spaces - 1]] {
        entries = host.store().open_space(id)?.schedule(None)?.len();
        ensure!(entries == 4, "{id} has {entries} schedule rows");
    }
    ensure!(host.active_spaces().is_empty(), "a space is active");
    std::thread::sleep(Duration::from_millis(500));
    release_freed_memory();
    let after = rss_kib();
    let (images, full) = with_engine_images_full()?;
    host.shutdown();
    println!(
        "memory: {spaces} parked spaces x {entries} = {} indexed entries, RSS {:.1} MiB before creating them, {:.1} MiB after with the host and its waker running and idle, {:.1} MiB with the engine-image cache full ({images} images kept by as many threads) ({:.0} bytes per space; {} per-space counter sets kept; created in {:.0} s; target < 100 MB)",
        spaces * entries,
        before as f64 / 1024.0,
        after as f64 / 1024.0,
        full as f64 / 1024.0,
        (after as f64 - before as f64) * 1024.0 / spaces as f64,
        host.counters().space_count(),
        made
    );
    Ok(())
}

/// The process's RSS while the default number of threads each keep an
/// engine image, as space-server threads do between tenures; the threads
/// then exit (freeing theirs). Returns (images, RSS in KiB).
fn with_engine_images_full() -> anyhow::Result<(usize, u64)> {
    let cfg = RuntimeConfig::default();
    let n = cfg.engine_images;
    let kept = std::sync::Barrier::new(n + 1);
    let measured = std::sync::Barrier::new(n + 1);
    std::thread::scope(|scope| -> anyhow::Result<(usize, u64)> {
        let threads: Vec<_> = (0..n)
            .map(|_| {
                let (cfg, kept, measured) = (&cfg, &kept, &measured);
                scope.spawn(move || -> anyhow::Result<()> {
                    let sb = TenureSandbox::get(&cfg.sandbox, &COMMONFABRIC_JS, cfg.engine_images);
                    // Dropped: restored and kept as this thread's spare.
                    drop(sb?);
                    kept.wait();
                    measured.wait();
                    Ok(())
                })
            })
            .collect();
        kept.wait();
        release_freed_memory();
        let rss = rss_kib();
        measured.wait();
        for t in threads {
            t.join().expect("image thread panicked")?;
        }
        Ok((n, rss))
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
