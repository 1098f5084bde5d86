//! `spacewake ledger`: a space's compute ledger and its top actions, and
//! the per-space scheduled budget override, on a data directory.

use crate::accounting::POLICY_SCHEDULED_BUDGET_US;
use anyhow::{bail, Context};
use std::path::Path;
use std::process::ExitCode;

pub fn run(
    data: &Path,
    space: &str,
    top: usize,
    set_budget_ms: Option<String>,
) -> anyhow::Result<ExitCode> {
    let store = super::open_existing(data)?;
    if store.directory().get(space)?.is_none() {
        bail!("no space {space:?} in {}", data.display());
    }
    let mut sp = store
        .open_space(space)
        .with_context(|| format!("opening space {space}"))?;
    if let Some(v) = set_budget_ms {
        let value = match v.as_str() {
            "none" => Some("none".to_string()),
            "default" => None,
            ms => {
                let ms: u64 = ms.parse().with_context(|| {
                    format!("--set-budget-ms takes milliseconds, `none` or `default` (got {ms:?})")
                })?;
                Some((ms * 1_000).to_string())
            }
        };
        sp.plane(|p| p.set_policy(POLICY_SCHEDULED_BUDGET_US, value.as_deref()))?;
        println!(
            "scheduled CPU budget of {space}: {}",
            match v.as_str() {
                "none" => "unlimited (override)".to_string(),
                "default" => "the host default".to_string(),
                ms => format!("{ms} ms per window (override)"),
            }
        );
        return Ok(ExitCode::SUCCESS);
    }
    let budget = sp.plane(|p| p.policy(POLICY_SCHEDULED_BUDGET_US))?;
    println!(
        "space {space}: scheduled budget {}",
        match budget.as_deref() {
            None => "host default".to_string(),
            Some("none") => "unlimited".to_string(),
            Some(us) => format!(
                "{:.1} ms per window",
                us.parse::<f64>().unwrap_or(0.0) / 1_000.0
            ),
        }
    );
    let rows = sp.ledger()?;
    if rows.is_empty() {
        println!("no compute recorded");
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "{:<22} {:<10} {:>12} {:>12} {:>8} {:>9} {:>8} {:>7}",
        "window (UTC)", "bucket", "cpu ms", "wall ms", "waves", "actions", "commits", "skips"
    );
    for r in rows {
        println!(
            "{:<22} {:<10} {:>12.3} {:>12.3} {:>8} {:>9} {:>8} {:>7}",
            crate::human::format_utc_ms(r.window_start_ms),
            r.bucket.as_str(),
            r.totals.cpu_us as f64 / 1_000.0,
            r.totals.wall_us as f64 / 1_000.0,
            r.totals.waves,
            r.totals.actions,
            r.totals.commits,
            r.totals.budget_skips
        );
    }
    let costs = sp.action_costs(top)?;
    if !costs.is_empty() {
        println!("\ntop {} actions by CPU:", costs.len());
        println!(
            "{:>10} {:>7} {:<11} {:<24} {:<30} pattern",
            "cpu ms", "runs", "kind", "piece", "action"
        );
        for c in costs {
            println!(
                "{:>10.3} {:>7} {:<11} {:<24} {:<30} {}",
                c.cpu_us as f64 / 1_000.0,
                c.runs,
                c.kind,
                c.piece,
                c.action,
                c.pattern
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}
