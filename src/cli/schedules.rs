//! `spacewake schedules …`: operator commands on schedule entries.
//!
//! - `list` — one line per entry: space, piece, entry, interval, next due,
//!   last fired, attempts, status, fired/missed counts.
//! - `trigger` — fire an extra occurrence of an entry now.
//! - `pause` / `resume` — stop and restart an entry; a paused entry stays
//!   indexed.
//! - `fires` — the bounded history of an entry's recent fires.
//!
//! Entries are addressed as `--space S --piece P --entry N`, where `N` is the
//! entry's position in the piece's `[SCHEDULE]` list, counted from 0.
//!
//! # Where they act
//! Through the running server's operator API when one holds the data
//! directory (or `--server` names one): a triggered entry then fires
//! within milliseconds, since the server's waker is told. With no server,
//! on the data directory itself, holding its lock for the command
//! ([`super::remote`]). The last line of the output says which.
//!
//! # Which spaces `list` opens
//! The host directory knows each space's earliest wake but not its entries,
//! so listing means opening space files. By default `list` opens only the
//! spaces whose directory row has a wake set (every space with an active
//! entry or a pending retry has one: the directory may be early, never
//! late). A space whose entries are all paused has no wake, so it is found
//! only with `--all` (opens every space) or by naming it with `--space`.
//!
//! # Invariants
//! - Time comes from the system clock (or the server's), read once per
//!   command.
//! - Bad input (unknown space, piece or entry; not a data directory) ends
//!   in one sentence on stderr and exit status 1, never a panic.
//! - Nothing here creates a data directory.

use super::remote::{OperatorArgs, Target};
use super::table;
use crate::clock::{Clock, SystemClock};
use crate::human::{
    format_utc_ms, human_duration_ms, plural, relative, thousands, truncate_message,
};
use crate::operator::{self as op, EntryAction, EntryChange, EntryView, FiresView, ScheduleList};
use crate::schedule::EntryState;
use crate::store::{FireRecord, ScheduleStatus};
use serde_json::json;
use std::process::ExitCode;

/// One schedule entry of one piece.
#[derive(Debug, clap::Args)]
pub struct EntryArgs {
    #[command(flatten)]
    pub op: OperatorArgs,
    /// The space holding the piece.
    #[arg(long)]
    pub space: String,
    /// The piece id (as printed by `deploy` and `schedules list`).
    #[arg(long)]
    pub piece: String,
    /// The entry's position in the piece's [SCHEDULE] list, from 0.
    #[arg(long)]
    pub entry: u32,
    /// Print the answer as JSON (the operator API's shape) instead of text.
    #[arg(long)]
    pub json: bool,
}

impl EntryArgs {
    fn name(&self) -> String {
        format!(
            "space {} piece {} entry {}",
            self.space, self.piece, self.entry
        )
    }

    fn api_path(&self, action: &str) -> String {
        format!(
            "/api/operator/spaces/{}/schedules/{}/{}/{action}",
            self.space, self.piece, self.entry
        )
    }
}

