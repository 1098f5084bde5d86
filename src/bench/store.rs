//! `spacewake bench store`: store throughput and discovery, measured side by
//! side in one run so the ratios hold on a noisy shared machine.
//!
//! 1. Commits/s through `Space::commit` vs the same rows written with plain
//!    rusqlite (same schema, pragmas and statements), alternating rounds.
//! 2. Commits/s with 1, 4 and 64 spaces committing in parallel.
//! 3. Directory discovery time with 1,000 vs 100,000 spaces, 100 due.

use crate::clock::{Clock, ManualClock};
use crate::metrics::Counters;
use crate::store::{
    Author, CommitClass, CommitRequest, DocOp, Store, StoreConfig, SPACE_MIGRATIONS,
};
use anyhow::Context;
use rusqlite::{params, Connection};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Instant;

pub fn run(dir: Option<PathBuf>, scale: f64) -> anyhow::Result<ExitCode> {
    let tmp;
    let root = match dir {
        Some(d) => d,
        None => {
            tmp = tempfile_dir()?;
            tmp.clone()
        }
    };
    let n = |full: usize| ((full as f64 * scale) as usize).max(10);
    println!(
        "spacewake bench store (scale {scale}) in {}",
        root.display()
    );

    // 1. Overhead against plain rusqlite.
    let per_round = n(5_000);
    let rounds = 5;
    let (ours, plain) = overhead(&root.join("overhead"), per_round, rounds)?;
    println!(
        "commit overhead: store {:.0} commits/s, plain rusqlite {:.0} commits/s, ratio {:.2}x (target <= 1.30x; median of {rounds} alternating rounds of {per_round})",
        ours,
        plain,
        plain / ours
    );

    // 2. Parallel spaces.
    let total = n(20_000);
    let mut base = 0.0;
    for spaces in [1usize, 4, 64] {
        let rate = parallel(&root.join(format!("parallel-{spaces}")), spaces, total)?;
        if spaces == 1 {
            base = rate;
        }
        println!(
            "parallel: {spaces:>2} spaces {rate:>9.0} commits/s ({:.2}x of 1 space; {} cores)",
            rate / base,
            std::thread::available_parallelism().map_or(1, |n| n.get())
        );
    }

    // 3. Discovery flatness.
    let small = discovery(&root.join("disc-small"), n(1_000).max(200), 100)?;
    let large = discovery(&root.join("disc-large"), n(100_000).max(200), 100)?;
    println!(
        "discovery: {} spaces {:.1} us, {} spaces {:.1} us, ratio {:.2} (target <= 1.5; 100 due in each)",
        n(1_000).max(200),
        small * 1e6,
        n(100_000).max(200),
        large * 1e6,
        large / small
    );
    if root.starts_with(std::env::temp_dir()) {
        let _ = std::fs::remove_dir_all(&root);
    }
    Ok(ExitCode::SUCCESS)
}

fn tempfile_dir() -> anyhow::Result<PathBuf> {
    let d = std::env::temp_dir().join(format!("spacewake-bench-{}", std::process::id()));
    std::fs::create_dir_all(&d)?;
    Ok(d)
}

fn doc_value(i: usize) -> serde_json::Value {
    json!({"title": "item", "n": i, "done": false, "tags": ["a", "b"]})
}

fn open_store(dir: &Path) -> anyhow::Result<Store> {
    let clock: Arc<dyn Clock> = Arc::new(ManualClock::default());
    Ok(Store::open(StoreConfig::new(dir), clock, Counters::new())?)
}

/// Returns (ours, plain) commits/s, each the median over alternating rounds.
fn overhead(dir: &Path, per_round: usize, rounds: usize) -> anyhow::Result<(f64, f64)> {
    let _ = std::fs::remove_dir_all(dir);
    let store = open_store(dir)?;
    store.create_space("bench", "did:key:bench")?;
    let mut space = store.open_space("bench")?;
    let plain_path = dir.join("plain.sqlite");
    let mut plain = Connection::open(&plain_path)?;
    plain.execute_batch("PRAGMA journal_mode = WAL; PRAGMA synchronous = NORMAL;")?;
    for m in SPACE_MIGRATIONS {
        plain.execute_batch(m.sql)?;
    }
    let author = Author::principal("did:key:bench");
    let (mut ours, mut theirs) = (Vec::new(), Vec::new());
    let mut i = 0usize;
    for _ in 0..rounds {
        let t = Instant::now();
        for _ in 0..per_round {
            i += 1;
            space.commit(
                CommitRequest::new(CommitClass::Authored, author.clone()).op(DocOp::Set {
                    id: format!("doc-{}", i % 1000),
                    value: doc_value(i),
                }),
            )?;
        }
        ours.push(per_round as f64 / t.elapsed().as_secs_f64());

        let t = Instant::now();
        for _ in 0..per_round {
            i += 1;
            plain_commit(&mut plain, &format!("doc-{}", i % 1000), &doc_value(i), 0)?;
        }
        theirs.push(per_round as f64 / t.elapsed().as_secs_f64());
    }
    Ok((median(ours), median(theirs)))
}

