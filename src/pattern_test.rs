//! `spacewake test FILE...`: runs pattern tests in the reference's format,
//! in-process, against a real store in a temporary directory, on a manual
//! clock.
//!
//! A test is itself a pattern (`*.test.tsx`) whose result holds `[TESTS]`: a
//! list of steps run in order. `{ action }` sends the step's `event` (or `{}`)
//! to the stream there and settles (runs waves until no event is left);
//! `{ assertion }` reads the record `assert(() => ...)` made, after the steps
//! before it, and passes when it holds. `{ render }` demands the value,
//! `{ settle: true }`, `{ label }` and `{ await }` are markers, and a step
//! with `skip: true` is counted as skipped. A failed assertion prints its
//! source and the operands the compiler recorded while it ran. A handler or
//! derivation that fails during a test is a failure of its own. The run ends
//! with `N passed, N failed`; the exit status is 0 only when none failed.

use crate::runtime::SpaceRuntime;
use crate::store::{Author, PathSeg};
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// The outcome of one reported result of a test file.
#[derive(Debug, Clone, PartialEq)]
pub struct TestResult {
    /// `assertion_N`, `action_N`, or what failed outside a step.
    pub name: String,
    pub status: Status,
    /// `action_N` when the result came after an action.
    pub after_action: Option<String>,
    /// Why it failed.
    pub error: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Passed,
    Failed,
    Skipped,
}

/// Everything one test file reported.
#[derive(Debug, Clone)]
pub struct FileReport {
    pub file: PathBuf,
    /// A failure before any step ran (does not compile, not a test, ...).
    pub error: Option<String>,
    pub results: Vec<TestResult>,
}

impl FileReport {
    pub fn count(&self, status: Status) -> usize {
        self.results.iter().filter(|r| r.status == status).count()
            + usize::from(status == Status::Failed && self.error.is_some())
    }
}

