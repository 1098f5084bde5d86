//! What we ship for other tools, checked by those tools: the Grafana
//! dashboard and the Prometheus alert rules (against `spec/metrics.md`, and
//! by `promtool`), and the authoring API's type declarations (by `tsc`,
//! over every fixture pattern).
//!
//! A tool missing from the machine skips its test with one line, or under
//! `CI=true` fails it (`.ci/run` installs both).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `name` on the PATH, or `None` after saying why the test is skipped.
fn tool(test: &str, name: &str) -> Option<PathBuf> {
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!("{test}: CI=true and `{name}` is not on the PATH (.ci/run installs it)");
        }
        eprintln!("{test}: skipped, `{name}` is not on the PATH");
    }
    found
}

/// Every metric name `spec/metrics.md` lists (in backticks).
fn spec_metrics() -> BTreeSet<String> {
    let page = std::fs::read_to_string(Path::new(ROOT).join("spec/metrics.md")).unwrap();
    page.split('`')
        .skip(1)
        .step_by(2)
        .filter(|t| t.starts_with("spacewake_") && !t.contains(['{', ' ', '(']))
        .map(str::to_string)
        .collect()
}

/// The `spacewake_…` identifiers in `text`.
fn metric_names(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(i) = rest.find("spacewake_") {
        let tail = &rest[i..];
        let end = tail
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .unwrap_or(tail.len());
        // Not the tail of a longer identifier.
        let prev = rest[..i].chars().next_back();
        if !prev.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_') {
            out.insert(tail[..end].to_string());
        }
        rest = &tail[end..];
    }
    out
}

/// Whether the query name `name` is a metric the spec lists (a histogram's
/// `_bucket`, `_sum` and `_count` series belong to its family).
fn listed(spec: &BTreeSet<String>, name: &str) -> bool {
    spec.contains(name)
        || ["_bucket", "_sum", "_count"].iter().any(|s| {
            name.strip_suffix(s)
                .is_some_and(|base| spec.contains(base) && base.ends_with("_seconds"))
        })
}

fn exprs(v: &serde_json::Value, out: &mut Vec<String>) {
    match v {
        serde_json::Value::Object(m) => {
            for (k, v) in m {
                match (k.as_str(), v) {
                    ("expr" | "query", serde_json::Value::String(s)) => out.push(s.clone()),
                    _ => exprs(v, out),
                }
            }
        }
        serde_json::Value::Array(a) => a.iter().for_each(|v| exprs(v, out)),
        _ => {}
    }
}

#[test]
fn the_dashboard_names_only_metrics_the_spec_lists_and_covers_the_host() {
    let spec = spec_metrics();
    assert!(spec.len() > 100, "{} names in spec/metrics.md", spec.len());
    let path = Path::new(ROOT).join("ops/grafana/spacewake-host.json");
    let dash: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    let mut queries = Vec::new();
    exprs(&dash, &mut queries);
    let used: BTreeSet<String> = queries.iter().flat_map(|q| metric_names(q)).collect();
    let unknown: Vec<&String> = used.iter().filter(|n| !listed(&spec, n)).collect();
    assert!(unknown.is_empty(), "not in spec/metrics.md: {unknown:?}");
    // What the issue asks the dashboard to show, by the metric that shows it.
    for needed in [
        "spacewake_schedule_delivered_total",
        "spacewake_schedule_wake_lateness_seconds_bucket",
        "spacewake_activations_total",
        "spacewake_activation_active_spaces",
        "spacewake_spaces_parked",
        "spacewake_schedule_dead_lettered_total",
        "spacewake_events_dead_lettered_total",
        "spacewake_ledger_budget_skips_total",
        "spacewake_effects_requested_total",
        "spacewake_effect_outcomes_total",
        "spacewake_wave_cpu_seconds_total",
    ] {
        assert!(
            used.contains(needed),
            "the dashboard does not show {needed}"
        );
    }
    // Every panel but the rows queries something, from the chosen source.
    for p in dash["panels"].as_array().unwrap() {
        if p["type"] == "row" {
            continue;
        }
        let targets = p["targets"].as_array().unwrap();
        assert!(!targets.is_empty(), "{}", p["title"]);
        assert_eq!(p["datasource"]["uid"], "${datasource}", "{}", p["title"]);
    }
}

#[test]
fn the_alert_rules_name_only_metrics_the_spec_lists_and_pass_promtool() {
    let spec = spec_metrics();
    let dir = Path::new(ROOT).join("ops/prometheus");
    let rules = std::fs::read_to_string(dir.join("spacewake-alerts.yml")).unwrap();
    let used = metric_names(&rules);
    let unknown: Vec<&String> = used.iter().filter(|n| !listed(&spec, n)).collect();
    assert!(unknown.is_empty(), "not in spec/metrics.md: {unknown:?}");
    for alert in [
        "SpacewakeWakesLate",
        "SpacewakeDeadLettersRising",
        "SpacewakeActivationsFailing",
        "SpacewakeLeasesLost",
        "SpacewakeSpaceOverBudget",
        "SpacewakeDown",
    ] {
        assert!(rules.contains(&format!("alert: {alert}\n")), "{alert}");
    }
    let Some(promtool) = tool("alert rules", "promtool") else {
        return;
    };
    for args in [
        ["check", "rules", "spacewake-alerts.yml"],
        ["test", "rules", "spacewake-alerts.test.yml"],
    ] {
        let out = Command::new(&promtool)
            .args(args)
            .current_dir(&dir)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "promtool {}: {}{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Each rule has a test case that fires it.
    let tests = std::fs::read_to_string(dir.join("spacewake-alerts.test.yml")).unwrap();
    for line in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!(
                "alertname: {line}\n        exp_alerts:\n          - "
            )),
            "no test fires {line}"
        );
    }
}