/// The rows one authored single-document commit writes, in plain rusqlite.
fn plain_commit(
    conn: &mut Connection,
    id: &str,
    value: &serde_json::Value,
    now: i64,
) -> anyhow::Result<()> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let seq: i64 = tx
        .prepare_cached("SELECT COALESCE(MAX(seq), 0) + 1 FROM commits")?
        .query_row([], |r| r.get(0))?;
    tx.prepare_cached(
        "INSERT INTO commits (seq, class, principal, session, at_ms, op_count, event_count) \
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    )?
    .execute(params![
        seq,
        "authored",
        "did:key:bench",
        None::<String>,
        now,
        1,
        0
    ])?;
    let text = value.to_string();
    tx.prepare_cached(
        "INSERT INTO commit_ops (seq, idx, doc_id, op, path, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
    )?
    .execute(params![seq, 0, id, "set", None::<String>, text])?;
    tx.prepare_cached(
        "INSERT INTO docs (id, value, seq, rev) VALUES (?1, ?2, ?3, 1) \
         ON CONFLICT (id) DO UPDATE SET value = excluded.value, seq = excluded.seq, rev = rev + 1",
    )?
    .execute(params![id, text, seq])?;
    tx.commit()?;
    Ok(())
}

fn parallel(dir: &Path, spaces: usize, total: usize) -> anyhow::Result<f64> {
    let _ = std::fs::remove_dir_all(dir);
    let store = open_store(dir)?;
    let mut handles = Vec::new();
    for s in 0..spaces {
        let id = format!("space-{s}");
        store.create_space(&id, "did:key:bench")?;
        handles.push(store.open_space(&id)?);
    }
    let per = (total / spaces).max(1);
    let t = Instant::now();
    std::thread::scope(|scope| -> anyhow::Result<()> {
        let joins: Vec<_> = handles
            .into_iter()
            .map(|mut space| {
                scope.spawn(move || -> anyhow::Result<()> {
                    let author = Author::principal("did:key:bench");
                    for i in 0..per {
                        space.commit(
                            CommitRequest::new(CommitClass::Authored, author.clone()).op(
                                DocOp::Set {
                                    id: format!("doc-{}", i % 100),
                                    value: doc_value(i),
                                },
                            ),
                        )?;
                    }
                    Ok(())
                })
            })
            .collect();
        for j in joins {
            j.join().expect("bench thread panicked")?;
        }
        Ok(())
    })?;
    Ok((per * spaces) as f64 / t.elapsed().as_secs_f64())
}

/// Median seconds for one `discover` call with `registered` spaces, `due` of
/// them due now and the rest due in the future.
fn discovery(dir: &Path, registered: usize, due: usize) -> anyhow::Result<f64> {
    let _ = std::fs::remove_dir_all(dir);
    let store = open_store(dir)?;
    let now = store.clock().now_ms();
    store
        .directory()
        .files()
        .context("the discovery benchmark registers spaces in a SQLite directory")?
        .insert_many((0..registered).map(|i| {
            let wake = if i % (registered / due).max(1) == 0 && i / (registered / due).max(1) < due
            {
                now - 1_000
            } else {
                now + 3_600_000 + i as u64
            };
            (
                format!("space-{i:06}"),
                "did:key:bench".to_string(),
                now,
                Some(wake),
            )
        }))
        .context("registering spaces")?;
    let mut samples = Vec::new();
    for _ in 0..200 {
        let t = Instant::now();
        let found = store.directory().discover(now)?;
        samples.push(t.elapsed().as_secs_f64());
        anyhow::ensure!(
            found.len() == due,
            "discovery found {} of {due}",
            found.len()
        );
    }
    Ok(median(samples))
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.total_cmp(b));
    v[v.len() / 2]
}