/// Runs every file, prints each file's results and the totals.
pub fn run_files(files: &[PathBuf]) -> ExitCode {
    let (mut passed, mut failed, mut skipped) = (0, 0, 0);
    for f in files {
        let report = run_file(f);
        println!("\n{}", f.display());
        if let Some(e) = &report.error {
            println!("  ✗ Error: {}", indent_rest(e));
        }
        for r in &report.results {
            let mark = match r.status {
                Status::Passed => "✓",
                Status::Failed => "✗",
                Status::Skipped => "⊘",
            };
            let after = r
                .after_action
                .as_ref()
                .map(|a| format!(" (after {a})"))
                .unwrap_or_default();
            let skip = if r.status == Status::Skipped {
                " (skipped)"
            } else {
                ""
            };
            println!("  {mark} {}{after}{skip}", r.name);
            if let (Status::Failed, Some(e)) = (r.status, &r.error) {
                for line in e.lines() {
                    println!("      {line}");
                }
            }
        }
        passed += report.count(Status::Passed);
        failed += report.count(Status::Failed);
        skipped += report.count(Status::Skipped);
    }
    let skipped = if skipped > 0 {
        format!(", {skipped} skipped")
    } else {
        String::new()
    };
    println!("\n{passed} passed, {failed} failed{skipped}");
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn indent_rest(s: &str) -> String {
    s.replace('\n', "\n      ")
}

/// Runs one test file.
pub fn run_file(file: &Path) -> FileReport {
    let mut report = FileReport {
        file: file.to_path_buf(),
        error: None,
        results: vec![],
    };
    if let Err(e) = run(file, &mut report.results) {
        report.error = Some(e);
    }
    report
}

/// At most this many waves settle one action (a test that keeps sending
/// events to itself fails instead of running forever).
const MAX_WAVES_PER_STEP: usize = 1_000;

fn run(file: &Path, results: &mut Vec<TestResult>) -> Result<(), String> {
    let program = crate::check::compile_file(file).map_err(|d| {
        format!(
            "{} does not compile:\n{}",
            file.display(),
            crate::compiler::render(&d)
        )
    })?;
    // As the reference's runner: `export const fetchMocks = [...]` answers
    // the test's requests.
    let mocks = match program.entry().consts.get("fetchMocks") {
        Some(v) => crate::effects::mock::Mocks::from_json(v)?,
        None => Default::default(),
    };
    crate::scenario::with_scratch_runtime("test", mocks, |rt, _, _, effects| {
        rt.seed_test_home().map_err(|e| e.to_string())?;
        let piece = rt
            .create_piece(&program, None, &json!({}))
            .map_err(|e| e.to_string())?;
        rt.flush().map_err(|e| e.to_string())?;
        // As the reference's runner, the piece settles before the first step.
        rt.settle(MAX_WAVES_PER_STEP).map_err(|e| e.to_string())?;
        let expects_non_idempotent = rt
            .read(&piece, &[PathSeg::Key("expectNonIdempotent".into())])
            .map_err(|e| e.to_string())?;
        // The steps as stored, not resolved: a step's assertion or render is
        // computed when the runner reaches it, as the reference's runner
        // does (reading them all first would render the UI before the first
        // assertion).
        let stored = rt
            .read_doc(&piece)
            .map_err(|e| e.to_string())?
            .0
            .and_then(|d| d.get("$TESTS").cloned());
        let steps = match stored {
            Some(s @ Value::Array(_)) => s,
            _ => rt
                .read(&piece, &[PathSeg::Key("$TESTS".into())])
                .map_err(|e| e.to_string())?,
        };
        let Value::Array(steps) = steps else {
            return Err(format!(
                "the default export's result has no [TESTS] list (found {})",
                short(&steps)
            ));
        };
        // As the reference's runner: `allowRuntimeErrors: true` lets
        // handlers and derivations fail without failing the test, and
        // `expectRuntimeErrors: true | N` requires that some (exactly N) did.
        let flag = |rt: &mut SpaceRuntime, key: &str| {
            rt.read(&piece, &[PathSeg::Key(key.into())])
                .map_err(|e| e.to_string())
        };
        let expected = flag(rt, "expectRuntimeErrors")?;
        let expected = match expected {
            Value::Bool(true) => Some(None),
            Value::Number(n) => Some(n.as_u64().map(|n| n as usize)),
            _ => None,
        };
        let tolerate = expected.is_some() || flag(rt, "allowRuntimeErrors")? == Value::Bool(true);
        run_steps(rt, &piece, &steps, results, tolerate, effects)?;
        if let Some(want) = expected {
            let got = rt.failures().len();
            let name = "expectRuntimeErrors".to_string();
            results.push(if got == 0 || want.is_some_and(|w| w != got) {
                let want = want.map_or("some".to_string(), |w| w.to_string());
                let seen: Vec<String> = rt
                    .failures()
                    .iter()
                    .take(20)
                    .map(|f| format!("{} {} failed: {}", f.kind, f.action, f.error))
                    .collect();
                failed_result(
                    name,
                    None,
                    format!(
                        "expected {want} runtime error(s), saw {got}\n{}",
                        seen.join("\n")
                    ),
                )
            } else {
                TestResult {
                    name: format!("expectRuntimeErrors ({got} seen)"),
                    status: Status::Passed,
                    after_action: None,
                    error: None,
                }
            });
        }
        // As the reference's runner: a test may say that one of its
        // derivations is not idempotent, and then the check must find it.
        if expects_non_idempotent == Value::Bool(true) {
            let found = rt.idempotency_violations().map_err(|e| e.to_string())?;
            results.push(if found.is_empty() {
                failed_result(
                    "expectNonIdempotent".to_string(),
                    None,
                    "the test expects a derivation that changes something when run again \
                     on the same inputs; every derivation here is idempotent"
                        .to_string(),
                )
            } else {
                TestResult {
                    name: format!(
                        "expectNonIdempotent ({} found: {})",
                        found.len(),
                        found.join(", ")
                    ),
                    status: Status::Passed,
                    after_action: None,
                    error: None,
                }
            });
        }
        Ok(())
    })
}

/// The handler and derivation failures since the `seen`-th, as lines; moves `seen` past them.
fn failures_since(rt: &SpaceRuntime, seen: &mut usize) -> Vec<String> {
    let all = rt.failures();
    let out = all[*seen..]
        .iter()
        .map(|f| format!("{} {} failed: {}", f.kind, f.action, f.error))
        .collect();
    *seen = all.len();
    out
}

fn run_steps(
    rt: &mut SpaceRuntime,
    piece: &str,
    steps: &[Value],
    results: &mut Vec<TestResult>,
    tolerate_errors: bool,
    effects: &crate::scenario::ScratchEffects,
) -> Result<(), String> {
    let author = Author::principal("did:key:test");
    let (mut actions, mut assertions) = (0usize, 0usize);
    let mut failures_seen = rt.failures().len();
    for (i, step) in steps.iter().enumerate() {
        let at = |key: &str| {
            vec![
                PathSeg::Key("$TESTS".into()),
                PathSeg::Index(i),
                PathSeg::Key(key.into()),
            ]
        };
        let has = |key: &str| step.get(key).is_some();
        let skip = step.get("skip") == Some(&Value::Bool(true));
        let after = (actions > 0).then(|| format!("action_{actions}"));
        if has("settle") {
            if !skip {
                effects
                    .settle(rt, piece, MAX_WAVES_PER_STEP)
                    .map_err(|e| format!("step {i} (settle): {e}"))?;
            }
            continue;
        }
        if has("label") || has("await") {
            continue;
        }
        if has("render") {
            if !skip {
                rt.read(piece, &at("render"))
                    .map_err(|e| format!("step {i} (render): {e}"))?;
            }
            continue;
        }
        if has("action") {
            actions += 1;
            let name = format!("action_{actions}");
            if skip {
                continue;
            }
            let event = step.get("event").cloned().unwrap_or_else(|| json!({}));
            let sent = rt
                .send(
                    piece,
                    &at("action"),
                    &format!("test/step{i}"),
                    event,
                    &author,
                )
                .map_err(|e| e.to_string())
                .and_then(|_| rt.settle(MAX_WAVES_PER_STEP).map_err(|e| e.to_string()));
            let failed = failures_since(rt, &mut failures_seen);
            if let Err(e) = sent {
                results.push(failed_result(name, None, e));
            } else if !failed.is_empty() && !tolerate_errors {
                results.push(failed_result(name, None, failed.join("\n")));
            }
            continue;
        }
        if has("assertion") {
            assertions += 1;
            let name = format!("assertion_{assertions}");
            if skip {
                results.push(TestResult {
                    name,
                    status: Status::Skipped,
                    after_action: after,
                    error: None,
                });
                continue;
            }
            let outcome = rt
                .read(piece, &at("assertion"))
                .map_err(|e| format!("Error reading assertion: {e}"))
                .and_then(|v| assertion_outcome(&v));
            results.push(match outcome {
                Ok(()) => TestResult {
                    name,
                    status: Status::Passed,
                    after_action: after,
                    error: None,
                },
                Err(e) => failed_result(name, after, e),
            });
            continue;
        }
        return Err(format!(
            "test step at index {i} must have an 'action', 'assertion', 'render', 'settle', \
             'label' or 'await' key; got {}",
            short(step)
        ));
    }
    // A derivation that failed while the last assertions were read.
    let failed = failures_since(rt, &mut failures_seen);
    if !failed.is_empty() && !tolerate_errors {
        results.push(failed_result(
            format!("{} runtime error(s) during the test", failed.len()),
            None,
            failed.join("\n"),
        ));
    }
    Ok(())
}

fn failed_result(name: String, after_action: Option<String>, error: String) -> TestResult {
    TestResult {
        name,
        status: Status::Failed,
        after_action,
        error: Some(error),
    }
}

/// Passes when `value` is an assert record whose `ok` holds (or, for a
/// `computed` assertion, is `true`); the error says why not, with the
/// operands the record carries.
pub fn assertion_outcome(value: &Value) -> Result<(), String> {
    let record = (|| {
        let ok = value.get("ok")?.as_bool()?;
        let source = value.get("source")?.as_str()?;
        let parts: Vec<(&str, &str)> = value
            .get("parts")?
            .as_array()?
            .iter()
            .filter_map(|p| Some((p.get("src")?.as_str()?, p.get("rendered")?.as_str()?)))
            .collect();
        Some((ok, source, parts))
    })();
    match record {
        Some((true, _, _)) => Ok(()),
        Some((false, source, parts)) if parts.is_empty() => Err(if source.is_empty() {
            "Expected true, got false".to_string()
        } else {
            format!("Expected true, got false: {source}")
        }),
        Some((false, source, parts)) => {
            let width = parts
                .iter()
                .map(|(s, _)| s.chars().count())
                .max()
                .unwrap_or(0);
            let mut out = source.to_string();
            for (src, rendered) in parts {
                out.push_str(&format!("\n  {src:<width$} = {rendered}"));
            }
            Err(out)
        }
        None if *value == Value::Bool(true) => Ok(()),
        None => Err(format!("Expected true, got {}", short(value))),
    }
}

/// A value as compact text, at most 200 characters.
fn short(v: &Value) -> String {
    let s = v.to_string();
    if s.chars().count() > 200 {
        format!("{}...", s.chars().take(197).collect::<String>())
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assertion_outcomes_read_records_and_booleans() {
        assert_eq!(
            assertion_outcome(&json!({"ok": true, "source": "a", "parts": []})),
            Ok(())
        );
        assert_eq!(assertion_outcome(&json!(true)), Ok(()));
        assert_eq!(
            assertion_outcome(&json!({"ok": false, "source": "n === 2", "parts": []})),
            Err("Expected true, got false: n === 2".into())
        );
        assert_eq!(
            assertion_outcome(&json!({"ok": false, "source": "a + b <= c", "parts": [
                {"src": "a + b", "rendered": "3"}, {"src": "c", "rendered": "2"}]})),
            Err("a + b <= c\n  a + b = 3\n  c     = 2".into())
        );
        assert_eq!(
            assertion_outcome(&json!(null)),
            Err("Expected true, got null".into())
        );
    }
}
