//! `spacewake ledger --space S`: a space's compute ledger by window and
//! bucket, its top actions by CPU, and its scheduled budget (`--set-budget-ms`
//! sets it). Through the running server when there is one, else on the data
//! directory ([`super::remote`]).

use super::remote::{OperatorArgs, Target};
use super::spaces::cpu_ms;
use super::table;
use crate::clock::{Clock, SystemClock};
use crate::human::{bytes, format_utc_ms, human_duration_ms, thousands};
use crate::operator::{self as op, BudgetSetting, BudgetView, LedgerView, Limit};
use serde_json::json;
use std::process::ExitCode;

pub fn run(
    args: &OperatorArgs,
    space: &str,
    top: usize,
    as_json: bool,
    set_budget_ms: Option<String>,
    set_effects: [Option<String>; 3],
) -> anyhow::Result<ExitCode> {
    let target = Target::find(args, "ledger")?;
    if set_effects.iter().any(Option::is_some) {
        let text = |i: usize| set_effects[i].clone().unwrap_or_default();
        let setting = op::EffectsSetting {
            in_flight: op::Knob::parse(&text(0), "--set-effects-in-flight")?,
            per_second: op::Knob::parse(&text(1), "--set-effects-per-second")?,
            bytes_per_second: op::Knob::parse(&text(2), "--set-effects-bytes-per-second")?,
        };
        setting.check()?;
        let v: op::EffectsView = match &target {
            Target::Server(r) => r.put(
                &format!("/api/operator/spaces/{space}/effects"),
                &setting.to_json(),
            )?,
            Target::Directory(l) => {
                let mut sp = op::open(&l.store, space)?;
                op::set_effects(&mut sp, setting, None)?
            }
        };
        println!("effect knobs of {space}: {}", v.describe());
        println!("{}", target.note());
        if set_budget_ms.is_none() {
            return Ok(ExitCode::SUCCESS);
        }
    }
    if let Some(v) = set_budget_ms {
        let setting = BudgetSetting::parse(&v)?;
        let b: BudgetView = match &target {
            Target::Server(r) => {
                let body = json!({ "budgetMs": setting.to_json() });
                r.put(
                    &format!("/api/operator/spaces/{space}/ledger/budget"),
                    &body,
                )?
            }
            Target::Directory(l) => {
                let mut sp = op::open(&l.store, space)?;
                op::set_budget(&mut sp, setting, None)?
            }
        };
        println!("scheduled CPU budget of {space}: {}", budget_text(&b));
        println!("{}", target.note());
        return Ok(ExitCode::SUCCESS);
    }
    let v: LedgerView = match &target {
        Target::Server(r) => r.get(&format!("/api/operator/spaces/{space}/ledger?top={top}"))?,
        Target::Directory(l) => op::ledger(&l.view(SystemClock.now_ms()), space, top)?,
    };
    if as_json {
        return super::table::print_json(&v);
    }
    println!(
        "space {space}: scheduled budget {} (ledger windows of {})",
        budget_text(&v.budget),
        window_text(v.window_ms)
    );
    println!("effect knobs: {}", v.effects.describe());
    if v.rows.is_empty() {
        println!("no compute recorded");
    } else {
        let rows: Vec<[String; 13]> = v
            .rows
            .iter()
            .map(|r| {
                let t = &r.totals;
                [
                    format_utc_ms(r.window_start_ms),
                    r.bucket.as_str().to_string(),
                    cpu_ms(t.cpu_us),
                    cpu_ms(t.wall_us),
                    thousands(t.waves),
                    thousands(t.actions),
                    thousands(t.commits),
                    thousands(t.budget_skips),
                    thousands(t.effects_requested),
                    thousands(t.effects_refused),
                    bytes(t.effect_bytes),
                    format!(
                        "{} / {}",
                        thousands(t.prompt_tokens),
                        thousands(t.completion_tokens)
                    ),
                    cpu_ms(t.model_wall_us),
                ]
            })
            .collect();
        table::print(
            &[
                "WINDOW (UTC)",
                "BUCKET",
                "CPU",
                "WALL",
                "WAVES",
                "ACTIONS",
                "COMMITS",
                "SKIPS",
                "EFFECTS",
                "REFUSED",
                "RECEIVED",
                "TOKENS IN / OUT",
                "MODEL TIME",
            ],
            &[2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12],
            &rows,
        );
        if !v.top.is_empty() {
            println!("\ntop {} actions by CPU:", v.top.len());
            let rows: Vec<[String; 6]> = v
                .top
                .iter()
                .map(|c| {
                    [
                        cpu_ms(c.cpu_us),
                        thousands(c.runs),
                        c.kind.clone(),
                        c.piece.clone(),
                        c.action.clone(),
                        c.pattern.clone(),
                    ]
                })
                .collect();
            table::print(
                &["CPU", "RUNS", "KIND", "PIECE", "ACTION", "PATTERN"],
                &[0, 1],
                &rows,
            );
        }
    }
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}

/// A window length: whole hours as hours (`24 h`), else a duration.
fn window_text(ms: u64) -> String {
    if ms > 0 && ms.is_multiple_of(3_600_000) {
        format!("{} h", thousands(ms / 3_600_000))
    } else {
        human_duration_ms(ms)
    }
}

/// A budget for people: what is set, and what applies when known.
fn budget_text(b: &BudgetView) -> String {
    let per = |us: u64| format!("{} per window", cpu_ms(us));
    let set = match (b.setting.as_str(), b.override_us) {
        ("unlimited", _) => "unlimited (override)".to_string(),
        ("override", Some(us)) => format!("{} (override)", per(us)),
        _ => "the host default".to_string(),
    };
    match (b.setting.as_str(), b.effective) {
        ("default", Some(Limit::CpuUs(us))) => format!("{set}: {}", per(us)),
        ("default", Some(Limit::Unlimited)) => format!("{set}: unlimited"),
        _ => set,
    }
}