/// Copies `from` into `to`, recursively.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let e = e.unwrap();
        let dest = to.join(e.file_name());
        if e.file_type().unwrap().is_dir() {
            copy_tree(&e.path(), &dest);
        } else {
            std::fs::copy(e.path(), dest).unwrap();
        }
    }
}

/// Runs tsc over `include` in `dir` (with the tsconfig `spacewake types`
/// wrote, extended); returns each file's first error `(code, line)`.
fn tsc_errors(
    tsc: &Path,
    dir: &Path,
    include: &[&str],
    exclude: &[String],
) -> std::collections::BTreeMap<String, (String, u64)> {
    let mut include: Vec<&str> = include.to_vec();
    include.push("commonfabric.d.ts");
    let cfg =
        serde_json::json!({"extends": "./tsconfig.json", "include": include, "exclude": exclude});
    std::fs::write(dir.join("tsconfig.check.json"), cfg.to_string()).unwrap();
    let out = Command::new(tsc)
        .args(["-p", "tsconfig.check.json", "--pretty", "false"])
        .current_dir(dir)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let mut first = std::collections::BTreeMap::new();
    // `path(line,col): error TSnnnn: message`; tsc sorts by file and position.
    for line in text.lines() {
        let Some((loc, rest)) = line.split_once("): error ") else {
            continue;
        };
        let Some((path, pos)) = loc.rsplit_once('(') else {
            continue;
        };
        let code = rest.split(':').next().unwrap().to_string();
        let line_no: u64 = pos.split(',').next().unwrap().parse().unwrap();
        first.entry(path.to_string()).or_insert((code, line_no));
    }
    assert!(
        out.status.success() || !first.is_empty(),
        "tsc failed without a diagnostic: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    first
}

/// `spacewake types` into a copy of the fixtures, then tsc: every valid
/// fixture pattern type-checks, and each invalid one fails (or passes) as
/// its `expected.json` says (`typecheck`: a TS code and `typecheckLine`,
/// or `"ok"`).
#[test]
fn the_shipped_declarations_type_check_every_fixture_as_expected() {
    let Some(tsc) = tool("types", "tsc") else {
        return;
    };
    let version = Command::new(&tsc).arg("--version").output().unwrap();
    let version = String::from_utf8_lossy(&version.stdout).to_string();
    let v: Vec<u32> = version
        .trim()
        .trim_start_matches("Version ")
        .split('.')
        .take(2)
        .map(|n| n.parse().unwrap_or(0))
        .collect();
    assert!(
        v >= vec![5, 4],
        "TypeScript 5.4 or later is needed: {version}"
    );
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path();
    copy_tree(&Path::new(ROOT).join("fixtures"), dir);
    let out = Command::new(env!("CARGO_BIN_EXE_spacewake"))
        .arg("types")
        .arg(dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{said}");
    assert!(
        said.contains("wrote") && said.contains("commonfabric.d.ts"),
        "{said}"
    );
    assert!(dir.join("tsconfig.json").exists());

    // The valid fixtures, in one run.
    let skip: Vec<String> = std::fs::read_to_string(dir.join("typecheck-skip.txt"))
        .unwrap()
        .lines()
        .filter_map(|l| l.split('#').next())
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .map(str::to_string)
        .collect();
    assert!(skip.len() <= 3, "the skip list stays short: {skip:?}");
    let valid = [
        "patterns/**/*.ts",
        "patterns/**/*.tsx",
        "schedules/**/*.tsx",
        "runtime/**/*.ts",
        "runtime/**/*.tsx",
        "tests/**/*.tsx",
    ];
    let errors = tsc_errors(&tsc, dir, &valid, &skip);
    assert!(errors.is_empty(), "valid fixtures fail tsc: {errors:#?}");

    // The invalid ones: a syntax error anywhere stops tsc's semantic
    // checks, so a second run leaves out the files that failed the first.
    let invalid = ["invalid/*.tsx", "typecheck/*.tsx"];
    let mut got = tsc_errors(&tsc, dir, &invalid, &[]);
    let failed: Vec<String> = got.keys().cloned().collect();
    for (k, v) in tsc_errors(&tsc, dir, &invalid, &failed) {
        got.entry(k).or_insert(v);
    }
    let mut checked = 0;
    let mut failing = 0;
    for sub in ["invalid", "typecheck"] {
        for e in std::fs::read_dir(dir.join(sub)).unwrap() {
            let path = e.unwrap().path();
            if path.extension().is_none_or(|x| x != "tsx") {
                continue;
            }
            let rel = format!("{sub}/{}", path.file_name().unwrap().to_string_lossy());
            let expected: serde_json::Value = serde_json::from_str(
                &std::fs::read_to_string(path.with_extension("expected.json")).unwrap(),
            )
            .unwrap();
            let want = expected["typecheck"]
                .as_str()
                .unwrap_or_else(|| panic!("{rel}: expected.json has no `typecheck`"));
            match (want, got.get(&rel)) {
                ("ok", None) => {}
                ("ok", Some(e)) => panic!("{rel}: tsc reports {e:?}, expected none"),
                (code, Some((c, line))) => {
                    assert_eq!(
                        (c.as_str(), *line),
                        (code, expected["typecheckLine"].as_u64().unwrap()),
                        "{rel}"
                    );
                    failing += 1;
                }
                (code, None) => panic!("{rel}: tsc reports nothing, expected {code}"),
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 60 && failing >= 30,
        "{checked} checked, {failing} failing"
    );
}
