//! The benchmarks run end to end at a tiny scale and print every figure they
//! promise (the real figures are in spec/performance.md).

mod common;

use std::process::Command;

/// Runs `spacewake bench <which> --scale 0.01` and checks it succeeds and
/// prints every needle.
fn prints_all(which: &str, needles: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args(["bench", which, "--scale", "0.01"])
        .env("SPACEWAKE_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    for needle in needles {
        assert!(text.contains(needle), "missing {needle:?} in:\n{text}");
    }
}

#[test]
fn bench_store_prints_its_side_by_side_figures() {
    prints_all(
        "store",
        &[
            "commit overhead:",
            "ratio",
            "parallel:  1 spaces",
            "parallel: 64 spaces",
            "discovery:",
        ],
    );
}

#[test]
fn bench_patterns_prints_its_side_by_side_figures() {
    prints_all(
        "patterns",
        &[
            "compile (",
            "cached is",
            "instantiation:",
            "events:",
            "derivations:",
        ],
    );
}

#[test]
fn bench_schedule_prints_its_side_by_side_figures() {
    prints_all(
        "schedule",
        &[
            "memory: ",
            "indexed entries, RSS",
            "index hook, re-commit, declaration unchanged: with [SCHEDULE]",
            "index hook, first declaration, result only",
            "index hook, first declaration, piece created",
            "one-off hook: handler moving the at field",
            "wake breakdown (one thread",
            "bare wake (one thread",
            "x the bare wake (target <= 1.5x)",
            "wakes: 100 parked spaces due at once",
            "(max_scheduled 32, engine reuse on;",
            "(max_scheduled 8, engine reuse off;",
            "(max_scheduled 8, engine reuse on;",
            "wakes: max_scheduled 8, engine reuse on, mean of 7 rounds:",
            "wakes: max_scheduled 8, engine reuse on, by the spaces' WAL: first cycle (wakes 2-4 of each space",
            "later (wakes 5-8, reused in place)",
            "with the engine-image cache full",
            "lateness: 20 entries due within 1 s, 20 parked spaces, max_scheduled 8: p50",
            "lateness: 20 entries due within 1 s, 20 parked spaces, max_scheduled 4: p50",
            "lateness: 20 entries due within 1 s, 5 active spaces x 4 entries: p50",
            "activated ahead;",
        ],
    );
}

/// `--caps` replaces the herd's rounds: one cap per round, in order, and a
/// cap run twice gets its mean.
#[test]
fn bench_schedule_runs_the_herd_at_the_caps_asked_for() {
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args([
            "bench", "schedule", "--scale", "0.01", "--only", "wakes", "--caps", "2,3,2",
        ])
        .env("SPACEWAKE_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    let rounds: Vec<&str> = text
        .lines()
        .filter(|l| l.contains("parked spaces due at once, round"))
        .collect();
    assert_eq!(rounds.len(), 3, "{text}");
    for (line, cap) in rounds.iter().zip([2, 3, 2]) {
        assert!(
            line.contains(&format!("(max_scheduled {cap}, engine reuse on;")),
            "{line}"
        );
    }
    assert!(
        text.contains("wakes: max_scheduled 2, engine reuse on, mean of 2 rounds:"),
        "{text}"
    );
    assert!(
        !text.contains("max_scheduled 3, engine reuse on, mean"),
        "{text}"
    );
}

#[test]
fn bench_serve_prints_its_side_by_side_figures() {
    prints_all(
        "serve",
        &[
            "latency: event-to-update p50",
            "throughput: ",
            "events/s sustained",
            "memory: 10 spaces with a counter piece, never opened",
            "after an event activated each and all parked",
            "pairwise ratios",
        ],
    );
}

/// The mode `bench/wake-instructions.sh` runs under callgrind: rounds of
/// wakes one at a time through the real host, every wake delivered.
#[test]
fn bench_schedule_instructions_mode_wakes_every_space_each_round() {
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .args([
            "bench",
            "schedule",
            "--only",
            "instructions",
            "--scale",
            "0.05",
        ])
        .args(["--wake-rounds", "2"])
        .env("SPACEWAKE_LOG", "error")
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("instructions: 10 parked spaces woken 3 times one at a time"),
        "{text}"
    );
}

#[test]
fn bench_fleet_prints_its_side_by_side_figures() {
    // It starts its own throwaway PostgreSQL; without the server binaries
    // (and outside CI) there is nothing to run.
    if !common::pg::binaries_or_skip("bench_fleet") {
        return;
    }
    prints_all(
        "fleet",
        &[
            "round trip",
            "commits: 1 thread(s), SQLite",
            "commits: 4 thread(s)",
            "PostgreSQL",
            "with 1 host(s)",
            "with 2 host(s)",
            "with 3 host(s)",
            "wakes (end to end, the host):",
            "against SQLite: rate",
            "parked spaces on PostgreSQL: p50",
            "relay: event-to-update at the holder p50",
        ],
    );
}