#[derive(Debug, clap::Subcommand)]
pub enum SchedulesCommand {
    /// List schedule entries: interval, next due, last fired, attempts, status.
    List {
        #[command(flatten)]
        op: OperatorArgs,
        /// Only these spaces (repeatable); opened even if they have no wake set.
        #[arg(long)]
        space: Vec<String>,
        /// Open every space, to find entries that are all paused (slower).
        #[arg(long, conflicts_with = "space")]
        all: bool,
        /// Print the list as JSON (the operator API's shape) instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// Fire an extra occurrence of an entry now, beside its cadence (the
    /// next period stays due when it was); a running server fires it at once.
    Trigger(EntryArgs),
    /// Stop an entry from firing (it stays indexed).
    Pause(EntryArgs),
    /// Let a paused entry fire again; an overdue one fires once, missed periods coalesced.
    Resume(EntryArgs),
    /// Show an entry's recent fires (a bounded history, oldest first).
    Fires(EntryArgs),
}

pub fn run(which: SchedulesCommand) -> anyhow::Result<ExitCode> {
    match which {
        SchedulesCommand::List {
            op,
            space,
            all,
            json,
        } => list(&op, &space, all, json),
        SchedulesCommand::Trigger(e) => change(&e, EntryAction::Trigger),
        SchedulesCommand::Pause(e) => change(&e, EntryAction::Pause),
        SchedulesCommand::Resume(e) => change(&e, EntryAction::Resume),
        SchedulesCommand::Fires(e) => fires(&e),
    }
}

// ----- commands -------------------------------------------------------------

fn list(
    args: &OperatorArgs,
    only: &[String],
    all: bool,
    as_json: bool,
) -> anyhow::Result<ExitCode> {
    let target = Target::find(args, "schedules list")?;
    let list: ScheduleList = match &target {
        Target::Server(r) => {
            let mut query = Vec::new();
            if !only.is_empty() {
                query.push(format!("space={}", only.join(",")));
            }
            if all {
                query.push("all=true".into());
            }
            let q = if query.is_empty() {
                String::new()
            } else {
                format!("?{}", query.join("&"))
            };
            r.get(&format!("/api/operator/schedules{q}"))?
        }
        Target::Directory(l) => op::schedules(&l.view(SystemClock.now_ms()), only, all)?,
    };
    for (id, why) in &list.unreadable {
        eprintln!("warning: cannot read the schedule of space {id:?}: {why}");
    }
    if as_json {
        return table::print_json(&list);
    }
    let now_ms = list.now_ms;
    let lines: Vec<[String; 10]> = list.entries.iter().map(|e| list_line(e, now_ms)).collect();
    let spaces_with_entries = list
        .entries
        .iter()
        .map(|e| &e.space)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    if lines.is_empty() {
        println!("no schedule entries");
    } else {
        table::print(
            &[
                "SPACE",
                "PIECE",
                "ENTRY",
                "INTERVAL",
                "NEXT DUE (UTC)",
                "LAST FIRED (UTC)",
                "ATTEMPTS",
                "STATUS",
                "FIRED",
                "MISSED",
            ],
            &[2, 6, 8, 9],
            &lines,
        );
        println!(
            "{} {} in {} {}",
            thousands(lines.len() as u64),
            plural(lines.len(), "entry", "entries"),
            thousands(spaces_with_entries as u64),
            plural(spaces_with_entries, "space", "spaces"),
        );
    }
    if !list.invalid.is_empty() {
        // Never indexed, so never due: shown apart, each with why.
        println!(
            "{} {} can never fire:",
            thousands(list.invalid.len() as u64),
            plural(list.invalid.len(), "entry", "entries")
        );
        for e in &list.invalid {
            println!(
                "  {} {} entry {}: invalid: {}",
                e.space, e.piece, e.entry, e.reason
            );
        }
    }
    if list.wake_set_only {
        println!(
            "(looked in the {} {} with a wake set; entries that are all paused are found with --all)",
            thousands(list.looked_in as u64),
            plural(list.looked_in, "space", "spaces")
        );
    }
    if list.quarantined > 0 {
        println!(
            "({} quarantined {} skipped)",
            thousands(list.quarantined as u64),
            plural(list.quarantined, "space", "spaces")
        );
    }
    println!("{}", target.note());
    if !list.unreadable.is_empty() {
        let n = list.unreadable.len();
        eprintln!(
            "error: {n} {} could not be read (see the warnings above)",
            plural(n, "space", "spaces")
        );
        return Ok(ExitCode::FAILURE);
    }
    Ok(ExitCode::SUCCESS)
}

fn list_line(e: &EntryView, now_ms: u64) -> [String; 10] {
    let r = &e.row;
    let interval = if let Some(field) = &e.at {
        format!("at {field}")
    } else if let Some(expr) = &e.cron {
        format!(
            "cron \"{expr}\" {}",
            e.time_zone.as_deref().unwrap_or("UTC")
        )
    } else if r.backoff_factor > 1 {
        format!(
            "{} min (backed off ×{} = {} min)",
            thousands(u64::from(r.interval_minutes)),
            r.backoff_factor,
            thousands(e.effective_interval_minutes)
        )
    } else {
        format!("{} min", thousands(u64::from(r.interval_minutes)))
    };
    let mut status = r.status.as_str().to_string();
    // Triggered occurrences not yet tried are planned like retries.
    let planned = |tried: bool| {
        r.pending
            .iter()
            .filter(|p| (p.attempts > 0) == tried)
            .filter_map(|p| p.retry_due_ms)
            .min()
    };
    if let Some(at) = planned(false) {
        status.push_str(&format!(", triggered for {}", format_utc_ms(at)));
    }
    if let Some(retry) = planned(true) {
        status.push_str(&format!(", retry at {}", format_utc_ms(retry)));
    }
    [
        e.space.clone(),
        r.piece.clone(),
        match &e.callback_name {
            Some(name) => format!("{} ({name})", r.entry),
            None => r.entry.to_string(),
        },
        interval,
        match &e.next_due_local {
            _ if r.next_due_ms >= crate::schedule::entry::NEVER_MS => match e.set_for_ms {
                Some(t) => format!("- (fired for {}; waits for a new time)", format_utc_ms(t)),
                None => "- (no time set)".into(),
            },
            Some(local) => format!(
                "{} ({local}, {})",
                format_utc_ms(r.next_due_ms),
                relative(r.next_due_ms, now_ms)
            ),
            None => format!(
                "{} ({})",
                format_utc_ms(r.next_due_ms),
                relative(r.next_due_ms, now_ms)
            ),
        },
        r.last_fired_ms.map_or("-".into(), format_utc_ms),
        r.attempts().to_string(),
        status,
        thousands(r.fired_count),
        thousands(r.missed_count),
    ]
}

/// Trigger, pause or resume one entry, and say what changed.
fn change(args: &EntryArgs, action: EntryAction) -> anyhow::Result<ExitCode> {
    let target = Target::find(&args.op, &format!("schedules {}", action.as_str()))?;
    let c: EntryChange = match &target {
        Target::Server(r) => r.post(&args.api_path(action.as_str()), &json!({}))?,
        Target::Directory(l) => {
            let mut sp = op::open(&l.store, &args.space)?;
            action.apply(&mut sp, &args.piece, args.entry, SystemClock.now_ms())?
        }
    };
    if args.json {
        return table::print_json(&c);
    }
    let name = args.name();
    let (before, after) = (&c.before.row, &c.after.row);
    let wake = match c.space_wake_ms {
        None => "none (nothing active)".to_string(),
        Some(t) => format!("{} ({})", format_utc_ms(t), relative(t, c.now_ms)),
    };
    let server = matches!(target, Target::Server(_));
    match action {
        EntryAction::Trigger => {
            println!(
                "triggered {name}: an extra occurrence fires now; the next period stays due at {} ({})",
                format_utc_ms(after.next_due_ms),
                relative(after.next_due_ms, c.now_ms)
            );
            if before.status != ScheduleStatus::Active {
                println!(
                    "It was {}; triggering made it active again.",
                    before.status.as_str()
                );
            }
            println!("The space's wake is now {wake}.");
            if server {
                println!("The server's waker was told: it fires within milliseconds.");
            } else {
                println!("The host fires it when it next starts.");
            }
        }
        EntryAction::Pause => {
            if before.status == ScheduleStatus::Paused {
                println!("{name} is already paused");
            } else {
                println!("paused {name}: it stays indexed and does not fire until resumed");
                println!("The space's wake is now {wake}.");
            }
        }
        EntryAction::Resume => {
            if before.status == ScheduleStatus::Active {
                println!(
                    "{name} is already active; next due {}",
                    format_utc_ms(before.next_due_ms)
                );
            } else if after.next_due_ms <= c.now_ms {
                println!(
                    "resumed {name}: it is overdue (due {}), so it fires at the next wake pass, \
                     the periods missed while it was {} coalesced into that one wake",
                    format_utc_ms(after.next_due_ms),
                    before.status.as_str()
                );
                println!("The space's wake is now {wake}.");
            } else {
                println!(
                    "resumed {name}: next due {} ({})",
                    format_utc_ms(after.next_due_ms),
                    relative(after.next_due_ms, c.now_ms)
                );
                println!("The space's wake is now {wake}.");
            }
        }
    }
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}

fn fires(args: &EntryArgs) -> anyhow::Result<ExitCode> {
    let target = Target::find(&args.op, "schedules fires")?;
    let v: FiresView = match &target {
        Target::Server(r) => r.get(&args.api_path("fires"))?,
        Target::Directory(l) => op::fires(&l.store, &args.space, &args.piece, args.entry)?,
    };
    if args.json {
        return table::print_json(&v);
    }
    let name = args.name();
    let row = &v.entry.row;
    if v.fires.is_empty() {
        println!(
            "{name} has not fired yet (fired {} times in all; next due {})",
            thousands(row.fired_count),
            format_utc_ms(row.next_due_ms)
        );
    } else {
        println!(
            "recent fires of {name}, oldest first (the newest {} are kept; {} fired in all):",
            v.kept,
            thousands(row.fired_count)
        );
        let lines: Vec<[String; 10]> = v.fires.iter().map(fire_line).collect();
        table::print(
            &[
                "TIME (UTC)",
                "EVENT",
                "PERIOD",
                "DUE (UTC)",
                "LATENESS",
                "MISSED",
                "OUTCOME",
                "TOOK",
                "CPU",
                "ERROR",
            ],
            &[2, 4, 5, 7, 8],
            &lines,
        );
        // What each callback logged, under its event.
        for f in v.fires.iter().filter(|f| !f.run.logs.is_empty()) {
            println!();
            println!("{} logged:", f.event_id);
            for l in &f.run.logs {
                println!("  {:<5} {}", l.level, l.text);
            }
        }
    }
    println!("{}", target.note());
    Ok(ExitCode::SUCCESS)
}

fn fire_line(f: &FireRecord) -> [String; 10] {
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".to_string());
    [
        format_utc_ms(f.fired_ms),
        f.event_id.clone(),
        thousands(f.period),
        format_utc_ms(f.due_ms),
        human_duration_ms(f.fired_ms.saturating_sub(f.due_ms)),
        thousands(f.missed_periods),
        f.outcome.clone(),
        or_dash(f.run.duration_us.map(super::spaces::cpu_ms)),
        or_dash(f.run.cpu_us.map(super::spaces::cpu_ms)),
        or_dash(f.run.error.as_deref().map(|e| truncate_message(e, 80))),
    ]
}
