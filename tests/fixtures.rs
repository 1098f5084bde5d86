//! Every pattern fixture has a scenario, and every scenario passes through
//! the same runner `spacewake scenario` uses; the CLI commands keep their
//! contracts (exit status, diagnostics, the closing `N passed, N failed`).

use std::path::{Path, PathBuf};
use std::process::Command;

fn files(dir: &str, suffix: &str) -> Vec<PathBuf> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.to_string_lossy().ends_with(suffix))
        .collect();
    v.sort();
    v
}

#[test]
fn every_pattern_fixture_has_a_passing_scenario() {
    let scenarios = files("fixtures/patterns", ".scenario.json");
    assert!(scenarios.len() >= 25, "only {} scenarios", scenarios.len());
    let patterns: Vec<_> = files("fixtures/patterns", ".tsx")
        .into_iter()
        .chain(files("fixtures/patterns", ".ts"))
        .collect();
    for p in &patterns {
        let stem = p.file_stem().unwrap().to_string_lossy().to_string();
        let sc = p.with_file_name(format!("{stem}.scenario.json"));
        assert!(sc.exists(), "{} has no scenario", p.display());
    }
    let mut failed = Vec::new();
    let schedules = files("fixtures/schedules", ".scenario.json");
    assert!(
        schedules.len() >= 3,
        "schedule scenarios: {}",
        schedules.len()
    );
    for sc in scenarios.iter().chain(&schedules) {
        let o = spacewake::scenario::run_file(sc);
        if !o.passed() {
            failed.push(format!("{}: {:?}", sc.display(), o.failures));
        }
    }
    assert!(
        failed.is_empty(),
        "failing scenarios:\n{}",
        failed.join("\n")
    );
}

#[test]
fn check_exits_zero_for_valid_patterns_and_one_with_a_located_diagnostic_otherwise() {
    let bin = env!("CARGO_BIN_EXE_spacewake");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ok = Command::new(bin)
        .arg("check")
        .args(files("fixtures/patterns", ".tsx"))
        .output()
        .unwrap();
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stdout)
    );

    let bad = Command::new(bin)
        .arg("check")
        .arg(root.join("fixtures/invalid/interval-59.tsx"))
        .arg(root.join("fixtures/patterns/counter.tsx"))
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(1));
    let text = String::from_utf8(bad.stdout).unwrap();
    assert!(
        text.contains("interval-59.tsx:9:35: error[SCHEDULE_INTERVAL_TOO_SMALL]: intervalMinutes must be at least 60 (got 59)"),
        "{text}"
    );
    assert!(text.contains("^"), "a caret under the column: {text}");
}

#[test]
fn scenario_prints_each_result_and_the_closing_tally() {
    let bin = env!("CARGO_BIN_EXE_spacewake");
    let dir = tempfile::tempdir().unwrap();
    let counter = Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/counter.tsx");
    let failing = dir.path().join("wrong.scenario.json");
    std::fs::write(
        &failing,
        serde_json::json!({
            "name": "wrong on purpose",
            "module": counter,
            "argument": {"value": 1},
            "steps": [{"expect": [{"path": "value", "value": 2}]}]
        })
        .to_string(),
    )
    .unwrap();
    let timed = dir.path().join("timed.scenario.json");
    std::fs::write(
        &timed,
        serde_json::json!({"name": "goes back in time", "module": counter, "steps": [{"advanceMinutes": -5}]}).to_string(),
    )
    .unwrap();
    let good =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/patterns/counter.scenario.json");
    let out = Command::new(bin)
        .arg("scenario")
        .args([&good, &failing, &timed])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("path \"value\": expected 2, got 1"), "{text}");
    assert!(
        text.contains("advanceMinutes must be a non-negative number"),
        "{text}"
    );
    assert_eq!(
        text.trim_end().lines().last(),
        Some("1 passed, 2 failed"),
        "{text}"
    );
}
